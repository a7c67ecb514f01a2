// The pieces of distcomm-run that need no process: the line tagger of --tag-output and the
// environment builder (which variables the ranks get, which they lose).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "environment.hpp"
#include "output.hpp"

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
  const std::string a = random_token();
  const std::string b = random_token();
  CHECK(a.size() == 64);
  CHECK(a.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(a != b);
}

TEST_CASE("environment: find_free_port returns a usable port") {
  const int p = find_free_port();
  CHECK(p > 0);
  CHECK(p < 65536);
}
