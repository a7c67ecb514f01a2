// file_store: one file per key in a shared directory.
//
// Writers build the value in a temporary file in the same directory, fsync it and rename() it over
// the key's file, so a reader sees the old value or the new one, never half of one. Every write
// holds the directory's lock file (flock) for the read-modify-write of add and compare_set to be
// atomic across processes; Linux NFS emulates flock with fcntl locks, which are per process, so a
// process-wide gate also keeps the threads of one process apart.
#include "distcomm/rendezvous/file_store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>

#include <openssl/rand.h>
#include <openssl/sha.h>

#include "distcomm/core/error.hpp"
#include "store_detail.hpp"

namespace distcomm {
namespace {

using namespace std::chrono_literals;
using detail::store_clock;

// Polling period of waits: starts fast for the common case (the key arrives within
// milliseconds), backs off so hundreds of waiting ranks do not hammer a network file system.
constexpr std::chrono::milliseconds min_backoff{1};
constexpr std::chrono::milliseconds max_backoff{50};
// File names stay well below NAME_MAX (255) with room for the 'k' tag.
constexpr std::size_t max_encoded_name = 200;

std::string errno_text(int e) { return std::system_category().message(e); }

[[noreturn]] void throw_io(const std::string& what, const std::string& path, int e) {
  throw error("file_store: cannot " + what + " " + path + ": " + errno_text(e));
}

std::string base64url(const std::string& in) {
  static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(in[i]) << 16) |
                       (static_cast<unsigned char>(in[i + 1]) << 8) |
                       static_cast<unsigned char>(in[i + 2]);
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += alphabet[(v >> 6) & 63];
    out += alphabet[v & 63];
  }
  if (i + 1 == in.size()) {
    const unsigned v = static_cast<unsigned char>(in[i]) << 16;
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
  } else if (i + 2 == in.size()) {
    const unsigned v =
        (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8);
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += alphabet[(v >> 6) & 63];
  }
  return out;
}

std::string sha256_hex(const std::string& in) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(in.data()), in.size(), digest);
  static const char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : digest) {
    out += hex[c >> 4];
    out += hex[c & 15];
  }
  return out;
}

class fd_guard {
 public:
  explicit fd_guard(int fd) noexcept : fd_(fd) {}
  ~fd_guard() {
    if (fd_ >= 0) ::close(fd_);
  }
  fd_guard(const fd_guard&) = delete;
  fd_guard& operator=(const fd_guard&) = delete;
  int get() const noexcept { return fd_; }
  int release() noexcept { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// Sleeps for the current backoff (never past the deadline) and doubles it; false once the
// deadline has passed.
bool backoff_until(store_clock::time_point deadline, std::chrono::milliseconds& backoff) {
  const auto now = store_clock::now();
  if (now >= deadline) return false;
  std::this_thread::sleep_for(std::min<store_clock::duration>(backoff, deadline - now));
  backoff = std::min(backoff * 2, max_backoff);
  return true;
}

// The threads of this process take turns at the lock file through this gate. It blocks on a
// condition variable (fair enough that a busy thread cannot starve the others, unlike polling)
// with the caller's deadline. std::timed_mutex would do, but ThreadSanitizer does not see the
// pthread_mutex_clocklock it uses and reports false races.
struct process_gate {
  std::mutex mutex;
  std::condition_variable free;
  bool held = false;
};

process_gate& gate() {
  static process_gate g;
  return g;
}

// The directory's write lock: the process gate, then flock on `<dir>/.lock`, both taken before
// the deadline or timeout_error.
class directory_lock {
 public:
  directory_lock(const std::string& dir, store_clock::time_point deadline,
                 std::chrono::duration<double> timeout)
      : path_(dir + "/.lock") {
    {
      std::unique_lock<std::mutex> lock(gate().mutex);
      if (!gate().free.wait_until(lock, deadline, [] { return !gate().held; })) {
        timeout_on(timeout);
      }
      gate().held = true;
    }
    try {
      fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
      if (fd_ < 0) throw_io("open the lock file", path_, errno);
      auto backoff = min_backoff;
      while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK && errno != EINTR) throw_io("lock", path_, errno);
        if (!backoff_until(deadline, backoff)) timeout_on(timeout);
      }
    } catch (...) {
      release();
      throw;
    }
  }
  ~directory_lock() { release(); }
  directory_lock(const directory_lock&) = delete;
  directory_lock& operator=(const directory_lock&) = delete;

 private:
  void release() noexcept {
    if (fd_ >= 0) ::close(fd_);  // closing the descriptor releases the flock
    fd_ = -1;
    {
      std::lock_guard<std::mutex> lock(gate().mutex);
      gate().held = false;
    }
    gate().free.notify_one();
  }

  [[noreturn]] void timeout_on(std::chrono::duration<double> timeout) const {
    throw timeout_error("file_store: could not lock " + path_ + " within " +
                        detail::format_seconds(timeout) +
                        ": another process holds it (DISTCOMM_TIMEOUT)");
  }

  std::string path_;
  int fd_ = -1;
};

