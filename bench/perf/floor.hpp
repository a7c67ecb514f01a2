// --floor: the hardware's floor for a small collective between two processes of one host, timed
// in the same run as the collectives it is set against. Ranks 0 and 1 share one cache line (a
// page of POSIX shared memory, mode 0600, unlinked once both mapped it) and pass a counter back
// and forth: one round trip is the least any two-rank exchange can cost, whatever the transport
// (an 8-byte allreduce needs at least one).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace distcomm::bench {

class cache_line_floor {
 public:
  // Rank 0: creates the page and returns its key, for the other rank to open (broadcast it).
  static std::uint64_t create();
  // Maps the page of `key` (checked: a regular shared-memory object of this user, one page).
  // rank: 0 pings, 1 answers; a wait longer than `timeout` is a timeout_error naming the other.
  cache_line_floor(std::uint64_t key, int rank, std::chrono::duration<double> timeout);
  ~cache_line_floor();
  cache_line_floor(const cache_line_floor&) = delete;
  cache_line_floor& operator=(const cache_line_floor&) = delete;

  // After both ranks mapped it: the name goes, the mapping stays.
  void unlink() noexcept;
  // One ping and its pong. Rank 0 times it, from before the ping to after the pong (the other
  // rank's time in a call includes waiting for rank 0 to reach it).
  void round_trip();
  // Rank 0: the mean round trip since the last call, in microseconds (0 on rank 1).
  double take_mean_us() noexcept;

 private:
  void wait_for(std::uint64_t value);

  std::string name_;
  std::atomic<std::uint64_t>* line_ = nullptr;
  std::uint64_t turn_ = 0;
  std::chrono::steady_clock::duration spent_{};
  std::uint64_t timed_ = 0;
  int rank_ = 0;
  std::chrono::duration<double> timeout_;
};

}  // namespace distcomm::bench
