// A late write, tried for real (docs/FAULTS.md, "Memory after a failed call"). Rank 1 stops
// itself (SIGSTOP) while rank 0 is in a native allreduce with it, or in the middle of receiving a
// 4 MiB message from it. Rank 0 times out, unmaps the buffer it had given MPI, continues rank 1
// (SIGCONT) and goes on with MPI through another communicator while rank 1 finishes its side.
// Before the fence (backends/mpi/src/mpi_state.hpp), that later call drove MPI's progress and MPI
// wrote rank 1's data into the unmapped buffer: SIGSEGV. Now it throws peer_lost_error saying why,
// and nothing is written. The buffer is unmapped rather than freed: a freed heap buffer catches
// only the writes AddressSanitizer sees (its memcpy), not MPI's own reduction loops or a kernel
// copy, while any write to an unmapped page faults.
// A receive that times out before its message arrived is retracted, not given up: the process
// stays usable (case "unmatched").
//
// usage: mpirun -np 2 distcomm-test-mpi-late-write native|receive|unmatched
// Each rank prints "late-write <case>: rank <r>: ok", or FAILED and exits 1; no rank finalizes MPI
// (a failed process does not). late_write.sh checks both ranks.
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "distcomm/backends/mpi.hpp"
#include "distcomm/core/error.hpp"

using namespace distcomm;

namespace {

constexpr std::size_t floats = std::size_t{1} << 20;  // 4 MiB: past every eager protocol
constexpr std::size_t buffer_bytes = floats * sizeof(float);
constexpr tag_t tag = 7;

std::string which;
int me = 0;

[[noreturn]] void finish(bool ok, const std::string& what) {
  std::printf("late-write %s: rank %d: %s: %s\n", which.c_str(), me, ok ? "ok" : "FAILED",
              what.c_str());
  std::fflush(stdout);
  std::_Exit(ok ? 0 : 1);  // MPI is not finalized after a failure (mpi.cpp, init_guard)
}

deadline in_seconds(double s) { return deadline_after(std::chrono::duration<double>(s)); }

float* map_buffer() {
  void* p = mmap(nullptr, buffer_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) finish(false, std::string("mmap: ") + std::strerror(errno));
  auto* f = static_cast<float*>(p);
  for (std::size_t i = 0; i < floats; ++i) f[i] = 1.0f;
  return f;
}

// Rank 0, after its call failed: the buffer goes, rank 1 goes on, and rank 0 calls MPI again
// through `other`, which must refuse because the process is fenced. Then it stays until rank 1
// has given up too (SIGUSR1: MPI is not to be used), so any other path of a write would still hit
// it.
[[noreturn]] void after_giving_up(float* buffer, mpi_backend& other, pid_t peer) {
  munmap(buffer, buffer_bytes);
  kill(peer, SIGCONT);
  try {
    other.native_barrier(in_seconds(10));
    finish(false, "a barrier on another communicator went through after a request was given up");
  } catch (const peer_lost_error& e) {
    if (std::string(e.what()).find("no MPI call is made") == std::string::npos) {
      finish(false, std::string("peer_lost_error without the fence's reason: ") + e.what());
    }
    std::printf("late-write %s: rank 0: as expected: %s\n", which.c_str(), e.what());
  }
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  const timespec limit{30, 0};
  if (sigtimedwait(&usr1, nullptr, &limit) != SIGUSR1) finish(false, "rank 1 did not finish");
  finish(true, "the unmapped buffer was not written");
}

// Rank 1 after it was continued: `step` fails or not (rank 0 makes no more MPI calls); either way
// it then finds this process fenced or its communicator failed, but must not crash. Then it tells
// rank 0 and waits to be ended: the job ends when rank 0 leaves.
template <class Step>
[[noreturn]] void resumed(Step&& step, mpi_backend& other, pid_t peer) {
  try {
    step();
  } catch (const error& e) {
    std::printf("late-write %s: rank 1: %s\n", which.c_str(), e.what());
  }
  try {
    other.native_barrier(in_seconds(2));
  } catch (const error& e) {
    std::printf("late-write %s: rank 1: %s\n", which.c_str(), e.what());
  }
  std::printf("late-write %s: rank 1: ok: rank 1 finished its side\n", which.c_str());
  std::fflush(stdout);
  kill(peer, SIGUSR1);
  std::this_thread::sleep_for(std::chrono::seconds(30));
  std::_Exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  which = argc > 1 ? argv[1] : "";
  if (which != "native" && which != "receive" && which != "unmatched") {
    std::fprintf(stderr, "usage: %s native|receive|unmatched\n", argv[0]);
    return 2;
  }
  sigset_t usr1;  // blocked in every thread: rank 0 takes it with sigtimedwait
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &usr1, nullptr);
  try {
    mpi_backend x;      // the communicator whose call fails
    mpi_backend other;  // the process's later MPI use
    me = x.rank();
    if (x.size() != 2) finish(false, "needs exactly 2 ranks");
    int pids[2] = {0, 0};
    pids[me] = static_cast<int>(getpid());
    other.native_allgather(&pids[me], pids, 1, dtype::i32, in_seconds(30));
    const pid_t peer = static_cast<pid_t>(pids[1 - me]);

    if (which == "native") {
      if (me == 1) {
        raise(SIGSTOP);  // rank 0 is in the allreduce by now, or soon
        float* mine = map_buffer();
        resumed(
            [&] {
              x.native_allreduce(mine, mine, floats, dtype::f32, reduce_op::sum, in_seconds(2));
            },
            other, peer);
      }
      float* buffer = map_buffer();
      try {
        x.native_allreduce(buffer, buffer, floats, dtype::f32, reduce_op::sum, in_seconds(2));
        finish(false, "the allreduce completed although rank 1 was stopped");
      } catch (const timeout_error&) {
      }
      after_giving_up(buffer, other, peer);
    }

    if (which == "receive") {
      if (me == 1) {
        float* mine = map_buffer();
        mpi_request send = x.isend(mine, buffer_bytes, 0, tag);  // its first fragment leaves now
        raise(SIGSTOP);
        resumed(
            [&] {
              mpi_request mine_here = std::move(send);  // destroyed, so given up, on timeout
              mine_here.wait(in_seconds(2));
            },
            other, peer);
      }
      float* buffer = map_buffer();
      mpi_request receive = x.irecv(buffer, buffer_bytes, 1, tag);
      try {
        receive.wait(in_seconds(2));
        finish(false, "the receive completed although rank 1 was stopped");
      } catch (const timeout_error&) {
      }
      after_giving_up(buffer, other, peer);
    }

    // unmatched: rank 1 sends nothing; rank 0's receive times out and is retracted, and both
    // communicators stay usable.
    float* buffer = map_buffer();
    if (me == 0) {
      mpi_request receive = x.irecv(buffer, buffer_bytes, 1, tag);
      try {
        receive.wait(in_seconds(0.5));
        finish(false, "a receive completed with nothing sent");
      } catch (const timeout_error&) {
      }
    }
    other.native_barrier(in_seconds(30));
    x.native_allreduce(buffer, buffer, floats, dtype::f32, reduce_op::sum, in_seconds(30));
    if (buffer[0] != 2.0f || buffer[floats - 1] != 2.0f) finish(false, "wrong sum after a retract");
    finish(true, "the backend stays usable after an unmatched receive timed out");
  } catch (const std::exception& e) {
    finish(false, std::string("unexpected error: ") + e.what());
  }
}
