// trace::flight_recorder: the last N collectives of one communicator (DISTCOMM_FLIGHT_RECORDER,
// 0 turns it off), each with its sequence number, collective, dtype, count, op, root, the ranks
// taking part, its state (posted, started, completed, failed, with the error) and timestamps. It
// costs one mutex and a few stores per collective (docs/FAULTS.md has the figures).
//
// Every recorder of a process is written, as one JSON file per process, into DISTCOMM_DUMP_DIR:
// when a collective fails (times out, loses a peer, finds a mismatch), when the process gets
// SIGUSR1 (where the application did not install its own handler), and when dump_flight_records()
// is called. `distcomm-trace DIR` reads the files of every rank and names the collective the
// ranks diverged on and the ranks that were behind (docs/FAULTS.md, "Hang forensics").
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distcomm/check/fingerprint.hpp"
#include "distcomm/core/coarse_clock.hpp"

namespace distcomm::trace {

class flight_recorder {
 public:
  // Steady time (the deadlines' clock, read once per collective for both); the dumps turn it
  // into wall-clock time.
  using time_point = std::chrono::steady_clock::time_point;
  enum class state : std::uint8_t { posted, started, completed, failed };

  // Who the recorder belongs to: the same name and ranks on every rank of the communicator.
  struct identity {
    std::string name;        // next_recorder_identity()'s, "c0/1", ...: the same on every member
    int rank = 0;            // in the communicator
    std::vector<int> ranks;  // the job's ranks of its members, in communicator order
    std::string backend;
    std::string strategy;
    std::chrono::duration<double> timeout{};  // each collective's deadline (DISTCOMM_TIMEOUT)
  };

  struct entry {
    std::uint64_t seq = 0;  // collectives of this communicator before this one
    const char* what = "";  // "allreduce", "grouped allreduce", ...
    check::call_fingerprint fp;
    state st = state::posted;
    time_point posted, started, ended;
    std::string error;            // when failed
    const char* error_kind = "";  // timeout, peer_lost, mismatch, backend, invalid_argument, error
  };

  // A recorder keeping `capacity` entries, registered with this process's dumps until it is
  // destroyed; nullptr when capacity is 0.
  static std::shared_ptr<flight_recorder> make(std::size_t capacity, identity id);
  ~flight_recorder();
  flight_recorder(const flight_recorder&) = delete;
  flight_recorder& operator=(const flight_recorder&) = delete;

  // To the kernel's tick (core/coarse_clock.hpp): the recorder reasons in seconds.
  static time_point now() { return coarse_now(); }

  // Runs call(context) as one collective, recorded by `r` (none when null): number `seq`,
  // posted at `posted` (none: when it started), started at `started`, then completed, or failed
  // with the exception it throws (rethrown); a failure other than invalid_argument_error (the
  // caller's own bad call) dumps every recorder of the process into `dump_dir`
  // (DISTCOMM_DUMP_DIR when empty).
  static void record(flight_recorder* r, std::uint64_t seq, const char* what,
                     const check::call_fingerprint& fp, time_point posted, time_point started,
                     const std::string& dump_dir, void (*call)(void*), void* context);

  // A collective posted (queued behind others) at `posted` and started at `started`: returns its
  // slot.
  std::uint64_t start(std::uint64_t seq, const char* what, const check::call_fingerprint& fp,
                      time_point posted, time_point started);
  // Its end: completed, or failed with `e`.
  void finish(std::uint64_t slot);
  void finish(std::uint64_t slot, const std::exception& e, const std::string& text);

  const identity& who() const noexcept { return id_; }
  // The entries still kept, oldest first, and how many were recorded in all.
  std::vector<entry> entries() const;
  std::uint64_t recorded() const;
  // This recorder as a JSON object (its identity and entries).
  std::string json() const;

  flight_recorder(std::size_t capacity, identity id);

 private:
  void end(std::uint64_t slot, state st, const char* kind, const std::string& text);
  // Taken twice per collective by the calling thread, by anyone else only to dump: a spin lock
  // (an exchange to take it, a plain store to give it back, where std::mutex's unlock is a second
  // exchange), yielding while a dump holds it.
  class spin_lock {
   public:
    void lock() noexcept {
      while (taken_.exchange(true, std::memory_order_acquire)) {
        while (taken_.load(std::memory_order_relaxed)) std::this_thread::yield();
      }
    }
    void unlock() noexcept { taken_.store(false, std::memory_order_release); }

   private:
    std::atomic<bool> taken_{false};
  };
  mutable spin_lock mu_;
  identity id_;
  std::vector<entry> ring_;
  std::uint64_t next_ = 0;  // entries recorded so far; slot n is ring_[n % capacity]
};

// The recorder identity of the next communicator this process makes from a backend, rank `rank`
// of `size`: named "c0", "c1", ... (so the job's first communicator, made alike on every rank, has
// the same name everywhere), its members' job ranks 0 .. size-1; or the name and ranks
// name_next_recorder() gave (recorder_names.hpp). Its sub-communicators are named after it:
// "c0/0", "c0/1", ...
flight_recorder::identity next_recorder_identity(int rank, int size);

// Writes every live recorder of this process into `dir` (DISTCOMM_DUMP_DIR when empty) as
// dir/distcomm-flight.<job rank>.<pid>.json, atomically (write_dump_file), one dump at a time in
// the process, with `reason`; then each format added with add_dump_writer writes its own files.
// Returns the path of DistComm's file, or "" when there is no directory to write to or nothing to
// write. Throws nothing: a dump that fails logs a warning.
std::string dump_flight_records(const std::string& reason, const std::string& dir = {});

// One dump, as the writers of other formats get it.
struct dump_contents {
  int job_rank = 0;  // this process's rank in the first communicator it made
  std::string reason;
  std::string dir;                                          // where the dump goes
  std::vector<std::shared_ptr<flight_recorder>> recorders;  // live ones, in the order made
  std::chrono::system_clock::duration wall_offset{};        // the wall clock's lead, read once
  // Nanoseconds since the epoch, on the wall clock, of the recorder's steady time `t`; 0 for none.
  std::int64_t wall_ns(flight_recorder::time_point t) const;
};

// Another format every dump also writes, beside DistComm's own file: `write` gets the dump and
// writes its files into contents.dir (with write_dump_file); what it throws is logged. The torch
// binding adds PyTorch's flight-recorder format (bindings/torch/src/torch_flight_recorder.cpp).
// Adding a name twice keeps the first writer.
using dump_writer = void (*)(const dump_contents& contents);
void add_dump_writer(const std::string& name, dump_writer write);

// Writes `bytes` to dir/name atomically (write_file_atomically, core/files.hpp). Returns the
// path, or "" (a warning logged).
std::string write_dump_file(const std::string& dir, const std::string& name,
                            const std::string& bytes);

}  // namespace distcomm::trace
