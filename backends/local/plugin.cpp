// The local backend as a plugin (libdistcomm_backend_local.so). Its ranks are threads of one
// process: each thread loads the plugin and makes its backends in the same order, and the n-th
// backend a rank makes joins the n-th world of that size (and DISTCOMM_PLUGIN_OPTIONS text) made in
// this process. init waits until every rank of the world joined; ranks in other processes never
// can, so a world of more than one process fails at init, after the timeout, saying so.
#include <condition_variable>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "distcomm/backends/local.hpp"
#include "distcomm/plugin/export.hpp"

namespace {

struct joining_world {
  distcomm::local_world world;
  int joined = 0;
  explicit joining_world(int size) : world(size) {}
};

struct registry {
  std::mutex m;
  std::condition_variable cv;
  // (options, size, n) -> the n-th world of that size; removed once every rank joined.
  std::map<std::tuple<std::string, int, int>, std::shared_ptr<joining_world>> worlds;
  // (options, size, rank) -> how many backends that rank made so far.
  std::map<std::tuple<std::string, int, int>, int> made;
};

registry& the_registry() {
  static registry r;
  return r;
}

distcomm::local_backend join(const distcomm::plugin::host& h) {
  const int size = h.size < 1 ? 1 : h.size;
  const int rank = h.rank < 0 ? 0 : h.rank;
  if (rank >= size) {
    throw distcomm::invalid_argument_error("local: rank " + std::to_string(rank) +
                                           " is not within a world of size " +
                                           std::to_string(size));
  }
  registry& r = the_registry();
  std::unique_lock<std::mutex> lock(r.m);
  const int n = r.made[{h.options, size, rank}]++;
  const auto key = std::make_tuple(h.options, size, n);
  auto& slot = r.worlds[key];
  if (!slot) slot = std::make_shared<joining_world>(size);
  const std::shared_ptr<joining_world> w = slot;
  if (++w->joined == size) {
    r.worlds.erase(key);
    r.cv.notify_all();
  }
  const auto until = distcomm::deadline_after(h.timeout);
  if (!r.cv.wait_until(lock, until, [&] { return w->joined == size; })) {
    const int joined = w->joined--;
    char waited[32];
    std::snprintf(waited, sizeof waited, "%g", h.timeout.count());
    throw distcomm::timeout_error(
        "local: rank " + std::to_string(rank) + " waited " + waited +
        " s for the other ranks of its world of " + std::to_string(size) + ", but only " +
        std::to_string(joined) +
        " of them made a backend in this process. The local backend's "
        "ranks are threads of one process (each loads the plugin); for ranks that are processes "
        "choose a network backend (DISTCOMM_BACKEND=gloo, ucx or mpi)");
  }
  return w->world.backend(rank);
}

}  // namespace

DISTCOMM_EXPORT_BACKEND_V1(distcomm::local_backend, &join)
