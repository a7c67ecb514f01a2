// The flight recorder's dump file (trace/flight_recorder.hpp): written through a temporary file
// of its own, so a link planted in the dump directory redirects nothing, and one dump at a time,
// so dumps from several threads leave one whole file.
#include <dirent.h>
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "distcomm/trace/flight_recorder.hpp"

namespace dt = distcomm::trace;

namespace {

std::string read_all(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// What a directory holds.
std::vector<std::string> names_in(const std::string& path) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(path.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") out.push_back(n);
    }
    ::closedir(d);
  }
  return out;
}

// A fresh directory, removed with what is in it.
struct scratch_dir {
  std::string path;
  scratch_dir() {
    char name[] = "/tmp/distcomm-test-dump.XXXXXX";
    REQUIRE(::mkdtemp(name) != nullptr);
    path = name;
  }
  std::vector<std::string> names() const { return names_in(path); }
  ~scratch_dir() {
    for (const auto& n : names()) ::unlink((path + "/" + n).c_str());
    ::rmdir(path.c_str());
  }
};

std::shared_ptr<dt::flight_recorder> a_recorder() {
  dt::flight_recorder::identity id;
  id.name = "c0";
  id.rank = 3;
  id.backend = "local";
  id.strategy = "ring";
  return dt::flight_recorder::make(8, id);
}

}  // namespace

TEST_CASE("flight recorder: a link planted where the dump goes redirects nothing") {
  scratch_dir dir;
  scratch_dir elsewhere;
  const std::string victim = elsewhere.path + "/victim";
  { std::ofstream(victim) << "precious\n"; }
  auto rec = a_recorder();
  const std::string path = dir.path + "/distcomm-flight.3." + std::to_string(::getpid()) + ".json";
  // The names a dump could once be predicted to write through, and the dump's own.
  REQUIRE(::symlink(victim.c_str(), (path + ".tmp").c_str()) == 0);
  const std::string written = dt::dump_flight_records("test", dir.path);
  CHECK(written == path);
  CHECK(read_all(victim) == "precious\n");
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  CHECK(S_ISREG(st.st_mode));
  CHECK((st.st_mode & 077) == 0);  // 0600: the records are this user's
  CHECK(nlohmann::json::parse(read_all(path))["reason"] == "test");
  // A link planted at the dump's own name is replaced, not followed.
  ::unlink(path.c_str());
  REQUIRE(::symlink(victim.c_str(), path.c_str()) == 0);
  CHECK(dt::dump_flight_records("again", dir.path) == path);
  CHECK(read_all(victim) == "precious\n");
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  CHECK(S_ISREG(st.st_mode));
}

TEST_CASE("flight recorder: dumps from several threads at once leave one whole file") {
  scratch_dir dir;
  auto rec = a_recorder();
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) dt::dump_flight_records("thread " + std::to_string(t), dir.path);
    });
  }
  for (auto& t : threads) t.join();
  const auto names = dir.names();
  REQUIRE(names.size() == 1);  // the dump, no temporary left behind
  const auto j = nlohmann::json::parse(read_all(dir.path + "/" + names[0]));
  CHECK(j["communicators"].size() >= 1);
}

// SIGUSR1 asks a process for its dump (where DISTCOMM_DUMP_DIR is set). A child it forks (a
// DataLoader's worker) inherits the handler and the pipe but not the thread reading it: the
// signal sent to the child made the parent dump, and the child lived on. The child now gets the
// default back and ends of it. Run in a fresh process (this binary again, this case alone), where
// the first recorder installs the handler: the case below is its body.
namespace {
constexpr const char* fork_case_variable = "DISTCOMM_TEST_SIGUSR1_FORK";

// 0 when the forked child ended of SIGUSR1 and the parent still dumps on its own SIGUSR1.
int sigusr1_in_forked_child(const std::string& dir) {
  auto rec = a_recorder();  // installs the handler: DISTCOMM_DUMP_DIR is set
  const pid_t child = ::fork();
  if (child == 0) {
    for (int i = 0; i < 600; ++i) ::usleep(100'000);
    ::_exit(3);  // lived on through the signal
  }
  if (child < 0) return 10;
  ::usleep(100'000);
  ::kill(child, SIGUSR1);
  int status = 0;
  if (::waitpid(child, &status, 0) != child) return 11;
  if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGUSR1) return 12;
  if (!names_in(dir).empty()) return 13;  // the parent dumped for its child's signal
  ::kill(::getpid(), SIGUSR1);               // the parent's own handler still works
  for (int i = 0; i < 600 && names_in(dir).empty(); ++i) ::usleep(100'000);
  return names_in(dir).empty() ? 14 : 0;
}
}  // namespace

TEST_CASE("flight recorder: SIGUSR1 in a forked child ends the child, the parent dumps nothing") {
  if (const char* dir = std::getenv(fork_case_variable)) {
    ::_exit(sigusr1_in_forked_child(dir));  // the fresh process's whole run
  }
  scratch_dir dir;
  const pid_t p = ::fork();
  if (p == 0) {
    ::setenv("DISTCOMM_DUMP_DIR", dir.path.c_str(), 1);
    ::setenv(fork_case_variable, dir.path.c_str(), 1);
    const std::string filter =
        "--test-case=flight recorder: SIGUSR1 in a forked child ends the child*";
    ::execl("/proc/self/exe", "test", filter.c_str(), static_cast<char*>(nullptr));
    ::_exit(20);
  }
  REQUIRE(p > 0);
  int status = 0;
  REQUIRE(::waitpid(p, &status, 0) == p);
  REQUIRE(WIFEXITED(status));
  // 12: the child lived on; 13: the parent dumped for the child's signal; 14: no dump of its own
  CHECK(WEXITSTATUS(status) == 0);
}
