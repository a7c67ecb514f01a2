#include "segment.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <new>
#include <string>

#include "distcomm/backends/shm.hpp"
#include "distcomm/core/error.hpp"

namespace distcomm::detail::shm {

namespace {

std::string errno_text(int e) { return std::string(std::strerror(e)); }

std::size_t round_up(std::size_t n) { return (n + line - 1) / line * line; }

// A file descriptor closed on scope exit.
struct fd_guard {
  int fd;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

unsigned char* map(int fd, std::size_t bytes, const std::string& name) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    throw backend_error(
        shm_backend::name, "mmap", errno,
        "mapping " + name + " (" + std::to_string(bytes) + " bytes): " + errno_text(errno));
  }
  return static_cast<unsigned char*>(p);
}

constexpr const char* name_prefix = "distcomm-shm.";

}  // namespace

segment& segment::operator=(segment&& o) noexcept {
  if (this != &o) {
    if (base_ != nullptr) ::munmap(base_, bytes_);
    base_ = o.base_;
    bytes_ = o.bytes_;
    ranks_ = o.ranks_;
    ring_bytes_ = o.ring_bytes_;
    chunk_bytes_ = o.chunk_bytes_;
    o.base_ = nullptr;
  }
  return *this;
}

segment::~segment() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
}

std::size_t segment::bytes_for(int ranks, std::size_t ring_bytes, std::size_t chunk_bytes) {
  return round_up(sizeof(header)) +
         static_cast<std::size_t>(ranks) * (round_up(sizeof(ring_header)) + ring_bytes) +
         2 * chunk_bytes;
}

ring_header& segment::ring(int dest) const {
  unsigned char* p = base_ + round_up(sizeof(header)) +
                     static_cast<std::size_t>(dest) * (round_up(sizeof(ring_header)) + ring_bytes_);
  return *reinterpret_cast<ring_header*>(p);
}

unsigned char* segment::ring_data(int dest) const {
  return reinterpret_cast<unsigned char*>(&ring(dest)) + round_up(sizeof(ring_header));
}

unsigned char* segment::area(int half) const {
  return base_ + bytes_ - 2 * chunk_bytes_ + static_cast<std::size_t>(half) * chunk_bytes_;
}

segment segment::create(const std::string& name, int ranks, std::size_t ring_bytes,
                        std::size_t chunk_bytes) {
  const std::size_t bytes = bytes_for(ranks, ring_bytes, chunk_bytes);
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    throw backend_error(shm_backend::name, "shm_open", errno,
                        "creating " + name + ": " + errno_text(errno));
  }
  const fd_guard guard{fd};
  // posix_fallocate reserves the pages: a /dev/shm too small fails here, where ftruncate alone
  // would leave a hole whose first touch kills the process with SIGBUS.
  if (const int e = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)); e != 0) {
    unlink(name);
    throw backend_error(
        shm_backend::name, "posix_fallocate", e,
        "reserving " + std::to_string(bytes >> 20) + " MiB for " + name +
            " in /dev/shm: " + errno_text(e) +
            " (make /dev/shm larger, e.g. docker --shm-size, or DISTCOMM_SHM_RING and "
            "DISTCOMM_SHM_CHUNK smaller)");
  }
  segment s;
  try {
    s.base_ = map(fd, bytes, name);
  } catch (...) {
    unlink(name);
    throw;
  }
  s.bytes_ = bytes;
  s.ranks_ = ranks;
  s.ring_bytes_ = ring_bytes;
  s.chunk_bytes_ = chunk_bytes;
  header* h = new (s.base_) header{};
  h->magic = segment_magic;
  h->version = layout_version;
  h->pid = static_cast<std::int32_t>(::getpid());
  h->ranks = ranks;
  h->ring_bytes = ring_bytes;
  h->chunk_bytes = chunk_bytes;
  for (int d = 0; d < ranks; ++d) new (&s.ring(d)) ring_header{};
  return s;
}

