// Links DistComm::DistComm and runs one allreduce: two ranks of a local world (threads) each
// contribute rank+1, so every element must come back as 3.
#include <distcomm/distcomm.hpp>

#include <atomic>
#include <cstdio>
#include <exception>
#include <utility>
#include <vector>

int main() {
  std::atomic<int> wrong{0};
  try {
    distcomm::local_world world(2);
    world.run([&](distcomm::local_backend backend) {
      distcomm::communicator<distcomm::local_backend> comm(std::move(backend));
      std::vector<float> v(64, float(comm.rank() + 1));
      comm.allreduce(distcomm::view(v), distcomm::reduce_op::sum);
      for (float x : v) {
        if (x != 3.0f) ++wrong;
      }
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "test_package: %s\n", e.what());
    return 1;
  }
  if (wrong != 0) {
    std::fprintf(stderr, "test_package: %d elements differ from 3\n", wrong.load());
    return 1;
  }
  std::printf("test_package: DistComm allreduce over 2 local ranks: ok\n");
  return 0;
}
