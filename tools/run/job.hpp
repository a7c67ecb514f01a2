// Starts the ranks of a distcomm-run job and watches them until every one, and every process they
// started, is gone: forwards signals, stops the job on the first failure or at --timeout
// (SIGTERM, then SIGKILL after the grace period) and decides the launcher's exit code.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "environment.hpp"

namespace distcomm::launcher {

struct job_options {
  std::vector<std::string> command;          // program (looked up in PATH) and its arguments
  std::chrono::duration<double> timeout{0};  // whole-job limit; 0 = none
  std::chrono::duration<double> grace{5};    // SIGTERM -> SIGKILL delay
  bool tag_output = false;                   // prefix every output line with "[rank] "
  bool elastic = false;  // a failing rank does not stop the others (the survivors go on)
  // Non-empty when the one process started is a launcher that starts the ranks itself (mpirun
  // for --backend mpi): messages name it instead of "rank 0".
  std::string launcher;
};

// Exit codes of the launcher itself (a failing rank's own code is passed on unchanged).
constexpr int exit_internal_error = 1;    // distcomm-run could not do its job (pipe, fork, ...)
constexpr int exit_usage = 2;             // bad command line or DISTCOMM_* configuration
constexpr int exit_timeout = 124;         // --timeout expired (as timeout(1))
constexpr int exit_cannot_execute = 126;  // program found but not executable
constexpr int exit_not_found = 127;       // program not found
constexpr int exit_signal_base = 128;     // + signal number, as a shell reports it

// Runs one process per environment (rank i gets envs[i]) and returns the launcher's exit code.
// Throws std::system_error only before any process was started.
int run_job(const job_options& options, const std::vector<environment>& envs);

}  // namespace distcomm::launcher
