#include "floor.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>
#include <string>

#include "distcomm/core/error.hpp"

namespace distcomm::bench {
namespace {

constexpr std::size_t page = 4096;

std::string name_of(std::uint64_t key) {
  return "/distcomm-bench-floor." + std::to_string(::geteuid()) + "." + std::to_string(key);
}

[[noreturn]] void fail(const std::string& what) {
  throw error("--floor: " + what + ": " + std::strerror(errno));
}

}  // namespace

std::uint64_t cache_line_floor::create() {
  static std::atomic<std::uint32_t> made{0};
  const std::uint64_t key = (static_cast<std::uint64_t>(::getpid()) << 16) | made++;
  const std::string name = name_of(key);
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) fail("cannot create " + name);
  if (::ftruncate(fd, page) != 0) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    fail("cannot size " + name);
  }
  ::close(fd);
  return key;
}

cache_line_floor::cache_line_floor(std::uint64_t key, int rank,
                                   std::chrono::duration<double> timeout)
    : name_(name_of(key)), rank_(rank), timeout_(timeout) {
  const int fd = ::shm_open(name_.c_str(), O_RDWR | O_NOFOLLOW, 0);
  if (fd < 0) fail("cannot open " + name_ + " (made by rank 0)");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
      (st.st_mode & 077) != 0 || static_cast<std::size_t>(st.st_size) != page) {
    ::close(fd);
    errno = EPERM;
    fail(name_ + " is not the page rank 0 made (owner, mode or size differ)");
  }
  void* p = ::mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) fail("cannot map " + name_);
  line_ = new (p) std::atomic<std::uint64_t>;  // zero-filled: the first ping is 1
}

cache_line_floor::~cache_line_floor() {
  if (line_ != nullptr) ::munmap(static_cast<void*>(line_), page);
}

void cache_line_floor::unlink() noexcept {
  if (rank_ == 0) ::shm_unlink(name_.c_str());
}

void cache_line_floor::round_trip() {
  const std::uint64_t ping = 2 * ++turn_ - 1;
  if (rank_ == 0) {
    const auto t0 = std::chrono::steady_clock::now();
    line_->store(ping, std::memory_order_release);
    wait_for(ping + 1);
    spent_ += std::chrono::steady_clock::now() - t0;
    ++timed_;
  } else {
    wait_for(ping);
    line_->store(ping + 1, std::memory_order_release);
  }
}

double cache_line_floor::take_mean_us() noexcept {
  const double us = timed_ == 0 ? 0.0
                                : std::chrono::duration<double, std::micro>(spent_).count() /
                                      static_cast<double>(timed_);
  spent_ = {};
  timed_ = 0;
  return us;
}

// Spins on the line (what a collective's flag wait does), looking at the clock now and then.
void cache_line_floor::wait_for(std::uint64_t value) {
  if (line_->load(std::memory_order_acquire) >= value) return;
  const auto until = std::chrono::steady_clock::now() + timeout_;
  for (unsigned spins = 1;; ++spins) {
    if (line_->load(std::memory_order_acquire) >= value) return;
    if (spins % 4096 == 0 && std::chrono::steady_clock::now() > until) {
      throw timeout_error("--floor: rank " + std::to_string(rank_) + " waited " +
                          std::to_string(timeout_.count()) + " s for rank " +
                          std::to_string(1 - rank_) + "'s turn of the ping-pong");
    }
  }
}

}  // namespace distcomm::bench
