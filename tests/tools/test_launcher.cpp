// distcomm-run end to end: starts the launcher (posix_spawn) on distcomm-test-child and checks the
// environment the ranks get, --tag-output, stopping on the first failure, --grace, --timeout,
// signal forwarding, stopped ranks, exit codes, --print-world / --print-config, and that no process
// of a job outlives the launcher. Every launch has a hard limit; a launcher that overruns it is
// killed and the test fails.
#include <doctest/doctest.h>

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

namespace fs = std::filesystem;
using steady = std::chrono::steady_clock;

const std::string run_path = DISTCOMM_RUN_PATH;
const std::string child_path = DISTCOMM_TEST_CHILD_PATH;

#define CHECK_HAS(text, part)                                      \
  CHECK_MESSAGE(std::string(text).find(part) != std::string::npos, \
                "'" << (text) << "' does not contain '" << (part) << "'")

// Environment changes for the launcher: a value sets, nullopt unsets. The variables the launcher
// itself reads or passes on are unset by default so the caller's environment does not leak in.
using env_changes = std::map<std::string, std::optional<std::string>>;

env_changes clean_env(env_changes extra = {}) {
  env_changes e = {{"DISTCOMM_AUTH_TOKEN", std::nullopt},
                   {"DISTCOMM_AUTH_TOKEN_FILE", std::nullopt},
                   {"DISTCOMM_BACKEND", std::nullopt},
                   {"DISTCOMM_STORE_ADDR", std::nullopt},
                   {"DISTCOMM_JOB_ID", std::nullopt}};
  for (auto& [k, v] : extra) e[k] = v;
  return e;
}

struct result {
  int code = -1;  // exit code, or 128 + signal
  std::string out;
  std::string err;
  double seconds = 0;
  bool overran = false;  // the hard limit passed and the launcher was killed
};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// A running distcomm-run.
class launch {
 public:
  // close_stdout: the reader of distcomm-run's stdout goes away at once (`distcomm-run | head`).
  launch(const std::vector<std::string>& args, const env_changes& changes = clean_env(),
         const std::string& stdin_text = "", bool close_stdout = false) {
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      if (changes.count(entry.substr(0, entry.find('='))) == 0) env_strings.push_back(entry);
    }
    for (const auto& [k, v] : changes) {
      if (v) env_strings.push_back(k + "=" + *v);
    }
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_strings = {run_path};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& s : argv_strings) argv.push_back(s.data());
    argv.push_back(nullptr);

    int out[2], err[2], in[2];
    REQUIRE(::pipe(out) == 0);
    REQUIRE(::pipe(err) == 0);
    REQUIRE(::pipe(in) == 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err[1], 2);
    for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1]}) {
      posix_spawn_file_actions_addclose(&fa, fd);
    }
    start_ = steady::now();
    const int rc = ::posix_spawn(&pid_, run_path.c_str(), &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    REQUIRE_MESSAGE(rc == 0, "posix_spawn " << run_path << ": " << std::strerror(rc));
    ::close(in[0]);
    ::close(out[1]);
    ::close(err[1]);
    out_ = out[0];
    err_ = err[0];
    if (close_stdout) {
      ::close(out_);
      out_ = -1;
    }
    // Small enough for the pipe buffer: written at once, then the launcher sees end of file.
    if (!stdin_text.empty()) (void)!::write(in[1], stdin_text.data(), stdin_text.size());
    ::close(in[1]);
  }

  ~launch() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_ >= 0) ::close(out_);
    if (err_ >= 0) ::close(err_);
  }

  pid_t pid() const { return pid_; }

  // Collects output until the launcher exited and both pipes are closed, or `limit` passed.
  result wait(double limit = 30) {
    result r;
    const auto deadline =
        start_ + std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(limit));
    bool exited = false;
    int status = 0;
    while (true) {
      if (!exited && ::waitpid(pid_, &status, WNOHANG) == pid_) {
        exited = true;
        r.seconds = std::chrono::duration<double>(steady::now() - start_).count();
      }
      if (exited && out_ < 0 && err_ < 0) break;
      const auto now = steady::now();
      if (now >= deadline) {
        r.overran = true;
        break;
      }
      pollfd fds[2] = {{out_, POLLIN, 0}, {err_, POLLIN, 0}};
      const int ms = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count());
      ::poll(fds, 2, std::min(ms, 20));
      drain(out_, r.out);
      drain(err_, r.err);
    }
    if (!exited) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      r.seconds = std::chrono::duration<double>(steady::now() - start_).count();
    }
    pid_ = -1;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    CHECK_MESSAGE(!r.overran, "distcomm-run did not finish (and close its output) within "
                                  << limit << " s; stderr so far:\n"
                                  << r.err);
    return r;
  }

 private:
  static void drain(int& fd, std::string& into) {
    if (fd < 0) return;
    char buf[4096];
    pollfd p = {fd, POLLIN, 0};
    while (::poll(&p, 1, 0) > 0) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) {
        ::close(fd);
        fd = -1;
        return;
      }
      into.append(buf, static_cast<std::size_t>(n));
    }
  }

  pid_t pid_ = -1;
  int out_ = -1;
  int err_ = -1;
  steady::time_point start_;
};

result run(const std::vector<std::string>& args, const env_changes& changes = clean_env(),
           double limit = 30) {
  launch l(args, changes);
  return l.wait(limit);
}

