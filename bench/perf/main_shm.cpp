// distcomm-bench-shm: the sweep on the shm backend (processes of one host), met through the
// job's store.
//   distcomm-run -np 2 distcomm-bench-shm -b 8 -e 64M -f 2 --peer gloo
#include <string>

#include "distcomm/backends/shm.hpp"
#include "distcomm/config.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"
#include "driver.hpp"

int main(int argc, char** argv) {
  namespace db = distcomm::bench;
  namespace dc = distcomm;
  const char* program = "distcomm-bench-shm";
  db::options o;
  if (const int rc = db::parse_options(argc, argv, {program, false}, o); rc >= 0) return rc;
  return db::guarded_main(program, [&] {
    const dc::config cfg = dc::config::from_env();
    const dc::world_info w = dc::detect_world();
    db::process_env env;
    env.program = program;
    env.peer.rank = w.rank;
    env.peer.size = w.size;
    env.peer.single_node = w.single_node();
    env.peer.launcher = w.launcher;
    env.peer.timeout = cfg.timeout;
    db::precheck<dc::shm_backend>(o, env.peer);
    dc::job j = dc::bootstrap(cfg);
    env.peer.kv = [&] { return j.kv; };
    dc::shm_options go;
    go.timeout = cfg.timeout;
    dc::shm_backend b(j, go);
    return db::run(std::move(b), o, env);
  });
}
