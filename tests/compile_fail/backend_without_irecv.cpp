// Must NOT compile: a backend that lacks a member of the contract (here irecv) is named by the
// communicator's check in plain words (tests/CMakeLists.txt expects the static_assert's message).
#include <string>

#include "distcomm/distcomm.hpp"

struct send_only {
  using request = distcomm::local_request;
  static constexpr const char* name = "send-only";
  int rank() const { return 0; }
  int size() const { return 1; }
  request isend(const void*, std::size_t, int, distcomm::tag_t) { return {}; }
  void abort(const std::string&) noexcept {}
};

int main() {
  distcomm::communicator<send_only, distcomm::strategy::ring> comm(send_only{});
  comm.barrier();
}
