// distcomm-store: the key-value store of one job, as a process of its own, for launchers that
// cannot host it (mpirun across hosts, Slurm, Kubernetes): started first, it outlives any rank,
// so that losing rank 0 or its host does not end the job (docs/FAULTS.md, "The job's store").
//   distcomm-store --port 29400 --world-size 8 --job-id train-42 &
//   DISTCOMM_STORE_ADDR=storehost:29400 srun ... ./trainer
// Authenticates with the ranks' own DISTCOMM_AUTH_TOKEN / DISTCOMM_AUTH_TOKEN_FILE. See
// tools/README.md for every option.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>

#include "distcomm/config.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/log.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"
#include "distcomm/rendezvous/tcp_store.hpp"

namespace {

constexpr int exit_failure = 1;
constexpr int exit_usage = 2;

struct options {
  std::string host;  // "": every interface
  int port = 0;
  int world_size = 0;
  std::string job_id;
  bool no_auth = false;
  std::size_t max_connections = distcomm::tcp_store_server::automatic_max_connections;
  std::string port_file;
  double timeout = 0;
};

void complain(const std::string& what) {
  std::fprintf(stderr, "distcomm-store: %s\n", what.c_str());
}

// Writes the port to `path` whole or not at all (a temporary file renamed into place), so that a
// script polling for the file never reads half a number.
void write_port_file(const std::string& path, int port) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const std::string text = std::to_string(port) + "\n";
  const bool written =
      fd >= 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int e = errno;
  if (fd >= 0) ::close(fd);
  if (!written || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw distcomm::error("cannot write the port to --port-file " + path + ": " +
                          std::strerror(written ? errno : e));
  }
}

// The address ranks are told to use: the host as given, or this machine's name when the server
// listens on every interface.
std::string address_of(const std::string& host, int port) {
  std::string name = host;
  if (name.empty() || name == "0.0.0.0" || name == "::") {
    char buf[256] = {};
    name = ::gethostname(buf, sizeof buf - 1) == 0 && buf[0] != '\0' ? buf : "localhost";
  }
  if (name.find(':') != std::string::npos) name = "[" + name + "]";
  return name + ":" + std::to_string(port);
}

// Blocks until SIGINT, SIGTERM or SIGHUP, or until `timeout` seconds (0: no limit) have passed.
// Returns the signal, or 0 at the timeout.
int wait_for_signal(const sigset_t& set, double timeout) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
  for (;;) {
    if (timeout <= 0) {
      int sig = 0;
      if (::sigwait(&set, &sig) == 0) return sig;
      continue;
    }
    const std::chrono::duration<double> left = until - std::chrono::steady_clock::now();
    if (left.count() <= 0) return 0;
    timespec ts{};
    ts.tv_sec = static_cast<time_t>(left.count());
    ts.tv_nsec = static_cast<long>((left.count() - static_cast<double>(ts.tv_sec)) * 1e9);
    const int sig = ::sigtimedwait(&set, nullptr, &ts);
    if (sig > 0) return sig;
    if (errno == EAGAIN) return 0;
  }
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  CLI::App app{
      "distcomm-store: the key-value store of one DistComm job, as a process of its own.\n"
      "Start it first; give the ranks DISTCOMM_STORE_ADDR=host:port and the same "
      "DISTCOMM_AUTH_TOKEN (or _FILE). Any rank, rank 0 included, may then be lost."};
  app.name("distcomm-store");
  app.add_option("--host", o.host,
                 "Address to listen on (numeric, or a name); default: every interface");
  app.add_option("--port", o.port, "Port to listen on; 0 (the default) picks a free one")
      ->check(CLI::Range(0, 65535));
  app.add_option("--world-size", o.world_size,
                 "The job's number of ranks: ranks of a job of another size are refused")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--job-id", o.job_id,
                 "The job's id (DISTCOMM_JOB_ID of its ranks; default: that variable here): "
                 "ranks of another job are refused");
  app.add_flag("--no-auth", o.no_auth,
               "Serve without authentication (otherwise DISTCOMM_AUTH_TOKEN or "
               "DISTCOMM_AUTH_TOKEN_FILE must be set)");
  app.add_option("--max-connections", o.max_connections,
                 "Connections served at once (default: twice the world size + a quarter + 64)");
  app.add_option("--port-file", o.port_file, "Write the port here once listening");
  app.add_option("--timeout", o.timeout, "Stop after S seconds (0, the default: at a signal)")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);

  try {
    distcomm::set_log_level(distcomm::config::from_env().log);
    const distcomm::env_lookup getenv = distcomm::config::process_environment;
    std::string token = distcomm::auth_token_from_env(getenv);
    if (o.no_auth) {
      token.clear();
    } else if (token.empty()) {
      complain(
          "no token: set DISTCOMM_AUTH_TOKEN or DISTCOMM_AUTH_TOKEN_FILE as the ranks will "
          "(e.g. DISTCOMM_AUTH_TOKEN=$(openssl rand -hex 32)), or pass --no-auth to let anyone "
          "who reaches the port into the job");
      return exit_usage;
    }
    distcomm::world_info world;
    world.size = o.world_size;
    distcomm::job_identity job = distcomm::job_identity_from_env(world, getenv);
    if (!o.job_id.empty()) job.id = o.job_id;

    // Signals are taken by sigwait below: blocked before the server's thread starts, so that it
    // inherits the mask and no handler runs on it.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    for (const int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stop_signals, s);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

    distcomm::tcp_store_server server(o.host, o.port, token, job, o.max_connections);
    if (!o.port_file.empty()) write_port_file(o.port_file, server.port());
    const std::string where = address_of(o.host, server.port());
    std::string serves = job.id.empty() ? "any job" : "job '" + job.id + "'";
    if (job.world_size > 0) serves += " of " + std::to_string(job.world_size) + " ranks";
    std::fprintf(stderr, "distcomm-store: serving %s on %s (%s); stop it with SIGTERM\n",
                 serves.c_str(), where.c_str(),
                 token.empty() ? "no authentication" : "authenticated");
    std::printf("DISTCOMM_STORE_ADDR=%s\n", where.c_str());
    std::fflush(stdout);
    const int sig = wait_for_signal(stop_signals, o.timeout);
    const std::string why = sig == 0 ? "--timeout passed" : "got " + std::string(::strsignal(sig));
    std::fprintf(stderr, "distcomm-store: %s; stopping (%zu connections open)\n", why.c_str(),
                 server.connections());
    return 0;
  } catch (const distcomm::invalid_argument_error& e) {
    complain(e.what());
    return exit_usage;
  } catch (const std::exception& e) {
    complain(e.what());
    return exit_failure;
  }
}