// A fresh directory for pid and signal files, removed at the end of the test.
class scratch_dir {
 public:
  scratch_dir() {
    std::string pattern = (fs::temp_directory_path() / "distcomm-launcher-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~scratch_dir() {
    // Whatever went wrong, leave no sleeper behind.
    for (pid_t p : pids()) ::kill(p, SIGKILL);
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }

  // The pids recorded in files whose names start with prefix ("" = every .pid file).
  std::vector<pid_t> pids(const std::string& prefix = "") const {
    std::vector<pid_t> out;
    for (const auto& e : fs::directory_iterator(path_)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(prefix, 0) != 0 || e.path().extension() != ".pid") continue;
      std::ifstream in(e.path());
      long pid = 0;
      if (in >> pid && pid > 0) out.push_back(static_cast<pid_t>(pid));
    }
    return out;
  }

  std::string read(const std::string& name) const {
    std::ifstream in(path_ / name);
    std::string s;
    std::getline(in, s);
    return s;
  }

  // Waits (at most limit seconds) until n files start with prefix and end in .pid.
  bool wait_for_pids(const std::string& prefix, std::size_t n, double limit = 10) const {
    const auto until = steady::now() + std::chrono::duration_cast<steady::duration>(
                                           std::chrono::duration<double>(limit));
    while (pids(prefix).size() < n) {
      if (steady::now() > until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }

 private:
  fs::path path_;
};

bool gone(pid_t pid) { return ::kill(pid, 0) == -1 && errno == ESRCH; }

// Gone, or a zombie (ended, not yet collected by its parent), within limit seconds.
bool ended_within(pid_t pid, double limit) {
  const auto until = steady::now() + std::chrono::duration_cast<steady::duration>(
                                         std::chrono::duration<double>(limit));
  while (steady::now() < until) {
    if (gone(pid)) return true;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const auto paren = text.rfind(')');
    if (paren != std::string::npos && text.compare(paren, 4, ") Z ") == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// Every pid recorded in dir belongs to a process that no longer exists.
void check_all_gone(const scratch_dir& dir, std::size_t expected) {
  const std::vector<pid_t> pids = dir.pids();
  CHECK(pids.size() == expected);
  for (pid_t p : pids) CHECK_MESSAGE(gone(p), "process " << p << " outlived distcomm-run");
}

// "A=1 B=2" -> {A: 1, B: 2}
std::map<std::string, std::string> parse_env_line(const std::string& line) {
  std::map<std::string, std::string> m;
  std::istringstream in(line);
  for (std::string kv; in >> kv;) {
    const auto eq = kv.find('=');
    if (eq != std::string::npos) m[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return m;
}

bool is_hex64(const std::string& s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

const std::string job_vars =
    "DISTCOMM_RANK,DISTCOMM_WORLD_SIZE,DISTCOMM_LOCAL_RANK,DISTCOMM_LOCAL_WORLD_SIZE,"
    "DISTCOMM_NODE_RANK,DISTCOMM_MASTER_ADDR,DISTCOMM_MASTER_PORT,DISTCOMM_AUTH_TOKEN,"
    "DISTCOMM_AUTH_TOKEN_FILE,DISTCOMM_BACKEND,RANK,WORLD_SIZE,LOCAL_RANK,LOCAL_WORLD_SIZE,"
    "MASTER_ADDR,MASTER_PORT";

// The env line of every rank of a job, by rank.
std::map<int, std::map<std::string, std::string>> job_env(const std::vector<std::string>& launcher,
                                                          const env_changes& changes,
                                                          const std::string& vars = job_vars) {
  std::vector<std::string> args = launcher;
  args.insert(args.end(), {child_path, "env", vars});
  const result r = run(args, changes);
  CHECK(r.code == 0);
  CHECK(r.err == "");
  std::map<int, std::map<std::string, std::string>> by_rank;
  for (const auto& line : lines_of(r.out)) {
    auto m = parse_env_line(line);
    by_rank[std::atoi(m["DISTCOMM_RANK"].c_str())] = m;
  }
  return by_rank;
}

}  // namespace

// ---- the environment of the ranks -----------------------------------------------------------

TEST_CASE("launcher: N ranks get distinct ranks and share master, port and token") {
  const auto ranks = job_env({"-np", "4"}, clean_env());
  REQUIRE(ranks.size() == 4);
  const std::string port = ranks.at(0).at("DISTCOMM_MASTER_PORT");
  const std::string token = ranks.at(0).at("DISTCOMM_AUTH_TOKEN");
  CHECK(std::atoi(port.c_str()) > 0);
  CHECK(std::atoi(port.c_str()) < 65536);
  CHECK(is_hex64(token));
  for (int r = 0; r < 4; ++r) {
    CAPTURE(r);
    const auto& e = ranks.at(r);
    const std::string rs = std::to_string(r);
    CHECK(e.at("DISTCOMM_RANK") == rs);
    CHECK(e.at("DISTCOMM_LOCAL_RANK") == rs);
    CHECK(e.at("RANK") == rs);
    CHECK(e.at("LOCAL_RANK") == rs);
    CHECK(e.at("DISTCOMM_WORLD_SIZE") == "4");
    CHECK(e.at("DISTCOMM_LOCAL_WORLD_SIZE") == "4");
    CHECK(e.at("WORLD_SIZE") == "4");
    CHECK(e.at("LOCAL_WORLD_SIZE") == "4");
    CHECK(e.at("DISTCOMM_NODE_RANK") == "0");
    CHECK(e.at("DISTCOMM_MASTER_ADDR") == "127.0.0.1");
    CHECK(e.at("MASTER_ADDR") == "127.0.0.1");
    CHECK(e.at("DISTCOMM_MASTER_PORT") == port);
    CHECK(e.at("MASTER_PORT") == port);
    CHECK(e.at("DISTCOMM_AUTH_TOKEN") == token);
    CHECK(e.at("DISTCOMM_AUTH_TOKEN_FILE") == "<unset>");
    CHECK(e.at("DISTCOMM_BACKEND") == "<unset>");
  }
}

TEST_CASE("launcher: the token is fresh for every job") {
  const auto a = job_env({"-np", "1"}, clean_env());
  const auto b = job_env({"-np", "1"}, clean_env());
  const std::string ta = a.at(0).at("DISTCOMM_AUTH_TOKEN");
  const std::string tb = b.at(0).at("DISTCOMM_AUTH_TOKEN");
  CHECK(is_hex64(ta));
  CHECK(is_hex64(tb));
  CHECK(ta != tb);
}

TEST_CASE("launcher: the caller's token or token file is kept; --no-auth gives none") {
  const std::string secret = "callers-secret-0123456789";
  SUBCASE("DISTCOMM_AUTH_TOKEN") {
    const auto e = job_env({"-np", "2"}, clean_env({{"DISTCOMM_AUTH_TOKEN", secret}}));
    CHECK(e.at(0).at("DISTCOMM_AUTH_TOKEN") == secret);
    CHECK(e.at(1).at("DISTCOMM_AUTH_TOKEN") == secret);
  }
  SUBCASE("DISTCOMM_AUTH_TOKEN_FILE") {
    scratch_dir dir;
    const std::string file = dir.str() + "/token";
    std::ofstream(file) << secret << "\n";
    fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write);
    const auto e = job_env({"-np", "2"}, clean_env({{"DISTCOMM_AUTH_TOKEN_FILE", file}}));
    CHECK(e.at(1).at("DISTCOMM_AUTH_TOKEN") == "<unset>");
    CHECK(e.at(1).at("DISTCOMM_AUTH_TOKEN_FILE") == file);
  }
  SUBCASE("a token file that cannot be read stops the launcher, not N ranks") {
    const result r = run({"-np", "2", child_path, "exit", "0"},
                         clean_env({{"DISTCOMM_AUTH_TOKEN_FILE", "/nonexistent/token"}}));
    CHECK(r.code == 2);
    CHECK_HAS(r.err, "DISTCOMM_AUTH_TOKEN_FILE=/nonexistent/token cannot be read");
  }
  SUBCASE("--no-auth") {
    const auto e = job_env({"-np", "2", "--no-auth"}, clean_env({{"DISTCOMM_AUTH_TOKEN", secret}}));
    CHECK(e.at(0).at("DISTCOMM_AUTH_TOKEN") == "<unset>");
    CHECK(e.at(0).at("DISTCOMM_AUTH_TOKEN_FILE") == "<unset>");
  }
}

TEST_CASE("launcher: the job's store is the launcher's, with a job id; the caller's is kept") {
  const std::string vars = "DISTCOMM_RANK,DISTCOMM_STORE_ADDR,DISTCOMM_JOB_ID";
  SUBCASE("distcomm-run hosts it") {
    const auto e = job_env({"-np", "3"}, clean_env(), vars);
    REQUIRE(e.size() == 3);
    const std::string addr = e.at(0).at("DISTCOMM_STORE_ADDR");
    const std::string id = e.at(0).at("DISTCOMM_JOB_ID");
    CHECK(addr.rfind("127.0.0.1:", 0) == 0);
    CHECK(std::atoi(addr.substr(10).c_str()) > 0);
    CHECK(id.rfind("distcomm-run:", 0) == 0);
    CHECK(id.size() == 13 + 16);
    for (int r = 1; r < 3; ++r) {
      CHECK(e.at(r).at("DISTCOMM_STORE_ADDR") == addr);
      CHECK(e.at(r).at("DISTCOMM_JOB_ID") == id);
    }
    const auto again = job_env({"-np", "1"}, clean_env(), vars);
    CHECK(again.at(0).at("DISTCOMM_JOB_ID") != id);
  }
  SUBCASE("the caller's store and job id pass on") {
    const auto e = job_env(
        {"-np", "2"},
        clean_env({{"DISTCOMM_STORE_ADDR", "10.1.2.3:29400"}, {"DISTCOMM_JOB_ID", "train-7"}}),
        vars);
    CHECK(e.at(1).at("DISTCOMM_STORE_ADDR") == "10.1.2.3:29400");
    CHECK(e.at(1).at("DISTCOMM_JOB_ID") == "train-7");
  }
}

TEST_CASE("launcher: other launchers' identity variables do not reach the ranks") {
  const env_changes outer = clean_env({{"OMPI_COMM_WORLD_RANK", "5"},
                                       {"OMPI_COMM_WORLD_SIZE", "8"},
                                       {"PMI_RANK", "3"},
                                       {"PMI_SIZE", "8"},
                                       {"PMIX_RANK", "3"},
                                       {"MPI_LOCALRANKID", "1"},
                                       {"SLURM_PROCID", "2"},
                                       {"SLURM_NTASKS", "9"},
                                       {"SLURM_LOCALID", "2"},
                                       {"TF_CONFIG", "{}"},
                                       {"RANK", "7"},
                                       {"GROUP_RANK", "2"},
                                       {"NODE_RANK", "2"},
                                       {"MASTER_PORT", "1"},
                                       {"SLURM_JOB_ID", "42"},
                                       {"OMPI_MCA_btl", "self"}});
  const auto e = job_env({"-np", "2"}, outer,
                         "DISTCOMM_RANK,OMPI_COMM_WORLD_RANK,OMPI_COMM_WORLD_SIZE,PMI_RANK,"
                         "PMI_SIZE,PMIX_RANK,MPI_LOCALRANKID,SLURM_PROCID,SLURM_NTASKS,"
                         "SLURM_LOCALID,TF_CONFIG,RANK,GROUP_RANK,NODE_RANK,MASTER_PORT,"
                         "DISTCOMM_MASTER_PORT,SLURM_JOB_ID,OMPI_MCA_btl");
  REQUIRE(e.size() == 2);
  for (const auto& [rank, vars] : e) {
    CAPTURE(rank);
    for (const char* removed :
         {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "PMIX_RANK",
          "MPI_LOCALRANKID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "TF_CONFIG",
          "GROUP_RANK", "NODE_RANK"}) {
      CHECK_MESSAGE(vars.at(removed) == "<unset>", removed);
    }
    CHECK(vars.at("RANK") == std::to_string(rank));
    CHECK(vars.at("MASTER_PORT") == vars.at("DISTCOMM_MASTER_PORT"));
    CHECK(vars.at("SLURM_JOB_ID") == "42");  // not identity: passed on
    CHECK(vars.at("OMPI_MCA_btl") == "self");
  }
}

TEST_CASE("launcher: --backend sets DISTCOMM_BACKEND; an unknown one is refused up front") {
  const auto e = job_env({"-np", "2", "--backend", "gloo"}, clean_env());
  CHECK(e.at(0).at("DISTCOMM_BACKEND") == "gloo");
  CHECK(e.at(1).at("DISTCOMM_BACKEND") == "gloo");
  // A plugin the ranks will find (the build tree's lib/ holds every backend's) is accepted.
  const auto p = job_env({"-np", "2", "--backend", "plugin:local"}, clean_env());
  CHECK(p.at(0).at("DISTCOMM_BACKEND") == "plugin:local");

  const result bad = run({"-np", "2", "--backend", "carrier-pigeon", child_path, "print", "ran"});
  CHECK(bad.code == 2);
  CHECK_HAS(bad.err, "DISTCOMM_BACKEND='carrier-pigeon'");
  CHECK_HAS(bad.err,
            "set DISTCOMM_PLUGIN_PATH to the folder holding "
            "libdistcomm_backend_carrier-pigeon.so");
  CHECK(bad.out == "");
}

TEST_CASE("launcher: --master-port is used instead of a free port") {
  const auto e = job_env({"-np", "2", "--master-port", "29511"}, clean_env());
  CHECK(e.at(0).at("DISTCOMM_MASTER_PORT") == "29511");
  CHECK(e.at(1).at("MASTER_PORT") == "29511");
}

// ---- output ----------------------------------------------------------------------------------

TEST_CASE("launcher: --tag-output prefixes every line of stdout and stderr with [rank]") {
  const std::string slow = "the-quick-brown-fox-jumps-over-the-lazy-dog";
  const result r = run({"-np", "3", "--tag-output", child_path, "print", "hello", "eprint", "oops",
                        "slow-line", slow, "partial", "tail"});
  CHECK(r.code == 0);
  const std::vector<std::string> out = lines_of(r.out);
  const std::vector<std::string> err = lines_of(r.err);
  CHECK(out.size() == 9);
  CHECK(err.size() == 3);
  const std::multiset<std::string> out_set(out.begin(), out.end());
  const std::multiset<std::string> err_set(err.begin(), err.end());
  for (int rank = 0; rank < 3; ++rank) {
    const std::string tag = "[" + std::to_string(rank) + "] ";
    CHECK(out_set.count(tag + "hello") == 1);
    CHECK(out_set.count(tag + slow) == 1);    // written a byte at a time, never cut by another rank
    CHECK(out_set.count(tag + "tail") == 1);  // the unfinished last line, flushed at exit
    CHECK(err_set.count(tag + "oops") == 1);
  }
  CHECK(r.out.back() == '\n');
}

TEST_CASE("launcher: with --tag-output, a closed stdout ends the ranks as a closed pipe would") {
  launch l({"-np", "2", "--tag-output", child_path, "flood"}, clean_env(), "", true);
  const result r = l.wait();
  CHECK(r.code == 128 + SIGPIPE);  // the ranks died of SIGPIPE instead of writing forever
  CHECK_HAS(r.err, "was killed by signal 13 (SIGPIPE)");
}

TEST_CASE("launcher: without --tag-output the ranks write straight to the launcher's output") {
  const result r = run({"-np", "2", child_path, "print", "plain"});
  CHECK(r.code == 0);
  CHECK(r.out == "plain\nplain\n");
}

TEST_CASE("launcher: the program's own arguments pass through untouched") {
  const result r = run({"-np", "1", "--", child_path, "print", "-np", "print", "--tag-output"});
  CHECK(r.code == 0);
  CHECK(r.out == "-np\n--tag-output\n");
}

TEST_CASE("launcher: the program is looked up in PATH") {
  const std::string bin_dir = fs::path(child_path).parent_path().string();
  const char* path = std::getenv("PATH");
  const result r = run({"-np", "2", "distcomm-test-child", "print", "found"},
                       clean_env({{"PATH", bin_dir + ":" + (path ? path : "/usr/bin:/bin")}}));
  CHECK(r.code == 0);
  CHECK(r.out == "found\nfound\n");
}

TEST_CASE("launcher: stdin goes to rank 0; the other ranks read end of file") {
  launch l({"-np", "2", "--tag-output", child_path, "read-stdin"}, clean_env(), "hello\n");
  const result r = l.wait();
  CHECK(r.code == 0);
  const std::vector<std::string> out = lines_of(r.out);
  const std::set<std::string> got(out.begin(), out.end());
  CHECK(got == std::set<std::string>{"[0] stdin=hello", "[1] stdin=<eof>"});
}

// ---- failures, signals, timeouts --------------------------------------------------------------

TEST_CASE("launcher: the first failure stops the other ranks and sets the exit code") {
  scratch_dir dir;
  const result r =
      run({"-np", "4", "--grace", "5", child_path, "grandchild", dir.str(), "pidfile", dir.str(),
           "wait-pidfiles", dir.str(), "4", "rank-exit", "2", "3", "sleep-forever"});
  CHECK(r.code == 3);
  CHECK_HAS(r.err, "distcomm-run: rank 2 exited with code 3; stopping the other 3 ranks\n");
  CHECK(r.seconds < 4.5);  // SIGTERM was enough: the grace period was not waited out
  check_all_gone(dir, 8);  // 4 ranks and their 4 grandchildren
}

TEST_CASE("launcher: a rank killed by a signal gives 128 + signal") {
  const result r = run({"-np", "2", child_path, "rank-kill", "1", "9", "sleep-forever"});
  CHECK(r.code == 128 + 9);
  CHECK_HAS(r.err, "rank 1 was killed by signal 9 (SIGKILL); stopping the other 1 rank");
}

TEST_CASE("launcher: a rank that ignores SIGTERM gets SIGKILL after --grace") {
  scratch_dir dir;
  launch l({"-np", "2", "--grace", "2", child_path, "grandchild", dir.str(), "ignore-term",
            "pidfile", dir.str(), "wait-pidfiles", dir.str(), "2", "rank-exit", "0", "5",
            "sleep-forever"});
  REQUIRE(dir.wait_for_pids("rank", 2));
  // SIGTERM goes to rank 1's whole process group: its grandchild, which does not ignore it, ends
  // at once, while rank 1 itself lives on until SIGKILL.
  const std::vector<pid_t> grandchild = dir.pids("grandchild1");
  REQUIRE(grandchild.size() == 1);
  CHECK(ended_within(grandchild[0], 1.5));
  CHECK(::kill(l.pid(), 0) == 0);  // still inside the grace period
  const result r = l.wait();
  CHECK(r.code == 5);
  CHECK_HAS(r.err, "rank 0 exited with code 5; stopping the other 1 rank\n");
  CHECK_HAS(r.err, "rank 1 did not stop within 2 s of SIGTERM (--grace); sending SIGKILL\n");
  CHECK(r.seconds >= 2.0);
  CHECK(r.seconds < 7.0);
  check_all_gone(dir, 4);
}

TEST_CASE("launcher: a stopped rank is reported, and continued when the job stops") {
  // Rank 1 stops itself; rank 2 fails once it is stopped. A stopped rank acts on SIGTERM only once
  // continued, so the launcher's SIGCONT must end it without waiting out --grace.
  scratch_dir dir;
  const std::string d = dir.str();
  const std::string sigstop = std::to_string(SIGSTOP);
  std::vector<std::string> args = {"-np", "3", "--grace", "5", child_path};
  // Every rank starts a grandchild, records its pid and waits for the others' ...
  args.insert(args.end(), {"grandchild", d, "pidfile", d, "wait-pidfiles", d, "3"});
  // ... then rank 1 stops itself, and rank 2 fails as soon as it sees rank 1 stopped.
  args.insert(args.end(),
              {"rank-kill", "1", sigstop, "wait-stopped", d, "1", "rank-exit", "2", "3"});
  args.push_back("sleep-forever");
  const result r = run(args);
  CHECK(r.code == 3);
  const std::vector<pid_t> rank1 = dir.pids("rank1");
  REQUIRE(rank1.size() == 1);
  const std::string stopped = "distcomm-run: rank 1 (pid " + std::to_string(rank1[0]) +
                              ") was stopped by signal " + sigstop + " (SIGSTOP)";
  const std::string failed =
      "distcomm-run: rank 2 exited with code 3; stopping the other 2 ranks (rank 1 is stopped; "
      "SIGCONT follows the SIGTERM)\n";
  CHECK_HAS(r.err, stopped + "; the job cannot finish until it is continued or ended\n");
  CHECK_HAS(r.err, failed);
  CHECK(r.err.find(stopped) == r.err.rfind(stopped));  // once
  CHECK(r.err.find(stopped) < r.err.find(failed));
  CHECK(r.err.find("--grace") == std::string::npos);  // SIGTERM was enough
  CHECK(r.seconds < 4.5);
  check_all_gone(dir, 6);  // 3 ranks and their 3 grandchildren
}

TEST_CASE("launcher: --timeout ends a hung job with exit code 124") {
  scratch_dir dir;
  const result r = run({"-np", "3", "--timeout", "1.5", "--grace", "1", child_path, "grandchild",
                        dir.str(), "pidfile", dir.str(), "sleep-forever"});
  CHECK(r.code == 124);
  CHECK_HAS(r.err,
            "distcomm-run: job did not finish within 1.5 s (--timeout); killed ranks 0, 1, 2\n");
  CHECK(r.seconds >= 1.5);
  CHECK(r.seconds < 7.0);
  check_all_gone(dir, 6);
}

TEST_CASE("launcher: SIGINT, SIGTERM and SIGHUP sent to distcomm-run reach every rank") {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    CAPTURE(sig);
    scratch_dir dir;
    launch l({"-np", "3", "--grace", "5", child_path, "record-signals", dir.str(), "grandchild",
              dir.str(), "pidfile", dir.str(), "sleep-forever"});
    REQUIRE(dir.wait_for_pids("rank", 3));
    REQUIRE(::kill(l.pid(), sig) == 0);
    const result r = l.wait();
    CHECK(r.code == 128 + sig);
    CHECK_HAS(r.err, "forwarding it to 3 ranks");
    CHECK(r.seconds < 4.5);
    for (int rank = 0; rank < 3; ++rank) {
      CHECK(dir.read("signal" + std::to_string(rank)) == std::to_string(sig));
    }
    check_all_gone(dir, 6);
  }
}

TEST_CASE("launcher: a second signal while stopping sends SIGKILL at once") {
  scratch_dir dir;
  launch l({"-np", "2", "--grace", "20", child_path, "ignore-term", "pidfile", dir.str(),
            "sleep-forever"});
  REQUIRE(dir.wait_for_pids("rank", 2));
  REQUIRE(::kill(l.pid(), SIGTERM) == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  REQUIRE(::kill(l.pid(), SIGTERM) == 0);
  const result r = l.wait();
  CHECK(r.code == 128 + SIGTERM);
  CHECK_HAS(r.err, "received SIGTERM while stopping; sending SIGKILL");
  CHECK(r.seconds < 10);
  check_all_gone(dir, 2);
}

TEST_CASE("launcher: no process is left behind when every rank succeeds") {
  scratch_dir dir;
  const result r = run({"-np", "2", "--grace", "5", child_path, "grandchild", dir.str(), "detached",
                        dir.str(), "exit", "0"});
  CHECK(r.code == 0);  // leftovers are stopped, the job still succeeded
  CHECK_HAS(r.err,
            "every rank has exited but processes started by ranks 0, 1 and 2 detached "
            "processes are still running; stopping them");
  CHECK(r.seconds < 4.5);
  check_all_gone(dir, 4);  // 2 grandchildren in the ranks' groups, 2 that called setsid()
}

TEST_CASE("launcher: a job that succeeds exits 0 quietly") {
  const result r = run({"-np", "3", child_path, "exit", "0"});
  CHECK(r.code == 0);
  CHECK(r.err == "");
}

// ---- exit codes of the launcher itself ---------------------------------------------------------

TEST_CASE("launcher: a program that cannot be started: 127 when missing, 126 when not executable") {
  const result missing = run({"-np", "2", "/nonexistent/distcomm-no-such-program"});
  CHECK(missing.code == 127);
  CHECK_HAS(missing.err,
            "cannot start '/nonexistent/distcomm-no-such-program' for rank 0: No such file");

  scratch_dir dir;
  const std::string plain = dir.str() + "/not-executable";
  std::ofstream(plain) << "data\n";
  const result denied = run({"-np", "2", plain});
  CHECK(denied.code == 126);
  CHECK_HAS(denied.err, "Permission denied");
}

TEST_CASE("launcher: bad usage exits 2 with the parser's message") {
  SUBCASE("-np 0") {
    const result r = run({"-np", "0", child_path});
    CHECK(r.code == 2);
    CHECK_HAS(r.err, "--np");
  }
  SUBCASE("missing program") {
    const result r = run({"-np", "2"});
    CHECK(r.code == 2);
    CHECK_HAS(r.err, "program");
  }
  SUBCASE("missing -np") {
    const result r = run({child_path, "exit", "0"});
    CHECK(r.code == 2);
    CHECK_HAS(r.err, "-np");
  }
  SUBCASE("unknown option") {
    const result r = run({"-np", "2", "--no-such-option", child_path});
    CHECK(r.code == 2);
    CHECK_HAS(r.err, "--no-such-option");
  }
  SUBCASE("not a number") {
    const result r = run({"-np", "two", child_path});
    CHECK(r.code == 2);
  }
  SUBCASE("negative timeout") {
    const result r = run({"-np", "1", "--timeout", "-1", child_path});
    CHECK(r.code == 2);
  }
  SUBCASE("--help is not an error") {
    const result r = run({"--help"});
    CHECK(r.code == 0);
    CHECK_HAS(r.out, "--tag-output");
  }
}

// ---- --print-world / --print-config ------------------------------------------------------------

TEST_CASE("launcher: --print-world prints the world each rank will detect") {
  const result r = run({"-np", "3", "--print-world"});
  CHECK(r.code == 0);
  const std::vector<std::string> lines = lines_of(r.out);
  REQUIRE(lines.size() == 3);
  for (int rank = 0; rank < 3; ++rank) {
    CAPTURE(lines[static_cast<std::size_t>(rank)]);
    CHECK_HAS(lines[static_cast<std::size_t>(rank)], "rank " + std::to_string(rank) + "/3");
    CHECK_HAS(lines[static_cast<std::size_t>(rank)], "127.0.0.1:");
    CHECK_HAS(lines[static_cast<std::size_t>(rank)], "from distcomm");
  }

  // With a program: the world first, then the job.
  const result with_program = run({"-np", "2", "--print-world", child_path, "print", "ran"});
  CHECK(with_program.code == 0);
  const std::vector<std::string> out = lines_of(with_program.out);
  REQUIRE(out.size() == 4);
  CHECK_HAS(out[0], "rank 0/2");
  CHECK_HAS(out[1], "rank 1/2");
  CHECK(out[2] == "ran");
  CHECK(out[3] == "ran");
}

TEST_CASE("launcher: --print-config prints the configuration the ranks will read") {
  const result r =
      run({"--backend", "gloo", "--print-config"}, clean_env({{"DISTCOMM_TIMEOUT", "42"}}));
  CHECK(r.code == 0);
  CHECK_HAS(r.out, "DISTCOMM_BACKEND=gloo\n");
  CHECK_HAS(r.out, "DISTCOMM_TIMEOUT=42\n");
}

TEST_CASE("launcher: --print-config names a misspelt setting and the one meant") {
  const result r = run({"--print-config"},
                       clean_env({{"DISTCOMM_TIMEOUT", std::nullopt}, {"DISTCOMM_TIMOUT", "5"}}));
  CHECK(r.code == 0);
  CHECK_HAS(r.out, "DISTCOMM_TIMEOUT=300\n");  // the misspelt one changed nothing
  CHECK_HAS(r.err,
            "DISTCOMM_TIMOUT is not a DistComm setting and is ignored; did you mean "
            "DISTCOMM_TIMEOUT?");
  CHECK(r.out.find("TIMOUT") == std::string::npos);  // stdout stays NAME=value lines
}

// ---- --backend mpi: mpirun starts the ranks ----------------------------------------------------
// Cases that start no mpirun run with the others; those that do form the test suite "mpirun"
// (ctest test_launcher_mpirun, registered where MPI was found, one mpirun test at a time).

TEST_CASE("launcher: --backend mpi without a usable mpirun is one clear error") {
  SUBCASE("the named mpirun does not exist") {
    const result env = run({"-np", "2", "--backend", "mpi", child_path, "print", "ran"},
                           clean_env({{"DISTCOMM_MPIRUN", "/nonexistent/mpirun"}}));
    CHECK(env.code == 127);
    CHECK_HAS(env.err, "DISTCOMM_MPIRUN=/nonexistent/mpirun: no such executable");
    CHECK(env.out == "");
    const result opt = run({"-np", "2", "--backend", "mpi", "--mpirun", "/nonexistent/mpirun",
                            child_path, "print", "ran"});
    CHECK(opt.code == 127);
    CHECK_HAS(opt.err, "--mpirun /nonexistent/mpirun: no such executable");
  }
  SUBCASE("not Open MPI's mpirun") {
    const result r =
        run({"-np", "2", "--backend", "mpi", "--mpirun", "/bin/echo", child_path, "print", "ran"});
    CHECK(r.code == 2);
    CHECK_HAS(r.err, "/bin/echo is not Open MPI's mpirun");
    CHECK(r.out == "");
  }
  SUBCASE("--mpirun without --backend mpi") {
    const result r = run({"-np", "2", "--mpirun", "/bin/echo", child_path, "print", "ran"});
    CHECK(r.code == 2);
    CHECK_HAS(r.err, "--mpirun is for --backend mpi");
  }
}

TEST_CASE("launcher: --print-world with --backend mpi shows the worlds mpirun will give") {
  const result r = run({"-np", "3", "--backend", "mpi", "--print-world"});
  CHECK(r.code == 0);
  const std::vector<std::string> lines = lines_of(r.out);
  REQUIRE(lines.size() == 3);
  for (int rank = 0; rank < 3; ++rank) {
    CAPTURE(lines[static_cast<std::size_t>(rank)]);
    CHECK_HAS(lines[static_cast<std::size_t>(rank)], "rank " + std::to_string(rank) + "/3");
    CHECK_HAS(lines[static_cast<std::size_t>(rank)], "from open_mpi");
  }
}

namespace {

// mpirun's own listener on loopback only; the caller's single-copy choice left out.
env_changes mpi_env(env_changes extra = {}) {
  env_changes e = clean_env({{"OMPI_MCA_oob_tcp_if_include", "lo"},
                             {"OMPI_MCA_btl_vader_single_copy_mechanism", std::nullopt},
                             {"DISTCOMM_MPIRUN", std::nullopt}});
  for (auto& [k, v] : extra) e[k] = v;
  return e;
}

// The env line of every rank of a job mpirun started, by OMPI_COMM_WORLD_RANK.
std::map<int, std::map<std::string, std::string>> mpi_job_env(const std::vector<std::string>& args,
                                                              const env_changes& changes,
                                                              const std::string& vars) {
  std::vector<std::string> all = args;
  all.insert(all.end(), {child_path, "env", "OMPI_COMM_WORLD_RANK," + vars});
  const result r = run(all, changes);
  CHECK(r.code == 0);
  INFO("stderr: " << r.err);
  std::map<int, std::map<std::string, std::string>> by_rank;
  for (const auto& line : lines_of(r.out)) {
    auto m = parse_env_line(line);
    by_rank[std::atoi(m["OMPI_COMM_WORLD_RANK"].c_str())] = m;
  }
  return by_rank;
}

}  // namespace

TEST_SUITE("mpirun") {
  TEST_CASE("launcher, mpirun: the ranks get mpirun's world and the job's DISTCOMM_* settings") {
    const auto ranks = mpi_job_env(
        {"-np", "3", "--backend", "mpi"}, mpi_env({{"DISTCOMM_TIMEOUT", "42"}, {"RANK", "7"}}),
        "OMPI_COMM_WORLD_SIZE,DISTCOMM_RANK,DISTCOMM_WORLD_SIZE,RANK,WORLD_SIZE,MASTER_ADDR,"
        "DISTCOMM_BACKEND,DISTCOMM_AUTH_TOKEN,DISTCOMM_TIMEOUT,"
        "OMPI_MCA_btl_vader_single_copy_mechanism");
    REQUIRE(ranks.size() == 3);
    const std::string token = ranks.at(0).at("DISTCOMM_AUTH_TOKEN");
    CHECK(is_hex64(token));
    for (int r = 0; r < 3; ++r) {
      CAPTURE(r);
      const auto& e = ranks.at(r);
      CHECK(e.at("OMPI_COMM_WORLD_SIZE") == "3");
      for (const char* unset :
           {"DISTCOMM_RANK", "DISTCOMM_WORLD_SIZE", "RANK", "WORLD_SIZE", "MASTER_ADDR"}) {
        CHECK_MESSAGE(e.at(unset) == "<unset>", unset);
      }
      CHECK(e.at("DISTCOMM_BACKEND") == "mpi");
      CHECK(e.at("DISTCOMM_AUTH_TOKEN") == token);
      CHECK(e.at("DISTCOMM_TIMEOUT") == "42");
      // Turned off only where the probe found cross-process reads refused.
      const std::string single_copy = e.at("OMPI_MCA_btl_vader_single_copy_mechanism");
      CHECK((single_copy == "<unset>" || single_copy == "none"));
    }
  }

  TEST_CASE("launcher, mpirun: the caller's DISTCOMM_BACKEND=mpi and single-copy choice count") {
    const auto ranks = mpi_job_env(
        {"-np", "2"},
        mpi_env({{"DISTCOMM_BACKEND", "mpi"}, {"OMPI_MCA_btl_vader_single_copy_mechanism", "cma"}}),
        "OMPI_COMM_WORLD_SIZE,OMPI_MCA_btl_vader_single_copy_mechanism");
    REQUIRE(ranks.size() == 2);
    for (const auto& [rank, vars] : ranks) {
      CAPTURE(rank);
      CHECK(vars.at("OMPI_COMM_WORLD_SIZE") == "2");
      CHECK(vars.at("OMPI_MCA_btl_vader_single_copy_mechanism") == "cma");
    }
  }

  TEST_CASE("launcher, mpirun: the exit code of a failing rank comes back through mpirun") {
    const result r =
        run({"-np", "2", "--backend", "mpi", child_path, "rank-exit", "1", "3", "sleep-forever"},
            mpi_env());
    CHECK(r.code == 3);
    CHECK_HAS(r.err, "distcomm-run: mpirun exited with code 3\n");
    CHECK(r.seconds < 10);
  }

  TEST_CASE("launcher, mpirun: --timeout stops mpirun and every rank") {
    scratch_dir dir;
    launch l({"-np", "2", "--backend", "mpi", "--timeout", "1.5", "--grace", "2", child_path,
              "pidfile", dir.str(), "sleep-forever"},
             mpi_env());
    const result r = l.wait();
    CHECK(r.code == 124);
    CHECK_HAS(r.err, "distcomm-run: job did not finish within 1.5 s (--timeout); killed mpirun\n");
    CHECK(r.seconds >= 1.5);
    CHECK(r.seconds < 8);
    check_all_gone(dir, 2);
  }

  TEST_CASE("launcher, mpirun: --tag-output is mpirun's own") {
    const result r = run(
        {"-np", "2", "--backend", "mpi", "--tag-output", child_path, "print", "hello"}, mpi_env());
    CHECK(r.code == 0);
    const std::vector<std::string> lines = lines_of(r.out);
    REQUIRE(lines.size() == 2);
    std::set<std::string> tags;
    for (const auto& line : lines) {
      CAPTURE(line);
      CHECK(line.substr(line.size() - 5) == "hello");
      CHECK_HAS(line, "]<stdout>:");
      tags.insert(line.substr(0, line.find(']') + 1));
    }
    CHECK(tags.size() == 2);  // one per rank: "[1,0]" and "[1,1]" (job id, rank)
  }
}
