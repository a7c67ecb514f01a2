// The stall inspector of collectives: a rank that has waited longer than DISTCOMM_STALL_WARNING
// in a collective's agreement (check/agree.hpp), for a rank that has not entered the collective,
// logs which collective and which rank, and again after each further period, before the
// timeout ends the job. The waiting rank only marks where it waits (a few relaxed stores per
// round of the agreement); one thread per process, started by the first communicator that asks
// for it, looks at the marks and logs.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "distcomm/core/coarse_clock.hpp"

namespace distcomm::check {

class stall_watch {
 public:
  // A watch for one communicator of `rank`, warning after `every` (<= 0: nullptr, no watch).
  static std::shared_ptr<stall_watch> make(int rank, std::chrono::duration<double> every);

  // This rank now waits in collective number `seq` (`what`, a string literal) for `peer`.
  void waiting(const char* what, std::uint64_t seq, int peer) noexcept {
    what_.store(what, std::memory_order_relaxed);
    seq_.store(seq, std::memory_order_relaxed);
    peer_.store(peer, std::memory_order_relaxed);
    since_.store(now_ns(), std::memory_order_release);
  }
  void done() noexcept { since_.store(0, std::memory_order_release); }

  // For the inspector's thread: the line to log now, if any (empty otherwise).
  std::string due(std::int64_t now) noexcept;

  // The tick time (core/coarse_clock.hpp): read as every wait starts, for warnings in seconds.
  static std::int64_t now_ns() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(coarse_now().time_since_epoch())
        .count();
  }

  stall_watch(int rank, std::int64_t every_ns) : rank_(rank), every_ns_(every_ns) {}

 private:
  const int rank_;
  const std::int64_t every_ns_;
  std::atomic<std::int64_t> since_{0};  // 0: not waiting
  std::atomic<const char*> what_{nullptr};
  std::atomic<std::uint64_t> seq_{0};
  std::atomic<int> peer_{-1};
  std::int64_t warned_since_ = 0;  // the inspector's: which wait it last warned about, and when
  std::int64_t warned_at_ = 0;
};

}  // namespace distcomm::check
