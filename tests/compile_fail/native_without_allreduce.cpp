// Must NOT compile: strategy::native on a backend without a native allreduce is a compile error
// (tests/CMakeLists.txt builds this and expects the static_assert's message).
#include <string>

#include "distcomm/distcomm.hpp"

struct p2p_only {
  using request = distcomm::local_request;
  static constexpr const char* name = "p2p-only";
  int rank() const { return 0; }
  int size() const { return 1; }
  request isend(const void*, std::size_t, int, distcomm::tag_t) { return {}; }
  request irecv(void*, std::size_t, int, distcomm::tag_t) { return {}; }
  void abort(const std::string&) noexcept {}
};

int main() {
  distcomm::communicator<p2p_only, distcomm::strategy::native> comm(p2p_only{});
  float x = 1.0f;
  comm.allreduce(distcomm::view(&x, 1));
}
