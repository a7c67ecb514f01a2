// distcomm-bench-gloo: the sweep on the gloo backend, bootstrapped through DistComm's store.
//   distcomm-run -np 2 distcomm-bench-gloo -b 8 -e 64M -f 2 --peer gloo
#include "distcomm/backends/gloo.hpp"
#include "driver.hpp"

int main(int argc, char** argv) {
  namespace dc = distcomm;
  return distcomm::bench::store_backend_main<dc::gloo_backend>(
      "distcomm-bench-gloo", argc, argv, [](const dc::job& j, const dc::config& cfg) {
        dc::gloo_options go;
        go.timeout = cfg.timeout;
        return dc::gloo_backend(j, go);
      });
}
