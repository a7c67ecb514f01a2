#include "environment.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "distcomm/rendezvous/tcp_store.hpp"  // random_token

namespace distcomm::launcher {
namespace {

// Set by some launcher to say who a process is. Removed from the children's environment: an outer
// mpirun / srun / torchrun (distcomm-run started inside an allocation or a job step) would
// otherwise leave its own rank and size there, and world detection would see two launchers that
// disagree. Tuning variables (OMPI_MCA_*, SLURM_JOB_*, NCCL_*, ...) are not identity and pass on.
constexpr std::array<const char*, 21> identity_names = {
    // torchrun, Kubeflow PyTorchJob, AzureML PyTorch (set afresh below where they apply)
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
    "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    // MPICH / Intel MPI (Hydra)
    "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
    // Slurm
    "SLURM_PROCID", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_LOCALID", "SLURM_NODEID",
    // TensorFlow
    "TF_CONFIG",
    // AzureML / Batch AI master hints (read only with Open MPI's variables)
    "AZ_BATCH_MASTER_NODE", "AZ_BATCHAI_MPI_MASTER_NODE"};

// Whole families: Open MPI's rank variables, and PMI / PMIx, which also carry the address of the
// outer process manager (an MPI program that found them would try to join the outer job).
constexpr std::array<const char*, 3> identity_prefixes = {"OMPI_COMM_WORLD_", "PMI_", "PMIX_"};

bool starts_with(const std::string& s, const char* prefix) {
  return s.compare(0, std::strlen(prefix), prefix) == 0;
}

std::string::size_type name_length(const std::string& entry) {
  const auto eq = entry.find('=');
  return eq == std::string::npos ? entry.size() : eq;
}

bool has_name(const std::string& entry, const std::string& name) {
  return name_length(entry) == name.size() && entry.compare(0, name.size(), name) == 0;
}

}  // namespace

environment::environment(const char* const* envp) {
  for (; envp != nullptr && *envp != nullptr; ++envp) {
    std::string entry(*envp);
    if (entry.find('=') == std::string::npos) continue;  // not NAME=value: execve would pass it
    unset(entry.substr(0, name_length(entry)));          // on; keep the last of duplicates
    entries_.push_back(std::move(entry));
  }
}

const char* environment::get(const std::string& name) const {
  for (const auto& e : entries_) {
    if (has_name(e, name)) return e.c_str() + name.size() + 1;
  }
  return nullptr;
}

void environment::set(const std::string& name, const std::string& value) {
  for (auto& e : entries_) {
    if (has_name(e, name)) {
      e = name + '=' + value;
      return;
    }
  }
  entries_.push_back(name + '=' + value);
}

void environment::unset(const std::string& name) {
  unset_if([&](const std::string& n) { return n == name; });
}

bool is_foreign_identity(const std::string& name) {
  for (const char* n : identity_names) {
    if (name == n) return true;
  }
  for (const char* p : identity_prefixes) {
    if (starts_with(name, p)) return true;
  }
  return false;
}

environment job_environment(const environment& caller, const job_settings& settings, int port,
                            const std::string& token) {
  environment env = caller;
  env.unset_if(is_foreign_identity);
  const std::string addr = "127.0.0.1";
  const std::string port_text = std::to_string(port);
  env.set("DISTCOMM_WORLD_SIZE", std::to_string(settings.np));
  env.set("DISTCOMM_LOCAL_WORLD_SIZE", std::to_string(settings.np));
  env.set("DISTCOMM_NODE_RANK", "0");
  env.set("DISTCOMM_MASTER_ADDR", addr);
  env.set("DISTCOMM_MASTER_PORT", port_text);
  env.set("WORLD_SIZE", std::to_string(settings.np));
  env.set("LOCAL_WORLD_SIZE", std::to_string(settings.np));
  env.set("MASTER_ADDR", addr);
  env.set("MASTER_PORT", port_text);
  if (!settings.backend.empty()) env.set("DISTCOMM_BACKEND", settings.backend);
  if (!settings.job_id.empty()) env.set("DISTCOMM_JOB_ID", settings.job_id);
  if (settings.no_auth) {
    env.unset("DISTCOMM_AUTH_TOKEN");
    env.unset("DISTCOMM_AUTH_TOKEN_FILE");
  } else if (!token.empty()) {
    env.set("DISTCOMM_AUTH_TOKEN", token);
  }
  return env;
}

environment rank_environment(const environment& job, int rank) {
  environment env = job;
  const std::string r = std::to_string(rank);
  env.set("DISTCOMM_RANK", r);
  env.set("DISTCOMM_LOCAL_RANK", r);
  env.set("RANK", r);
  env.set("LOCAL_RANK", r);
  return env;
}

environment mpirun_environment(const environment& job, bool single_copy_works) {
  environment env = job;
  for (const char* name : {"DISTCOMM_RANK", "DISTCOMM_LOCAL_RANK", "DISTCOMM_WORLD_SIZE",
                           "DISTCOMM_LOCAL_WORLD_SIZE", "DISTCOMM_NODE_RANK"}) {
    env.unset(name);
  }
  env.unset_if(is_foreign_identity);  // job's WORLD_SIZE, MASTER_ADDR, ... (torchrun-style)
  // Open MPI 4's shared-memory transport (vader) copies large messages straight from the other
  // process (process_vm_readv); where that is refused every such message fails, so fall back to
  // copying through the shared segment. The caller's own choice wins.
  const std::string single_copy = "OMPI_MCA_btl_vader_single_copy_mechanism";
  if (!single_copy_works && env.get(single_copy) == nullptr) env.set(single_copy, "none");
  return env;
}

environment open_mpi_rank_environment(const environment& mpirun_env, int rank, int np) {
  environment env = mpirun_env;
  env.set("OMPI_COMM_WORLD_RANK", std::to_string(rank));
  env.set("OMPI_COMM_WORLD_SIZE", std::to_string(np));
  env.set("OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(rank));
  env.set("OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(np));
  return env;
}

std::vector<std::string> mpirun_command(const mpirun_settings& settings, const environment& env,
                                        const std::vector<std::string>& program) {
  // --oversubscribe: -np may exceed the cores, as it may with distcomm-run itself.
  std::vector<std::string> cmd = {settings.mpirun, "-np", std::to_string(settings.np),
                                  "--oversubscribe"};
  if (settings.as_root) cmd.emplace_back("--allow-run-as-root");
  if (settings.tag_output) cmd.emplace_back("--tag-output");
  // Local ranks inherit mpirun's environment anyway; -x also carries these to other nodes.
  for (const auto& e : env.entries()) {
    if (starts_with(e, "DISTCOMM_")) {
      cmd.emplace_back("-x");
      cmd.push_back(e.substr(0, name_length(e)));
    }
  }
  cmd.emplace_back("--");
  cmd.insert(cmd.end(), program.begin(), program.end());
  return cmd;
}

bool needs_token(const environment& caller, bool no_auth) {
  return !no_auth && caller.get("DISTCOMM_AUTH_TOKEN") == nullptr &&
         caller.get("DISTCOMM_AUTH_TOKEN_FILE") == nullptr;
}

bool hosts_store(const environment& caller) {
  for (const char* name : {"DISTCOMM_STORE_ADDR", "DISTCOMM_STORE"}) {
    const char* named = caller.get(name);
    if (named != nullptr && *named != '\0') return false;
  }
  return true;
}

std::string new_job_id() { return "distcomm-run:" + random_token(8); }

int find_free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int e = errno;
    ::close(fd);
    throw std::system_error(e, std::generic_category(), "cannot find a free port on 127.0.0.1");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace distcomm::launcher
