// distcomm-bench-shm: the sweep on the shm backend (processes of one host), met through the
// job's store.
//   distcomm-run -np 2 distcomm-bench-shm -b 8 -e 64M -f 2 --peer gloo
#include "distcomm/backends/shm.hpp"
#include "driver.hpp"

int main(int argc, char** argv) {
  namespace dc = distcomm;
  return distcomm::bench::store_backend_main<dc::shm_backend>(
      "distcomm-bench-shm", argc, argv, [](const dc::job& j, const dc::config& cfg) {
        dc::shm_options so;
        so.timeout = cfg.timeout;
        return dc::shm_backend(j, so);
      });
}