segment segment::open(const std::string& name, int ranks, std::size_t ring_bytes,
                      std::size_t chunk_bytes) {
  const std::size_t bytes = bytes_for(ranks, ring_bytes, chunk_bytes);
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    throw invalid_argument_error(
        "shm: cannot open " + name + " (" + errno_text(errno) +
        "): the rank that made it does not share this host's /dev/shm; the shm backend connects "
        "the ranks of one host (name gloo or ucx for a job across hosts)");
  }
  const fd_guard guard{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    throw backend_error(shm_backend::name, "fstat", errno,
                        "inspecting " + name + ": " + errno_text(errno));
  }
  // A segment this job's rank made is this user's, mode 0600. Anything else was made by someone
  // else under the name the store gave (under torch.distributed, a store without authentication),
  // who could then read or write this rank's messages.
  if (st.st_uid != ::geteuid() || (st.st_mode & 07777) != 0600) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw invalid_argument_error(
        "shm: " + name + " belongs to uid " + std::to_string(st.st_uid) + " with mode " + mode +
        ", where a peer rank of this job makes it as uid " + std::to_string(::geteuid()) +
        " with mode 0600: refusing it (another local user may have made it, or put its name in "
        "the job's store)");
  }
  if (static_cast<std::size_t>(st.st_size) != bytes) {
    throw invalid_argument_error("shm: " + name + " has " + std::to_string(st.st_size) +
                                 " bytes where " + std::to_string(bytes) +
                                 " were expected: the ranks run different DistComm versions or "
                                 "DISTCOMM_SHM_RING / DISTCOMM_SHM_CHUNK settings");
  }
  segment s;
  s.base_ = map(fd, bytes, name);
  s.bytes_ = bytes;
  s.ranks_ = ranks;
  s.ring_bytes_ = ring_bytes;
  s.chunk_bytes_ = chunk_bytes;
  const header& h = s.head();
  if (h.magic != segment_magic || h.version != layout_version || h.ranks != ranks ||
      h.ring_bytes != ring_bytes || h.chunk_bytes != chunk_bytes) {
    throw invalid_argument_error("shm: " + name +
                                 " has another layout than this rank's (DistComm version or "
                                 "DISTCOMM_SHM_RING / DISTCOMM_SHM_CHUNK differ across ranks)");
  }
  return s;
}

namespace {
// "<uid>.<pid namespace>.": the part of a name shared by every segment of this user's processes
// in this PID namespace, the ones whose pids sweep_stale() can check. (Containers that share
// /dev/shm, and so a uid, but not a PID namespace leave each other's segments alone.)
std::string own_prefix() {
  const std::string ns = pid_namespace();  // "pid:[4026531836]"
  std::string id;
  for (char c : ns) {
    if (c >= '0' && c <= '9') id += c;
  }
  return std::string(name_prefix) + std::to_string(::geteuid()) + "." + id + ".";
}
}  // namespace

std::string fresh_name() {
  static std::atomic<unsigned> next{0};
  // 128 random bits: nobody can make the name before this process does (O_EXCL would then fail
  // the job), nor find it but through the job's store.
  unsigned char bits[16];
  std::size_t got = 0;
  while (got < sizeof bits) {
    const ssize_t n = ::getrandom(bits + got, sizeof bits - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw backend_error(shm_backend::name, "getrandom", errno,
                          "drawing a segment name: " + errno_text(errno));
    }
    got += static_cast<std::size_t>(n);
  }
  static constexpr char hex[] = "0123456789abcdef";
  std::string random;
  for (unsigned char b : bits) {
    random += hex[b >> 4];
    random += hex[b & 15];
  }
  return "/" + own_prefix() + std::to_string(::getpid()) + "." + std::to_string(next.fetch_add(1)) +
         "." + random;
}

void unlink(const std::string& name) noexcept { ::shm_unlink(name.c_str()); }

void sweep_stale() {
  static std::once_flag once;
  std::call_once(once, [] {
    DIR* dir = ::opendir("/dev/shm");
    if (dir == nullptr) return;
    const std::string mine = own_prefix();
    while (const dirent* e = ::readdir(dir)) {
      const std::string n = e->d_name;
      if (n.compare(0, mine.size(), mine) != 0) continue;
      const std::string rest = n.substr(mine.size());
      const std::size_t dot = rest.find('.');
      if (dot == std::string::npos) continue;
      char* end = nullptr;
      const long pid = std::strtol(rest.c_str(), &end, 10);
      if (end != rest.c_str() + dot || pid <= 0) continue;
      if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) unlink("/" + n);
    }
    ::closedir(dir);
  });
}

std::string host_identity() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::string boot;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, boot);
  return std::string(host) + " (boot " + boot + ")";
}

std::string pid_namespace() {
  char buf[128] = {};
  const ssize_t n = ::readlink("/proc/self/ns/pid", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string("unknown");
}

void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                std::chrono::nanoseconds for_at_most) {
  if (for_at_most.count() <= 0) return;
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(for_at_most.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(for_at_most.count() % 1000000000);
  // Not FUTEX_PRIVATE_FLAG: the word lives in memory other processes map.
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, expected, &ts, nullptr,
            0);
}

void futex_wake_all(std::atomic<std::uint32_t>& word) {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr,
            nullptr, 0);
}

process_watch::process_watch(pid_t pid) : pid_(pid) {
#ifdef SYS_pidfd_open
  fd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#endif
}

process_watch& process_watch::operator=(process_watch&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    pid_ = o.pid_;
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

process_watch::~process_watch() {
  if (fd_ >= 0) ::close(fd_);
}

bool process_watch::exited() const {
  if (pid_ <= 0) return false;
  if (fd_ >= 0) {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0;
  }
  return ::kill(pid_, 0) != 0 && errno == ESRCH;
}

}  // namespace distcomm::detail::shm
