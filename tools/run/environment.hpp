// The environment distcomm-run gives each rank: the caller's environment without the variables
// other launchers use to say who a process is, plus DISTCOMM_* and torchrun-style variables that
// describe this job (rank, size, master address and port, authentication token).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace distcomm::launcher {

// An ordered set of NAME=value entries (the caller's order is kept; new names go at the end).
class environment {
 public:
  environment() = default;
  // From a null-terminated array of "NAME=value" strings, such as `environ`.
  explicit environment(const char* const* envp);

  // The value of name, or nullptr when it is unset.
  const char* get(const std::string& name) const;
  void set(const std::string& name, const std::string& value);
  void unset(const std::string& name);
  // Removes every variable whose name satisfies pred(name).
  template <class Pred>
  void unset_if(Pred pred) {
    std::vector<std::string> kept;
    for (auto& e : entries_) {
      if (!pred(e.substr(0, e.find('=')))) kept.push_back(std::move(e));
    }
    entries_ = std::move(kept);
  }

  // "NAME=value" strings, for execve.
  const std::vector<std::string>& entries() const noexcept { return entries_; }

 private:
  std::vector<std::string> entries_;
};

// True for a variable that another launcher (Open MPI, MPICH/Hydra, PMIx, Slurm, torchrun,
// TF_CONFIG, AzureML) sets to say which rank a process is, how many there are or where the
// master is. Children never inherit these, so world detection can only find distcomm-run's world.
bool is_foreign_identity(const std::string& name);

struct job_settings {
  int np = 1;
  std::string backend;   // DISTCOMM_BACKEND for the children; empty keeps the caller's
  bool no_auth = false;  // children get no DISTCOMM_AUTH_TOKEN / _FILE at all
  std::string job_id;    // DISTCOMM_JOB_ID for the children; empty keeps the caller's
};

// The variables every rank shares. `port` is the master port; `token` the authentication token
// to set, or empty to set none (the caller's DISTCOMM_AUTH_TOKEN / _FILE pass through unless
// settings.no_auth).
environment job_environment(const environment& caller, const job_settings& settings, int port,
                            const std::string& token);

// job plus the variables that differ per rank (every rank is local: local rank = rank).
environment rank_environment(const environment& job, int rank);

// --backend mpi: mpirun starts the ranks and tells each its rank and size, so the environment
// mpirun gets is `job` without the rank, size and torchrun-style variables distcomm-run would set
// (every DISTCOMM_* setting of the job stays: backend, master address and port, token). Unless
// the caller chose a single-copy mechanism for Open MPI's shared-memory transport, it is set to
// `none` when `single_copy_works` is false (see cross_process_reads_work()).
environment mpirun_environment(const environment& job, bool single_copy_works);

// What Open MPI's mpirun adds for rank `rank` of an `np`-rank job on this machine (--print-world
// shows the world each rank will detect).
environment open_mpi_rank_environment(const environment& mpirun_env, int rank, int np);

struct mpirun_settings {
  std::string mpirun;  // Open MPI's mpirun (path, or a name looked up in PATH)
  int np = 1;
  bool as_root = false;     // adds --allow-run-as-root
  bool tag_output = false;  // adds --tag-output
};

// mpirun's command line: -np N --oversubscribe [--allow-run-as-root] [--tag-output], one
// `-x NAME` per DISTCOMM_* variable of `env` (exported to every rank, on any node), `--`, then
// the program and its arguments.
std::vector<std::string> mpirun_command(const mpirun_settings& settings, const environment& env,
                                        const std::vector<std::string>& program);

// True when distcomm-run must generate a token: authentication is on and the caller did not
// bring its own DISTCOMM_AUTH_TOKEN or DISTCOMM_AUTH_TOKEN_FILE.
bool needs_token(const environment& caller, bool no_auth);

// True when distcomm-run hosts the job's store: the caller named none (DISTCOMM_STORE_ADDR, or an
// etcd cluster in DISTCOMM_STORE).
bool hosts_store(const environment& caller);
// What distcomm-run calls the job (DISTCOMM_JOB_ID) when the caller did not say: "distcomm-run:"
// and 16 random hex digits, so that a rank of another job is refused by this job's store.
std::string new_job_id();

// A TCP port on 127.0.0.1 that was free a moment ago: binds port 0, reads the kernel's choice back
// and closes the socket. Another process may take the port before rank 0 binds it (the race of
// every launcher that picks a port this way); --master-port avoids it. Throws std::system_error.
int find_free_port();

}  // namespace distcomm::launcher
