// The pieces of distcomm-run that need no launch: the line tagger of --tag-output, the
// environment builder (which variables the ranks get, which they lose), mpirun's command line for
// --backend mpi, and the small process helpers (PATH lookup, a command's output).
#include <doctest/doctest.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "distcomm/rendezvous/tcp_store.hpp"  // random_token
#include "distcomm/rendezvous/world.hpp"
#include "environment.hpp"
#include "output.hpp"
#include "posix.hpp"

using namespace distcomm::launcher;

TEST_CASE("line_tagger: complete lines are tagged, the rest waits") {
  line_tagger t("[3] ");
  CHECK(t.feed("ab", 2) == "");
  CHECK(t.feed("c\nde", 4) == "[3] abc\n");
  CHECK(t.feed("f\ng\n", 4) == "[3] def\n[3] g\n");
  CHECK(t.flush() == "");
  CHECK(t.feed("\n", 1) == "[3] \n");  // an empty line is still a line
}

TEST_CASE("line_tagger: flush ends the unfinished line") {
  line_tagger t("[0] ");
  CHECK(t.feed("tail", 4) == "");
  CHECK(t.flush() == "[0] tail\n");
  CHECK(t.flush() == "");
}

TEST_CASE("line_tagger: a line longer than the limit is cut, not buffered without bound") {
  line_tagger t("[1] ", 4);
  CHECK(t.feed("abcdefghij", 10) == "[1] abcd\n[1] efgh\n");
  CHECK(t.flush() == "[1] ij\n");
  CHECK(t.feed("abc\n", 4) == "[1] abc\n");
}

TEST_CASE("environment: get, set, unset keep the caller's order") {
  const char* envp[] = {"A=1", "B=two=2", "C=", nullptr};
  environment e(envp);
  CHECK(std::string(e.get("A")) == "1");
  CHECK(std::string(e.get("B")) == "two=2");
  CHECK(std::string(e.get("C")) == "");
  CHECK(e.get("D") == nullptr);
  e.set("A", "one");
  e.set("D", "4");
  e.unset("B");
  CHECK(e.entries() == std::vector<std::string>{"A=one", "C=", "D=4"});
}

TEST_CASE("environment: identity variables of other launchers are recognised") {
  for (const char* name : {"RANK",
                           "WORLD_SIZE",
                           "LOCAL_RANK",
                           "LOCAL_WORLD_SIZE",
                           "GROUP_RANK",
                           "NODE_RANK",
                           "MASTER_ADDR",
                           "MASTER_PORT",
                           "OMPI_COMM_WORLD_RANK",
                           "OMPI_COMM_WORLD_LOCAL_SIZE",
                           "PMI_RANK",
                           "PMI_FD",
                           "PMIX_RANK",
                           "MPI_LOCALRANKID",
                           "MPI_LOCALNRANKS",
                           "SLURM_PROCID",
                           "SLURM_NTASKS",
                           "SLURM_LOCALID",
                           "SLURM_NODEID",
                           "TF_CONFIG",
                           "AZ_BATCH_MASTER_NODE"}) {
    CHECK_MESSAGE(is_foreign_identity(name), name);
  }
  for (const char* name : {"PATH", "HOME", "SLURM_JOB_ID", "SLURM_STEP_NODELIST", "OMPI_MCA_btl",
                           "NCCL_DEBUG", "DISTCOMM_TIMEOUT", "DISTCOMM_STORE_ADDR", "RANKING"}) {
    CHECK_MESSAGE(!is_foreign_identity(name), name);
  }
}

