// distcomm::init(): one call that makes this process a rank of its job, the way
// dist.init_process_group() or hvd.init() do. It reads the world from whatever the launcher set
// (distcomm-run, mpirun, srun, torchrun, TF_CONFIG: docs/RENDEZVOUS.md), picks the backend and
// the strategy by name, and connects:
//   auto comm = distcomm::init();                  // DISTCOMM_BACKEND, DISTCOMM_STRATEGY
//   auto comm = distcomm::init({"gloo", "ring"});  // named in code
// The backend is the one named, else DISTCOMM_BACKEND, else the fastest built for host tensors on
// this kind of job (default_backend() in registry/backends.hpp says which and why); the strategy
// the one named, else DISTCOMM_STRATEGY, else auto. DISTCOMM_TIMEOUT bounds the whole start-up
// and every wait after it, in every backend. Needs DistComm::DistComm.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "distcomm/any_communicator.hpp"
#include "distcomm/config.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"

namespace distcomm {

struct init_options {
  std::string backend;             // empty: DISTCOMM_BACKEND, else default_backend()
  std::string strategy;            // empty: DISTCOMM_STRATEGY, else auto
  std::optional<config> settings;  // empty: config::from_env()
};

// invalid_argument_error before anything connects when a name is unknown, or a strategy does not
// run on the backend; rendezvous_error / timeout_error when the ranks cannot meet.
any_communicator init(const init_options& options = {});
// The same over a job this program met itself: its world (rank and size) and a store every rank
// shares, e.g. a framework's own (the torch.distributed binding passes PyTorch's). The backend
// connects over it instead of bootstrapping from the launcher's variables, and the default
// backend is chosen for that world. mpi accepts only a world that is MPI_COMM_WORLD.
any_communicator init(const job& world, const init_options& options = {});

// Growing a running job (docs/FAULTS.md, "Grow"). A process started for a rank the job lost, with
// the same job variables (a restarted pod, a new process on a spare node), finds in init() that
// the job runs without it and waits there, within DISTCOMM_TIMEOUT, to be admitted; init() then
// returns its communicator in the grown job. The running ranks admit it at a step boundary:
//   if (waiting_to_join(comm) > 0 ...agreed on every rank...) if (auto c = grow(comm)) comm = *c;
// waiting_to_join(comm): on rank 0 of comm, in a job this process bootstrapped, how many
// replacements wait (a read of the job's store); 0 on the other ranks and where no store exists.
// Cheap enough for every step (it reads the store at most every 100 ms); the ranks must agree on
// it, e.g. as one more element averaged with the gradients (rank 0's count, 0 elsewhere: above 0
// on every rank).
std::int64_t waiting_to_join(const any_communicator& comm);
// Every rank of `comm`, at the same point: rank 0 reads who waits and tells the others; the
// replacements for job ranks that are not members are admitted, the others refused with the
// reason (a duplicate of a live rank). Returns the grown communicator (old and new members
// ranked by job rank, connected anew as init() of the launcher's job was asked, as the
// replacements' init() does: a hierarchical job is hierarchical again), or nullopt when
// nobody joins (comm stays as it was). A replacement may take rank 0 (it replaces job rank 0):
// send the state from a rank that has it (is_replacement()). Needs a job bootstrapped through
// the job's store (not init(job)), a backend that connects through it (gloo, ucx, shm); otherwise
// invalid_argument_error. A lost member: peer_lost_error / timeout_error, as in any collective.
std::optional<any_communicator> grow(any_communicator& comm);
// True in a process whose init() joined a running job as a replacement: its program's state
// (parameters, step) must come from the ranks that were running.
bool is_replacement() noexcept;

// The backend and strategy init() would take with these options, without connecting: for
// --help texts, logs and --print-config.
std::string resolved_backend(const init_options& options = {});
std::string resolved_strategy(const init_options& options = {});

}  // namespace distcomm
