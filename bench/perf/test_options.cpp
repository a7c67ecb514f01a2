// The command line as a script written for nccl-tests' all_reduce_perf uses it: -g, -m, -z and -G
// with the values that mean what DistComm does are taken, the others refused saying why; --help
// offers --peer only where it can run.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "options.hpp"

namespace db = distcomm::bench;

namespace {

#define CHECK_HAS(text, part)                                      \
  CHECK_MESSAGE(std::string(text).find(part) != std::string::npos, \
                "'" << (text) << "' does not mention '" << (part) << "'")

const db::command_line gloo{"distcomm-bench-gloo", false};
const db::command_line local{"distcomm-bench-local", true, false};

struct parsed {
  int rc = 0;
  db::options o;
  std::string printed;  // stdout and stderr together
};

// parse_options over `args` as a program's argv, with what it prints.
parsed parse(const std::vector<std::string>& args, const db::command_line& cl = gloo) {
  std::vector<std::string> storage = {cl.program};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : storage) argv.push_back(a.data());

  std::FILE* sink = std::tmpfile();
  REQUIRE(sink != nullptr);
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  const int saved_out = ::dup(1), saved_err = ::dup(2);
  ::dup2(::fileno(sink), 1);
  ::dup2(::fileno(sink), 2);
  parsed p;
  p.rc = db::parse_options(static_cast<int>(argv.size()), argv.data(), cl, p.o);
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  ::dup2(saved_out, 1);
  ::dup2(saved_err, 2);
  ::close(saved_out);
  ::close(saved_err);
  std::rewind(sink);
  for (int c; (c = std::fgetc(sink)) != EOF;) p.printed += static_cast<char>(c);
  std::fclose(sink);
  return p;
}

}  // namespace

TEST_CASE("options: nccl-tests' -g 1 -m 1 -z 0 -G 0 are taken") {
  const parsed p =
      parse({"-b", "8", "-e", "64K", "-f", "2", "-g", "1", "-m", "1", "-z", "0", "-G", "0"});
  CHECK_MESSAGE(p.rc == -1, p.printed);
  CHECK(p.o.gpus_per_thread == 1);
  CHECK(p.o.agg_iters == 1);
  CHECK(p.o.blocking == 0);
  CHECK(p.o.graph_launches == 0);
  // Long names as nccl-tests spells them.
  CHECK(parse({"--ngpus", "1", "--agg_iters", "1", "--blocking", "1", "--cudagraph", "0"}).rc ==
        -1);
}

TEST_CASE("options: -m N runs N collectives per timed iteration, -z 1 is what DistComm does") {
  const parsed p = parse({"-m", "4", "-z", "1"});
  CHECK_MESSAGE(p.rc == -1, p.printed);
  CHECK(p.o.agg_iters == 4);
  CHECK(p.o.blocking == 1);
  CHECK(parse({"-m", "0"}).rc > 0);
  CHECK(parse({"-z", "2"}).rc > 0);
}

TEST_CASE("options: -g above 1 and -G above 0 are refused, saying why") {
  const parsed g = parse({"-g", "2"});
  CHECK(g.rc == 2);
  CHECK_HAS(g.printed, "-g 2: this benchmark drives one device per rank");
  CHECK_HAS(g.printed, "start 2 times the ranks instead");
  const parsed graph = parse({"-G", "5"});
  CHECK(graph.rc == 2);
  CHECK_HAS(graph.printed, "-G 5: DistComm does not capture its collectives in CUDA graphs");
}

TEST_CASE("options: --help lists --peer only where it can run") {
  const parsed on_gloo = parse({"--help"});
  CHECK(on_gloo.rc == 0);
  CHECK_HAS(on_gloo.printed, "--peer");
  CHECK_HAS(on_gloo.printed, "-m,--agg_iters");
  const parsed on_local = parse({"--help"}, local);
  CHECK(on_local.rc == 0);
  CHECK_HAS(on_local.printed, "--nthreads");
  CHECK(on_local.printed.find("--peer") == std::string::npos);
  // Still parsed there, so the program refuses it with its reason rather than "not expected".
  const parsed peer = parse({"--peer", "mpi"}, local);
  CHECK(peer.rc == -1);
  CHECK(peer.o.peer == "mpi");
}

TEST_CASE("options: --floor is a column of the size sweep") {
  CHECK_FALSE(parse({}).o.floor);
  const parsed on = parse({"--floor", "-b", "8", "-e", "64K"});
  CHECK(on.rc == -1);
  CHECK(on.o.floor);
  const char* profile = "/proc/self/status";  // any existing file: refused before it is read
  const parsed both = parse({"--floor", "--profile", profile});
  CHECK(both.rc == 2);
  CHECK_HAS(both.printed, "--floor is a column of the size sweep");
}

TEST_CASE("options: --pattern tp puts compute before every allreduce, and refuses the rest") {
  CHECK(parse({}).o.pattern == "sweep");
  const parsed tp = parse({"--pattern", "tp", "--compute-us", "5", "-b", "8K", "-e", "64K"});
  CHECK(tp.rc == -1);
  CHECK(tp.o.pattern == "tp");
  CHECK(tp.o.compute_us == 5.0);
  const parsed other = parse({"--pattern", "tp", "--collective", "alltoall"});
  CHECK(other.rc == 2);
  CHECK_HAS(other.printed, "--pattern tp repeats one allreduce");
  const parsed floor = parse({"--pattern", "tp", "--floor"});
  CHECK(floor.rc == 2);
  CHECK_HAS(floor.printed, "--floor times a bare exchange");
  CHECK(parse({"--pattern", "ring"}).rc != -1);
}
