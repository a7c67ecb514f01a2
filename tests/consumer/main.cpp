// A program built against an installed DistComm (see CMakeLists.txt and run.sh): three ranks of a
// local world each allreduce rank+1; every element must come back as 1 + 2 + 3 = 6.
#include <distcomm/distcomm.hpp>

#include <atomic>
#include <cstdio>
#include <exception>
#include <utility>
#include <vector>

int main() {
  constexpr int world_size = 3;
  constexpr float expected = 6.0f;
  std::atomic<int> wrong_ranks{0};
  try {
    distcomm::local_world world(world_size);
    world.run([&](distcomm::local_backend backend) {
      distcomm::communicator<distcomm::local_backend> comm(std::move(backend));
      std::vector<float> v(1000, float(comm.rank() + 1));
      comm.allreduce(distcomm::view(v), distcomm::reduce_op::sum);
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (v[i] != expected) {
          std::fprintf(stderr, "rank %d: v[%zu] = %g, expected %g\n", comm.rank(), i,
                       double(v[i]), double(expected));
          ++wrong_ranks;
          return;
        }
      }
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
  if (wrong_ranks != 0) return 1;
  std::printf("consumer: %d ranks allreduced rank+1, every element is %g: ok\n", world_size,
              double(expected));
  return 0;
}