// The value in path, or nullopt when the file does not exist.
std::optional<bytes> read_value(const std::string& path) {
  fd_guard fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw_io("open", path, errno);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw_io("stat", path, errno);
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size > store_max_value_bytes) {
    throw error("file_store: " + path + " holds " + std::to_string(size) +
                " bytes, more than any value a store may hold; was it written by DistComm?");
  }
  bytes value(size);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd.get(), value.data() + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_io("read", path, errno);
    if (n == 0) break;  // replaced files are never truncated in place; be safe anyway
    done += static_cast<std::size_t>(n);
  }
  value.resize(done);
  return value;
}

// Writes value to path atomically: temporary file in the same directory, fsync, rename.
void write_value(const std::string& dir, const std::string& path, const bytes& value) {
  // Unique across processes and hosts sharing the directory: pid, a counter and random bits.
  static std::atomic<unsigned long> counter{0};
  unsigned char random[8] = {};
  RAND_bytes(random, sizeof random);
  unsigned long long r = 0;
  for (unsigned char c : random) r = (r << 8) | c;
  const std::string tmp = dir + "/.tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(counter.fetch_add(1)) + "." + std::to_string(r);
  fd_guard fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (fd.get() < 0) throw_io("create", tmp, errno);
  const auto fail = [&](const char* what) {
    const int e = errno;
    ::close(fd.release());
    ::unlink(tmp.c_str());
    throw_io(what, tmp, e);
  };
  std::size_t done = 0;
  while (done < value.size()) {
    const ssize_t n = ::write(fd.get(), value.data() + done, value.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("write");
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd.get()) != 0) fail("fsync");
  if (::close(fd.release()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw_io("close", tmp, e);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw_io("rename a temporary file onto", path, e);
  }
}

void make_directories(const std::string& dir) {
  if (dir.empty()) throw rendezvous_error("file_store: the directory name is empty");
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    const std::string part = dir.substr(0, pos);
    if (part.empty() || part == "/") continue;
    if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
      throw rendezvous_error("file_store: cannot create the directory " + part + ": " +
                             errno_text(errno));
    }
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw rendezvous_error("file_store: " + dir + " is not a directory");
  }
}

}  // namespace

file_store::file_store(std::string directory, std::chrono::duration<double> timeout)
    : directory_(std::move(directory)) {
  while (directory_.size() > 1 && directory_.back() == '/') directory_.pop_back();
  make_directories(directory_);
  set_timeout(timeout);
}

std::string file_store::path_of(const std::string& key) const {
  std::string name = base64url(key);
  name = name.size() <= max_encoded_name ? "k" + name : "h" + sha256_hex(key);
  return directory_ + "/" + name;
}

void file_store::set(const std::string& key, const bytes& value) {
  detail::check_key("file_store set", key);
  detail::check_value("file_store set", key, value.size());
  const auto t = timeout();
  directory_lock lock(directory_, detail::deadline_after(t), t);
  write_value(directory_, path_of(key), value);
}

bytes file_store::get(const std::string& key) {
  detail::check_key("file_store get", key);
  const auto t = timeout();
  const auto deadline = detail::deadline_after(t);
  const std::string path = path_of(key);
  auto backoff = min_backoff;
  do {
    if (auto v = read_value(path)) return std::move(*v);
  } while (backoff_until(deadline, backoff));
  detail::throw_missing_keys("file_store get", {key}, t);
}

std::int64_t file_store::add(const std::string& key, std::int64_t delta) {
  detail::check_key("file_store add", key);
  const auto t = timeout();
  directory_lock lock(directory_, detail::deadline_after(t), t);
  const std::string path = path_of(key);
  const auto current = read_value(path);
  const auto result =
      detail::add_to_counter("file_store", key, current ? &*current : nullptr, delta);
  write_value(directory_, path, detail::encode_counter(result));
  return result;
}

bool file_store::check(const std::vector<std::string>& keys) {
  for (const auto& k : keys) detail::check_key("file_store check", k);
  for (const auto& k : keys) {
    const std::string path = path_of(k);
    if (::access(path.c_str(), F_OK) != 0) {
      if (errno == ENOENT) return false;
      throw_io("look up", path, errno);
    }
  }
  return true;
}

void file_store::wait(const std::vector<std::string>& keys) {
  for (const auto& k : keys) detail::check_key("file_store wait", k);
  const auto t = timeout();
  const auto deadline = detail::deadline_after(t);
  std::vector<std::string> missing = keys;
  auto backoff = min_backoff;
  do {
    // Keys never disappear, so only the ones still missing need another look.
    missing.erase(std::remove_if(missing.begin(), missing.end(),
                                 [&](const std::string& k) { return check({k}); }),
                  missing.end());
    if (missing.empty()) return;
  } while (backoff_until(deadline, backoff));
  detail::throw_missing_keys("file_store wait", missing, t);
}

bytes file_store::compare_set(const std::string& key, const bytes& expected, const bytes& desired) {
  detail::check_key("file_store compare_set", key);
  detail::check_value("file_store compare_set", key, desired.size());
  const auto t = timeout();
  directory_lock lock(directory_, detail::deadline_after(t), t);
  const std::string path = path_of(key);
  auto current = read_value(path);
  if (detail::compare_set_applies(current ? &*current : nullptr, expected)) {
    write_value(directory_, path, desired);
    return desired;
  }
  return current ? std::move(*current) : bytes{};
}

}  // namespace distcomm