TEST_CASE("environment: the job and rank variables") {
  const char* envp[] = {"PATH=/bin", "SLURM_PROCID=4", "RANK=9", "DISTCOMM_BACKEND=ucx", nullptr};
  const environment caller(envp);
  job_settings s;
  s.np = 3;
  const environment job = job_environment(caller, s, 29500, "abc");
  const environment r2 = rank_environment(job, 2);
  CHECK(std::string(r2.get("PATH")) == "/bin");
  CHECK(r2.get("SLURM_PROCID") == nullptr);
  CHECK(std::string(r2.get("RANK")) == "2");
  CHECK(std::string(r2.get("DISTCOMM_RANK")) == "2");
  CHECK(std::string(r2.get("DISTCOMM_LOCAL_RANK")) == "2");
  CHECK(std::string(r2.get("DISTCOMM_WORLD_SIZE")) == "3");
  CHECK(std::string(r2.get("DISTCOMM_NODE_RANK")) == "0");
  CHECK(std::string(r2.get("DISTCOMM_MASTER_PORT")) == "29500");
  CHECK(std::string(r2.get("MASTER_ADDR")) == "127.0.0.1");
  CHECK(std::string(r2.get("DISTCOMM_AUTH_TOKEN")) == "abc");
  CHECK(std::string(r2.get("DISTCOMM_BACKEND")) == "ucx");  // the caller's, no --backend

  s.backend = "gloo";
  s.no_auth = true;
  const char* with_token[] = {"DISTCOMM_AUTH_TOKEN=x", "DISTCOMM_AUTH_TOKEN_FILE=/f", nullptr};
  const environment j2 = job_environment(environment(with_token), s, 1, "ignored");
  CHECK(std::string(j2.get("DISTCOMM_BACKEND")) == "gloo");
  CHECK(j2.get("DISTCOMM_AUTH_TOKEN") == nullptr);
  CHECK(j2.get("DISTCOMM_AUTH_TOKEN_FILE") == nullptr);
}

