// bootstrap(): the one call that turns "a process started by some launcher" into a member of a
// DistComm job: detect the world from the environment, log it, and connect to the job's
// key-value store (rank 0 hosts it at the master address unless DISTCOMM_STORE_ADDR names another
// host), authenticated with DISTCOMM_AUTH_TOKEN / DISTCOMM_AUTH_TOKEN_FILE when set. Backends
// exchange their addresses through the returned store.
#pragma once

#include <memory>

#include "distcomm/config.hpp"
#include "distcomm/rendezvous/store.hpp"
#include "distcomm/rendezvous/world.hpp"

namespace distcomm {

struct job {
  world_info world;
  std::shared_ptr<store> kv;  // null for a single process (size 1)
};

// Reads the environment (world, store address, token), connects, and waits until every rank has
// connected (store_barrier "distcomm/bootstrap"), all within cfg.timeout.
job bootstrap(const config& cfg = config::from_env());
job bootstrap(const config& cfg, const env_lookup& getenv);

}  // namespace distcomm
