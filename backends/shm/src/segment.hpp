// The shm backend's shared memory: one segment per rank, its layout, and the operating system's
// pieces the backend waits with (futex, pidfd). Internal to backends/shm.
//
// Layout of rank r's segment (every field is written by the rank named):
//   header                           doorbell and sleepers (anyone bumps, r sleeps on it), the
//                                    collective generation r reached (r), abort flag and reason
//                                    (r), r's call fingerprints for the agreement before a
//                                    collective (r), where r's buffers are for single copy (r)
//   ring[d] for every rank d         r's messages to d: head (r), tail (d), data (r writes, d
//   reads) area[2]                          r's staging for the collectives (r writes, every rank
//   reads)
#pragma once

#include <sys/types.h>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "distcomm/check/fingerprint.hpp"

namespace distcomm::detail::shm {

constexpr std::uint32_t segment_magic = 0x44435348;  // "DCSH"
constexpr std::uint32_t layout_version = 4;
constexpr std::size_t line = 64;

struct alignas(line) header {
  std::uint32_t magic;
  std::uint32_t version;
  std::int32_t pid;
  std::int32_t ranks;
  std::uint64_t ring_bytes;
  std::uint64_t chunk_bytes;
  alignas(line) std::atomic<std::uint32_t> doorbell;  // the futex word r sleeps on
  std::atomic<std::uint32_t> sleepers;                // threads of r asleep (or about to be)
  alignas(line) std::atomic<std::uint64_t> arrived;   // collectives r has entered
  // check::digest of what r agrees with at generation g, in digest[g % 2], beside `arrived` so
  // that a peer waiting for r reads it in the same cache line; 0 with a notice (shm_state::agree).
  std::atomic<std::uint64_t> digest[2];
  // Single copy (single_copy.hpp): where r's input and output of the collective it entered last
  // are in its own address space, written before `arrived` moves (released by it), so a peer
  // reads them in the line it polls. They change only at r's next collective, which no rank
  // enters before every rank has read what it needed here.
  std::atomic<std::uint64_t> in_addr;
  std::atomic<std::uint64_t> out_addr;
  // A word of r's memory holding probe_value: the peers read it at start-up to learn whether
  // single copy is allowed here.
  std::uint64_t probe_addr;
  std::uint64_t probe_value;
  alignas(line) std::atomic<std::uint32_t> aborted;  // set once `reason` is written
  char reason[512];
  // What r agrees with at generation g, in agreed[g % 2]: written before r's `arrived` reaches g,
  // read by the peers once theirs has (shm_state::agree).
  alignas(line) check::agreement agreed[2];
};

struct alignas(line) ring_header {
  std::atomic<std::uint64_t> head;                // bytes ever written by the producer
  alignas(line) std::atomic<std::uint64_t> tail;  // bytes ever read by the consumer
};

static_assert(std::atomic<std::uint64_t>::is_always_lock_free &&
                  std::atomic<std::uint32_t>::is_always_lock_free,
              "shm: the shared counters must be lock-free to work across processes");

// A mapped segment of `ranks` ranks with the given sizes (multiples of `line`).
class segment {
 public:
  segment() = default;
  segment(segment&& o) noexcept { *this = std::move(o); }
  segment& operator=(segment&& o) noexcept;
  segment(const segment&) = delete;
  segment& operator=(const segment&) = delete;
  ~segment();

  // Creates and maps a new segment named `name` (O_EXCL), its memory reserved now (a full
  // /dev/shm is an error here, not a SIGBUS later), and writes its header.
  static segment create(const std::string& name, int ranks, std::size_t ring_bytes,
                        std::size_t chunk_bytes);
  // Maps the existing segment `name`, after checking that it is this user's, mode 0600, of the
  // expected size, and checks its header against what the caller expects.
  static segment open(const std::string& name, int ranks, std::size_t ring_bytes,
                      std::size_t chunk_bytes);

  static std::size_t bytes_for(int ranks, std::size_t ring_bytes, std::size_t chunk_bytes);

  header& head() const { return *reinterpret_cast<header*>(base_); }
  ring_header& ring(int dest) const;
  unsigned char* ring_data(int dest) const;
  unsigned char* area(int half) const;
  std::size_t ring_bytes() const { return ring_bytes_; }
  std::size_t chunk_bytes() const { return chunk_bytes_; }
  bool mapped() const { return base_ != nullptr; }

 private:
  unsigned char* base_ = nullptr;
  std::size_t bytes_ = 0;
  int ranks_ = 0;
  std::size_t ring_bytes_ = 0;
  std::size_t chunk_bytes_ = 0;
};

// A name for this process's next segment:
// /distcomm-shm.<uid>.<pid namespace>.<pid>.<n>.<128 random bits in hex>.
std::string fresh_name();
// Unlinks the segments of this user and PID namespace whose creating process no longer exists (a
// rank killed between creating its segment and unlinking it); once per process.
void sweep_stale();
void unlink(const std::string& name) noexcept;

// Host identity: host name and kernel boot id; ranks with different ones are not on one host.
std::string host_identity();
// This process's PID namespace (its /proc/self/ns/pid link), to check that peers' pids mean
// the same processes here.
std::string pid_namespace();

// Sleeps on `word` while it holds `expected`, for at most `for_at_most` (0: not at all).
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                std::chrono::nanoseconds for_at_most);
void futex_wake_all(std::atomic<std::uint32_t>& word);

// Wakes rank r: bumps its doorbell, and enters the kernel only when it sleeps.
inline void bump(header& h) {
  h.doorbell.fetch_add(1, std::memory_order_seq_cst);
  if (h.sleepers.load(std::memory_order_seq_cst) != 0) futex_wake_all(h.doorbell);
}

// A handle that tells whether a process has exited: a pidfd where the kernel has them, else
// kill(pid, 0) (whose answer a reused pid could fool; said in docs/FAULTS.md).
class process_watch {
 public:
  process_watch() = default;
  explicit process_watch(pid_t pid);
  process_watch(process_watch&& o) noexcept { *this = std::move(o); }
  process_watch& operator=(process_watch&& o) noexcept;
  process_watch(const process_watch&) = delete;
  process_watch& operator=(const process_watch&) = delete;
  ~process_watch();
  bool exited() const;

 private:
  pid_t pid_ = 0;
  int fd_ = -1;
};

}  // namespace distcomm::detail::shm
