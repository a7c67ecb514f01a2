// Strategies need nothing but the point-to-point surface of the backend contract: run them over a
// backend that has no native collectives and no table of its own, and check what automatic picks.
#include <doctest/doctest.h>

#include <vector>

#include "distcomm/distcomm.hpp"
#include "p2p_only.hpp"

namespace dc = distcomm;

namespace {

static_assert(!dc::has_native_allreduce_v<p2p_only>, "p2p_only must have no native allreduce");
static_assert(dc::has_native_allreduce_v<dc::local_backend>, "local has a native allreduce");

template <class S>
void check_sum(int p, std::size_t count, const dc::config& c) {
  dc::local_world world(p);
  world.run([&](dc::local_backend b) {
    dc::communicator<p2p_only, S> comm(p2p_only(std::move(b)), c);
    std::vector<float> v(count, static_cast<float>(comm.rank() + 1));
    comm.allreduce(dc::view(v));
    const float expect = static_cast<float>(p * (p + 1) / 2);
    std::size_t wrong = 0;
    for (float x : v) wrong += x != expect;
    REQUIRE(wrong == 0);
    std::vector<float> all(count * static_cast<std::size_t>(p));
    comm.allgather(dc::view(v.data(), count), dc::view(all));
    comm.broadcast(dc::view(v), p - 1);
    comm.barrier();
  });
}

}  // namespace

TEST_CASE("every point-to-point strategy runs on a backend with no native collectives") {
  dc::config c;
  c.timeout = std::chrono::seconds(60);
  c.segment_bytes = 4096;
  for (int p : {1, 2, 3, 6}) {
    for (std::size_t count : {std::size_t{1}, std::size_t{1000}, std::size_t{100000}}) {
      CAPTURE(p);
      CAPTURE(count);
      check_sum<dc::strategy::ring>(p, count, c);
      check_sum<dc::strategy::tree>(p, count, c);
      check_sum<dc::strategy::parameter_server>(p, count, c);
      check_sum<dc::strategy::automatic>(p, count, c);
    }
  }
}

TEST_CASE("automatic: built-in table without a backend table, the backend's own table otherwise") {
  dc::config c;
  dc::strategy::automatic a(c);
  CHECK(a.choose<p2p_only>(0) == dc::algorithm::recursive_doubling);
  CHECK(a.choose<p2p_only>(16383) == dc::algorithm::recursive_doubling);
  CHECK(a.choose<p2p_only>(16384) == dc::algorithm::tree);
  CHECK(a.choose<p2p_only>(65535) == dc::algorithm::tree);
  CHECK(a.choose<p2p_only>(65536) == dc::algorithm::ring);
  CHECK(a.choose<p2p_only>(std::size_t{1} << 40) == dc::algorithm::ring);

  dc::strategy::automatic l(c);
  CHECK(l.choose<dc::local_backend>(1024) == dc::algorithm::tree);
  CHECK(l.choose<dc::local_backend>(128 << 10) == dc::algorithm::native);

  // DISTCOMM_ALGO wins over both.
  c.algo = dc::algo_table::parse("ps:0-1K;ring:1K-max", "DISTCOMM_ALGO");
  dc::strategy::automatic o(c);
  CHECK(o.choose<dc::local_backend>(100) == dc::algorithm::parameter_server);
  CHECK(o.choose<dc::local_backend>(5000) == dc::algorithm::ring);
}

// The refusal comes after the call's agreement began (check/gate.hpp): it is completed, so the
// ranks' next calls pair up.
TEST_CASE("automatic: a table naming native on a backend without one is a clear error") {
  dc::config c;
  c.algo = dc::algo_table::parse("native:0-max", "DISTCOMM_ALGO");
  dc::local_world world(2);
  world.run([&](dc::local_backend b) {
    dc::communicator<p2p_only, dc::strategy::automatic> comm(p2p_only(std::move(b)), c);
    std::vector<float> v(10, 1.0f);
    CHECK_THROWS_WITH_AS(comm.allreduce(dc::view(v)), doctest::Contains("has no native allreduce"),
                         dc::invalid_argument_error);
    std::vector<float> big(40000, static_cast<float>(comm.rank()));
    comm.broadcast(dc::view(big), 1);
    CHECK(big == std::vector<float>(40000, 1.0f));
    CHECK(comm.overlapped_agreements() == 2);
  });
}

