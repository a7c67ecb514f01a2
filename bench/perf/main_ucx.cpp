// distcomm-bench-ucx: the sweep on the UCX backend, bootstrapped through DistComm's store.
//   distcomm-run -np 2 distcomm-bench-ucx -b 8 -e 64M -f 2 --strategy ring
#include "distcomm/backends/ucx.hpp"
#include "driver.hpp"

int main(int argc, char** argv) {
  namespace dc = distcomm;
  return distcomm::bench::store_backend_main<dc::ucx_backend>(
      "distcomm-bench-ucx", argc, argv,
      [](const dc::job& j, const dc::config& cfg) { return dc::ucx_backend(j, cfg.timeout); });
}
