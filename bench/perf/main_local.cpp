// distcomm-bench-local: the sweep on the local backend, every rank a thread of this process.
//   distcomm-bench-local -t 4 -b 8 -e 64M -f 2
#include <cstring>
#include <string>
#include <vector>

#include "distcomm/backends/local.hpp"
#include "driver.hpp"

int main(int argc, char** argv) {
  namespace db = distcomm::bench;
  const char* program = "distcomm-bench-local";
  // "-np N" as distcomm-run and mpirun spell it; CLI11 would read it as "-n p".
  std::vector<char*> args(argv, argv + argc);
  static char np[] = "--np";
  for (char*& a : args) {
    if (std::strcmp(a, "-np") == 0) a = np;
  }
  db::options o;
  if (const int rc =
          db::parse_options(static_cast<int>(args.size()), args.data(), {program, true, false}, o);
      rc >= 0) {
    return rc;
  }
  return db::guarded_main(program, [&] {
    if (!o.peer.empty()) {
      throw distcomm::invalid_argument_error(
          "--peer needs one rank per process; use distcomm-bench-mpi, -gloo or -ucx");
    }
    db::process_env env;
    env.program = program;
    env.threads = o.threads;
    distcomm::local_world world(o.threads);
    int rc = 0;
    world.run([&](distcomm::local_backend b) {
      const int rank = b.rank();
      const int r = db::run(std::move(b), o, env);
      if (rank == 0) rc = r;  // every rank returns the same code
    });
    return rc;
  });
}