// A backend whose native allreduce does not promise rank order, preferring native everywhere.
struct unordered_native : p2p_only {
  using p2p_only::p2p_only;
  static constexpr const char* default_algo = "native:0-max";
  void native_allreduce(const void*, void*, std::size_t, dc::dtype, dc::reduce_op, dc::deadline) {}
};

TEST_CASE("deterministic automatic never picks a native that is not rank-ordered") {
  dc::config c;
  c.deterministic = true;
  dc::strategy::automatic a(c);
  CHECK(a.choose<unordered_native>(100) == dc::algorithm::ring);
  c.deterministic = false;
  dc::strategy::automatic b(c);
  CHECK(b.choose<unordered_native>(100) == dc::algorithm::native);
}

namespace {

// Stands for a backend whose buffers are device memory (as NCCL's): the strategies' host paths
// must never run on it. Its own collectives record that they were used.
class device_like {
 public:
  using request = dc::local_request;
  static constexpr const char* name = "device-like";
  static constexpr bool moves_device_memory = true;
  static constexpr const char* default_algo = "ring:0-max";  // must be ignored
  int rank() const { return 0; }
  int size() const { return 2; }
  [[nodiscard]] request isend(const void*, std::size_t, int, dc::tag_t) {
    FAIL("a host point-to-point path ran on device memory");
    return {};
  }
  [[nodiscard]] request irecv(void*, std::size_t, int, dc::tag_t) {
    FAIL("a host point-to-point path ran on device memory");
    return {};
  }
  void abort(const std::string&) noexcept {}
  void native_allreduce(const void*, void*, std::size_t, dc::dtype, dc::reduce_op, dc::deadline) {
    ++native_calls;
  }
  void native_reduce_scatter(const void*, void*, std::size_t, dc::dtype, dc::reduce_op,
                             dc::deadline) {
    ++native_calls;
  }
  int native_calls = 0;
};

}  // namespace

TEST_CASE("a device-memory backend: only its own collectives, never deterministic mode") {
  dc::config c;
  dc::strategy::automatic a(c);
  for (std::size_t bytes : {std::size_t{0}, std::size_t{4096}, std::size_t{1} << 30})
    CHECK(a.choose<device_like>(bytes) == dc::algorithm::native);

  device_like b;
  float x[4] = {};
  const auto until = dc::deadline_after(std::chrono::seconds(5));
  dc::strategy::native n(c);
  n.allreduce(b, x, x, 4, dc::dtype::f32, dc::reduce_op::sum, until);
  n.reduce_scatter(b, x, x, 2, dc::dtype::f32, dc::reduce_op::sum, until);
  CHECK(b.native_calls == 2);

  dc::config det = c;
  det.deterministic = true;
  dc::strategy::automatic ad(det);
  CHECK_THROWS_WITH_AS(ad.choose<device_like>(4096),
                       doctest::Contains("DISTCOMM_DETERMINISTIC=1 is not available"),
                       dc::invalid_argument_error);
  dc::strategy::native nd(det);
  CHECK_THROWS_WITH_AS(nd.reduce_scatter(b, x, x, 2, dc::dtype::f32, dc::reduce_op::sum, until),
                       doctest::Contains("DISTCOMM_DETERMINISTIC=1 is not available"),
                       dc::invalid_argument_error);
  CHECK(b.native_calls == 2);
}

TEST_CASE("communicator on a device-memory backend: device tensors only, no host fusion") {
  float host[4] = {};
  const dc::tensor_view dev = dc::cuda_view(host, 4, dc::dtype::f32, 0);  // never dereferenced
  dc::config c;
  dc::communicator<device_like, dc::strategy::automatic, dc::fusion::none> comm(device_like{}, c);
  comm.allreduce(dev);
  CHECK(comm.backend().native_calls == 1);
  CHECK_THROWS_WITH_AS(comm.allreduce(dc::view(host, 4)),
                       doctest::Contains("moves cuda memory only"), dc::invalid_argument_error);

  dc::communicator<device_like, dc::strategy::native> fused(device_like{}, c);
  const dc::tensor_view group[] = {dev, dev};
  CHECK_THROWS_WITH_AS(fused.allreduce(dc::span<const dc::tensor_view>(group, 2)),
                       doctest::Contains("fusion::buffer cannot pack"), dc::invalid_argument_error);
  CHECK(fused.backend().native_calls == 0);
}
