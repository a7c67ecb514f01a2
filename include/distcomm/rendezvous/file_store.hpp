// file_store: the key-value store in a directory every rank can see (NFS, Lustre, a local tmp
// directory for one node). One file per key, written atomically (temporary file, fsync, rename);
// add and compare_set hold a lock file (flock) so they are atomic across processes; waits poll
// with backoff (1 ms up to 50 ms) until the deadline. There is no authentication: who may use
// the store is decided by the directory's permissions (created 0700 when missing).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "distcomm/rendezvous/store.hpp"

namespace distcomm {

class file_store final : public store {
 public:
  // Creates the directory (and its parents) when missing; rendezvous_error when it cannot.
  explicit file_store(std::string directory,
                      std::chrono::duration<double> timeout = std::chrono::duration<double>(300.0));

  void set(const std::string& key, const bytes& value) override;
  bytes get(const std::string& key) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys) override;
  bytes compare_set(const std::string& key, const bytes& expected, const bytes& desired) override;

  const std::string& directory() const noexcept { return directory_; }
  // The file that holds key: `k` + base64url(key), or `h` + hex SHA-256(key) for keys whose
  // encoding would not fit a file name. Temporary files and the lock file start with '.'.
  std::string path_of(const std::string& key) const;

 private:
  std::string directory_;
};

}  // namespace distcomm