TEST_CASE("environment: a token is generated only when the caller brings none") {
  const char* none[] = {nullptr};
  const char* token[] = {"DISTCOMM_AUTH_TOKEN=x", nullptr};
  const char* file[] = {"DISTCOMM_AUTH_TOKEN_FILE=/f", nullptr};
  CHECK(needs_token(environment(none), false));
  CHECK_FALSE(needs_token(environment(none), true));
  CHECK_FALSE(needs_token(environment(token), false));
  CHECK_FALSE(needs_token(environment(file), false));
  const std::string a = distcomm::random_token();
  const std::string b = distcomm::random_token();
  CHECK(a.size() == 64);
  CHECK(a.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(a != b);
}

TEST_CASE("environment: find_free_port returns a usable port") {
  const int p = find_free_port();
  CHECK(p > 0);
  CHECK(p < 65536);
}

// ---- --backend mpi ---------------------------------------------------------------------------

namespace {

environment mpi_job(const std::vector<const char*>& caller_entries) {
  std::vector<const char*> envp = caller_entries;
  envp.push_back(nullptr);
  job_settings s;
  s.np = 3;
  s.backend = "mpi";
  return job_environment(environment(envp.data()), s, 29500, "abc");
}

}  // namespace

TEST_CASE("mpirun_environment: mpirun's world replaces distcomm-run's; the job's settings stay") {
  const environment env =
      mpirun_environment(mpi_job({"PATH=/bin", "DISTCOMM_RANK=1", "DISTCOMM_LOCAL_RANK=1",
                                  "DISTCOMM_TIMEOUT=9", "OMPI_COMM_WORLD_RANK=4"}),
                         true);
  for (const char* gone :
       {"DISTCOMM_RANK", "DISTCOMM_LOCAL_RANK", "DISTCOMM_WORLD_SIZE", "DISTCOMM_LOCAL_WORLD_SIZE",
        "DISTCOMM_NODE_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
        "MASTER_PORT", "OMPI_COMM_WORLD_RANK", "OMPI_MCA_btl_vader_single_copy_mechanism"}) {
    CHECK_MESSAGE(env.get(gone) == nullptr, gone);
  }
  CHECK(std::string(env.get("PATH")) == "/bin");
  CHECK(std::string(env.get("DISTCOMM_BACKEND")) == "mpi");
  CHECK(std::string(env.get("DISTCOMM_AUTH_TOKEN")) == "abc");
  CHECK(std::string(env.get("DISTCOMM_MASTER_ADDR")) == "127.0.0.1");
  CHECK(std::string(env.get("DISTCOMM_MASTER_PORT")) == "29500");
  CHECK(std::string(env.get("DISTCOMM_TIMEOUT")) == "9");
}

TEST_CASE("mpirun_environment: single-copy transfers off only where they cannot work") {
  const std::string name = "OMPI_MCA_btl_vader_single_copy_mechanism";
  CHECK(mpirun_environment(mpi_job({}), true).get(name) == nullptr);
  CHECK(std::string(mpirun_environment(mpi_job({}), false).get(name)) == "none");
  // The caller's choice is kept either way.
  const char* cma = "OMPI_MCA_btl_vader_single_copy_mechanism=cma";
  CHECK(std::string(mpirun_environment(mpi_job({cma}), false).get(name)) == "cma");
  CHECK(std::string(mpirun_environment(mpi_job({cma}), true).get(name)) == "cma");
}

TEST_CASE("open_mpi_rank_environment: the world each rank will detect under mpirun") {
  const environment env = open_mpi_rank_environment(mpirun_environment(mpi_job({}), true), 1, 3);
  const distcomm::world_info w =
      distcomm::detect_world([&](const char* name) { return env.get(name); });
  CHECK(w.launcher == distcomm::launcher_kind::open_mpi);
  CHECK(w.rank == 1);
  CHECK(w.size == 3);
  CHECK(w.local_size == 3);
  CHECK(w.master_port == 29500);
}

TEST_CASE("mpirun_command: Open MPI's options, every DISTCOMM_* setting exported, the program") {
  const environment env = mpirun_environment(mpi_job({"DISTCOMM_TIMEOUT=9", "HOME=/root"}), true);
  mpirun_settings ms;
  ms.mpirun = "/usr/bin/mpirun";
  ms.np = 3;
  const std::vector<std::string> program = {"./train", "--np", "2"};
  const std::vector<std::string> plain = mpirun_command(ms, env, program);
  CHECK(plain == std::vector<std::string>{"/usr/bin/mpirun", "-np", "3", "--oversubscribe", "-x",
                                          "DISTCOMM_TIMEOUT", "-x", "DISTCOMM_MASTER_ADDR", "-x",
                                          "DISTCOMM_MASTER_PORT", "-x", "DISTCOMM_BACKEND", "-x",
                                          "DISTCOMM_AUTH_TOKEN", "--", "./train", "--np", "2"});
  ms.as_root = true;
  ms.tag_output = true;
  const std::vector<std::string> root = mpirun_command(ms, env, program);
  REQUIRE(root.size() == plain.size() + 2);
  CHECK(root[4] == "--allow-run-as-root");
  CHECK(root[5] == "--tag-output");
}

// ---- process helpers -------------------------------------------------------------------------

TEST_CASE("find_program: PATH lookup as execvp does it") {
  const std::string sh = find_program("sh");
  CHECK(sh.size() > 3);
  CHECK(sh.substr(sh.size() - 3) == "/sh");
  CHECK(find_program(sh) == sh);
  CHECK(find_program("distcomm-no-such-program") == "");
  CHECK(find_program("/nonexistent/mpirun") == "");
  CHECK(find_program("/") == "");  // a directory is not a program
}

TEST_CASE("command_output: stdout and stderr; a command that overruns its limit is killed") {
  CHECK(command_output({"sh", "-c", "echo out; echo err >&2"}, std::chrono::seconds(10)) ==
        "out\nerr\n");
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(command_output({"sleep", "30"}, std::chrono::milliseconds(200)),
                  std::runtime_error);
  // Closing its output is not finishing: the exit must come within the limit too.
  CHECK_THROWS_AS(command_output({"sh", "-c", "exec >/dev/null 2>&1; sleep 30"},
                                 std::chrono::milliseconds(200)),
                  std::runtime_error);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}
