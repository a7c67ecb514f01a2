// Internals shared by the MPI backend's translation units: the communicator state every request
// keeps alive, the one MPI error check, and the polling loop used by every wait.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include "distcomm/backend.hpp"
#include "distcomm/core/coarse_clock.hpp"
#include "distcomm/core/error.hpp"

namespace distcomm::detail {

// Every MPI call of the process goes through this lock: MPI is initialised
// MPI_THREAD_SERIALIZED, and a process may use communicators from several threads at once (a
// communicator's progress thread, an engine's thread, the program's own). Held for one call or one
// test at a time, never across a wait, so threads interleave their waits.
inline std::recursive_mutex& mpi_mutex() {
  static std::recursive_mutex* m = new std::recursive_mutex;  // never destroyed (static teardown)
  return *m;
}
using mpi_lock = std::lock_guard<std::recursive_mutex>;

// Every MPI return code goes through here: MPI_SUCCESS passes, anything else becomes a
// backend_error carrying the routine, the code and MPI_Error_string.
void mpi_check(int rc, const char* routine);
#define DISTCOMM_MPI_CHECK(call, routine) ::distcomm::detail::mpi_check((call), routine)

// Set once any mpi_state of this process failed or was aborted; MPI is then not finalized at exit
// (init_guard in mpi.cpp).
extern std::atomic<bool> mpi_process_failed;

// The fence: set once DistComm let go of a request MPI still holds (a native collective that
// timed out, a send or a matched receive freed while pending). MPI cannot cancel those, and may
// read or write their buffers, which the caller may free by then, during any later MPI call of
// this process: every call drives the progress of every request. So from then on DistComm makes
// no MPI call in this process: every communicator's next call throws peer_lost_error saying why
// (docs/FAULTS.md, "Memory after a failed call").
void mpi_fence(const std::string& why) noexcept;
extern std::atomic<bool> mpi_process_fenced;
inline bool mpi_fenced() noexcept { return mpi_process_fenced.load(std::memory_order_acquire); }

struct mpi_state {
  MPI_Comm comm = MPI_COMM_NULL;
  bool owned = false;  // freed by us
  int rank = 0;
  int size = 1;
  int tag_ub = 32767;  // MPI_TAG_UB of this MPI, as it reports it (tags.hpp maps into it)
  std::atomic<bool> aborted{false};
  // Set once a peer stopped taking messages: a wait timed out, MPI reported an error, or a pending
  // send had to be abandoned. From then on a pending send that is destroyed is freed at once
  // instead of waited for, so unwinding a strategy's requests after a failure costs nothing per
  // send. The backend stays usable (a timed-out receive is cancelled cleanly).
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::string abort_reason;
  // Reductions MPI does not provide, or not as DistComm defines them, done by distcomm::combine:
  // f16 and bf16 (MPI has no such types; their payloads travel as MPI_UINT16_T) and i8 and u8,
  // which must wrap around where Open MPI 4.1's AVX reductions saturate (sum of u8 200 and 200:
  // 255 instead of 144). Indexed [f16, bf16, i8, u8][sum, min, max, prod].
  MPI_Op user_ops[4][4] = {};

  mpi_state(MPI_Comm c, bool own);
  ~mpi_state();
  mpi_state(const mpi_state&) = delete;
  mpi_state& operator=(const mpi_state&) = delete;

  void abort(const std::string& reason) noexcept;
  [[noreturn]] void throw_aborted();
  // Throws peer_lost_error once this communicator is aborted or the process fenced.
  void check_aborted() {
    if (aborted.load(std::memory_order_acquire) || mpi_fenced()) throw_aborted();
  }
  void mark_failed() noexcept {
    failed.store(true, std::memory_order_release);
    mpi_process_failed.store(true, std::memory_order_release);
  }
  bool has_failed() const {
    return failed.load(std::memory_order_acquire) || aborted.load(std::memory_order_acquire);
  }
};

// Matches the receives posted so far (in every backend of the process) with the messages that
// have arrived, in posting order per communicator, peer and tag: MPI_Improbe, then MPI_Imrecv into
// the receive's buffer when the sizes agree, or into a buffer of its own (dropped once complete)
// when they do not. Every wait calls it, so a peer's send completes while this rank waits on
// anything else, as it would with receives posted to MPI.
void mpi_serve_receives();

// Polls `done()` (which drives MPI progress through MPI_Test) with a short backoff: spin first
// (latency of small messages), then yield, then, unless `may_sleep` is false, sleep a few
// microseconds so a long wait does not burn a core. Returns false if `until` passed first.
// A collective must not sleep: Open MPI's non-blocking collectives (libnbc) and its shared-memory
// transport move data only inside MPI calls, so every sleep stalls the transfer on both ranks
// (a 16 MiB MPI_Iallreduce took 5x as long as MPI_Allreduce with the sleeps).
template <class Done>
bool mpi_poll(Done&& done, deadline until, bool may_sleep = true) {
  for (int i = 0;; ++i) {
    if (done()) return true;
    if (coarse_now() >= until) return done();  // deadlines in seconds: the tick time will do
    if (i < 200) continue;
    if (i < 1000 || !may_sleep) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

}  // namespace distcomm::detail
