// The stall inspector: see include/distcomm/check/stall.hpp.
#include "distcomm/check/stall.hpp"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distcomm/log.hpp"

namespace distcomm::check {

namespace {

// Process wide and never destroyed: its thread may still be asleep when the program exits.
struct inspector {
  std::mutex mutex;
  std::vector<std::weak_ptr<stall_watch>> watches;
  std::int64_t tick_ns = 1'000'000'000;
  bool started = false;

  void add(const std::shared_ptr<stall_watch>& w, std::int64_t every_ns) {
    std::lock_guard<std::mutex> lock(mutex);
    watches.push_back(w);
    // Look four times per period, at most ten times a second.
    tick_ns = std::max<std::int64_t>(100'000'000, std::min(tick_ns, every_ns / 4));
    if (!started) {
      started = true;
      std::thread([this] { run(); }).detach();
    }
  }

  void run() {
    for (;;) {
      std::int64_t tick = 0;
      std::vector<std::string> lines;
      {
        std::lock_guard<std::mutex> lock(mutex);
        tick = tick_ns;
        const std::int64_t now = stall_watch::now_ns();
        auto keep = watches.begin();
        for (auto& w : watches) {
          if (auto alive = w.lock()) {
            std::string line = alive->due(now);
            if (!line.empty()) lines.push_back(std::move(line));
            *keep++ = w;
          }
        }
        watches.erase(keep, watches.end());
      }
      for (const auto& l : lines) log(log_level::warn, l);
      std::this_thread::sleep_for(std::chrono::nanoseconds(tick));
    }
  }
};

inspector& the_inspector() {
  static inspector* i = new inspector();  // never destroyed, see above
  return *i;
}

}  // namespace

std::shared_ptr<stall_watch> stall_watch::make(int rank, std::chrono::duration<double> every) {
  if (every.count() <= 0) return nullptr;
  const auto every_ns = static_cast<std::int64_t>(every.count() * 1e9);
  auto w = std::make_shared<stall_watch>(rank, every_ns);
  the_inspector().add(w, every_ns);
  return w;
}

std::string stall_watch::due(std::int64_t now) noexcept {
  const std::int64_t since = since_.load(std::memory_order_acquire);
  if (since == 0 || now - since < every_ns_) return {};
  if (since == warned_since_ && now - warned_at_ < every_ns_) return {};
  warned_since_ = since;
  warned_at_ = now;
  try {
    const char* what = what_.load(std::memory_order_relaxed);
    char waited[32];
    std::snprintf(waited, sizeof waited, "%.1f", static_cast<double>(now - since) / 1e9);
    return "stall: rank " + std::to_string(rank_) + " has waited " + waited + " s in " +
           (what != nullptr ? what : "a collective") + " (collective #" +
           std::to_string(seq_.load(std::memory_order_relaxed)) +
           " of its communicator) for rank " +
           std::to_string(peer_.load(std::memory_order_relaxed)) +
           ", which has not entered it yet (or waits itself for a rank that has not); "
           "DISTCOMM_STALL_WARNING, the collective fails at DISTCOMM_TIMEOUT";
  } catch (...) {
    return {};
  }
}

}  // namespace distcomm::check
