// The clock every call reads as it starts (its deadline, the flight recorder's times): the
// kernel's tick time, CLOCK_MONOTONIC_COARSE, which is steady_clock's own base (CLOCK_MONOTONIC,
// with glibc) read without the timestamp counter: 2.8 ns a read against steady_clock's 21.6 on
// the VM of docs/PERFORMANCE.md ("The mismatch check": two reads were a sixth of an 8-byte shm
// allreduce). It lags steady_clock by at most one tick (1-4 ms), which deadlines measured in
// seconds and hang forensics reasoning in seconds do not notice. Elsewhere steady_clock itself.
#pragma once

#include <chrono>
#include <ctime>

namespace distcomm {

inline std::chrono::steady_clock::time_point coarse_now() noexcept {
#if defined(__linux__) && defined(CLOCK_MONOTONIC_COARSE)
  timespec ts{};
  if (::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) == 0) {
    return std::chrono::steady_clock::time_point(
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec)));
  }
#endif
  return std::chrono::steady_clock::now();
}

}  // namespace distcomm
