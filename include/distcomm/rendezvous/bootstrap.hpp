// bootstrap(): the one call that turns "a process started by some launcher" into a member of a
// DistComm job: detect the world from the environment, log it, and connect to the job's
// key-value store (rank 0 hosts it at the master address unless DISTCOMM_STORE_ADDR names another
// host), authenticated with DISTCOMM_AUTH_TOKEN / DISTCOMM_AUTH_TOKEN_FILE when set, and refused
// at once by a store of another job. Backends exchange their addresses through the returned store.
#pragma once

#include <memory>

#include "distcomm/config.hpp"
#include "distcomm/rendezvous/store.hpp"
#include "distcomm/rendezvous/tcp_store.hpp"
#include "distcomm/rendezvous/world.hpp"

namespace distcomm {

struct job {
  world_info world;
  std::shared_ptr<store> kv;  // null for a single process (size 1)
};

// Reads the environment (world, store address, token, job), connects, and waits until every
// rank has connected (the barrier "distcomm/bootstrap"): all of it within one cfg.timeout
// (DISTCOMM_TIMEOUT) from the call, not one per step. While it waits (the store is not up yet,
// its address does not resolve, some rank has not arrived) it logs at warn level every few
// seconds what it waits for and how long is left. On failure: timeout_error naming the ranks
// that never arrived, or rendezvous_error (e.g. the store at the master port belongs to another
// job, or that port is taken).
job bootstrap(const config& cfg = config::from_env());
job bootstrap(const config& cfg, const env_lookup& getenv);

// This process's job, bootstrapped once and kept for the life of the process: every backend
// a program makes by name (distcomm::init(), plugins) meets over it, since a second bootstrap
// would try to host the store again on the master port. Backends made over one job pair up across
// ranks in the order they were made, as the n-th of each rank. Thread-safe.
job shared_bootstrap(const config& cfg = config::from_env());

// What bootstrap() says of this rank's job in the store handshake: the world size, and as id
// DISTCOMM_JOB_ID when set, else what the launcher that matched calls the job (torchrun's
// TORCHELASTIC_RUN_ID; PMIX_NAMESPACE or Open MPI's OMPI_MCA_ess_base_jobid; Slurm's job and
// step ids), else none (the world size alone then tells jobs apart).
job_identity job_identity_from_env(const world_info& w, const env_lookup& getenv);

}  // namespace distcomm
