// The local backend reduced to the minimal backend contract (backend.hpp): no native collectives,
// no table of its own. What strategies and registries are tested against when a backend must lack
// everything optional.
#pragma once

#include <string>
#include <utility>

#include "distcomm/backends/local.hpp"

class p2p_only {
 public:
  using request = distcomm::local_request;
  static constexpr const char* name = "p2p-only";
  explicit p2p_only(distcomm::local_backend b) : b_(std::move(b)) {}
  int rank() const { return b_.rank(); }
  int size() const { return b_.size(); }
  [[nodiscard]] request isend(const void* d, std::size_t n, int peer, distcomm::tag_t tag) {
    return b_.isend(d, n, peer, tag);
  }
  [[nodiscard]] request irecv(void* d, std::size_t n, int peer, distcomm::tag_t tag) {
    return b_.irecv(d, n, peer, tag);
  }
  void abort(const std::string& reason) noexcept { b_.abort(reason); }

 private:
  distcomm::local_backend b_;
};
