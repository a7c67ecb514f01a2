// Files written where a setting points: see include/distcomm/core/files.hpp.
#include "distcomm/core/files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace distcomm {

std::string write_file_atomically(const std::string& path, const std::string& bytes) {
  std::string tmp = path + ".XXXXXX";
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) return std::string("cannot create a file beside it: ") + std::strerror(errno);
  int failed = 0;  // the first errno
  for (std::size_t written = 0; written < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      failed = n < 0 ? errno : EIO;
      break;
    }
    written += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0 && failed == 0) failed = errno;
  if (failed != 0) {
    ::unlink(tmp.c_str());
    return "cannot write " + tmp + ": " + std::strerror(failed);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return "cannot rename " + tmp + " to it: " + std::strerror(e);
  }
  return {};
}

int open_for_writing(const std::string& path) noexcept {
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
}

}  // namespace distcomm
