// The CUDA side of the NCCL backend, on one GPU: the reduction kernels and the batched pack/unpack
// against the host kernels (every dtype and op, odd sizes, pointers one element off alignment),
// device Tensor Fusion (alone and as the communicator's cuda::fusion policy), NCCL's collectives
// and send/recv on a one-rank communicator, the memory operations of the point-to-point
// strategies, ring, tree and parameter_server over NCCL, and the engine's device path (NCCL for
// the tensors, a host communicator for the agreement).
// Without a CUDA device the program prints why and exits 77, which ctest reports as skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "distcomm/backends/local.hpp"
#include "distcomm/backends/nccl.hpp"
#include "distcomm/communicator.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/core/reduce.hpp"
#include "distcomm/cuda/fusion.hpp"
#include "distcomm/cuda/kernels.hpp"
#include "distcomm/engine/engine.hpp"
#include "distcomm/fusion/none.hpp"
#include "distcomm/rendezvous/hash_store.hpp"
#include "distcomm/strategy/native.hpp"
#include "distcomm/strategy/ring.hpp"

namespace dc = distcomm;

namespace {

void cuda_ok(cudaError_t e) { REQUIRE_MESSAGE(e == cudaSuccess, cudaGetErrorString(e)); }

// Device memory with room for one extra element in front, so tests can offset by one element.
class device_bytes {
 public:
  explicit device_bytes(std::size_t n) : n_(n) { cuda_ok(cudaMalloc(&p_, n + 16)); }
  ~device_bytes() { cudaFree(p_); }
  device_bytes(const device_bytes&) = delete;
  device_bytes& operator=(const device_bytes&) = delete;
  unsigned char* at(std::size_t offset) const { return static_cast<unsigned char*>(p_) + offset; }

 private:
  void* p_ = nullptr;
  std::size_t n_;
};

// count values of dtype t, seeded differently per call, kept small so products stay finite.
std::vector<unsigned char> values(dc::dtype t, std::size_t count, int seed) {
  std::vector<unsigned char> out(count * dc::dtype_size(t));
  for (std::size_t i = 0; i < count; ++i) {
    const int k = static_cast<int>((i * 7 + static_cast<std::size_t>(seed) * 13) % 23) - 11;
    const float f = static_cast<float>(k) * 0.375f;
    unsigned char* d = out.data() + i * dc::dtype_size(t);
    switch (t) {
      case dc::dtype::f16: {
        const dc::f16 h(f);
        std::memcpy(d, &h, 2);
        break;
      }
      case dc::dtype::bf16: {
        const dc::bf16 h(f);
        std::memcpy(d, &h, 2);
        break;
      }
      case dc::dtype::f32:
        std::memcpy(d, &f, 4);
        break;
      case dc::dtype::f64: {
        const double v = f;
        std::memcpy(d, &v, 8);
        break;
      }
      case dc::dtype::i8: {
        const auto v = static_cast<std::int8_t>(k * 11);  // wraps in products and sums
        std::memcpy(d, &v, 1);
        break;
      }
      case dc::dtype::u8: {
        const auto v = static_cast<std::uint8_t>(k * 29);
        std::memcpy(d, &v, 1);
        break;
      }
      case dc::dtype::i32: {
        const std::int32_t v = k * 190000000;  // sums and products wrap
        std::memcpy(d, &v, 4);
        break;
      }
      case dc::dtype::i64: {
        const std::int64_t v = static_cast<std::int64_t>(k) * 800000000000000000LL;
        std::memcpy(d, &v, 8);
        break;
      }
    }
  }
  return out;
}

std::vector<unsigned char> to_host(const void* d, std::size_t bytes) {
  std::vector<unsigned char> h(bytes);
  cuda_ok(cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost));
  return h;
}

constexpr std::size_t sizes[] = {1, 3, 1023, 4099, 300001};

}  // namespace

TEST_CASE("cuda::combine and cuda::divide match the host kernels bit for bit") {
  for (dc::dtype t : dc::all_dtypes) {
    const std::size_t es = dc::dtype_size(t);
    for (std::size_t n : sizes) {
      for (std::size_t shift : {std::size_t{0}, std::size_t{1}}) {  // one element off alignment
        CAPTURE(dc::to_string(t));
        CAPTURE(n);
        CAPTURE(shift);
        const auto a = values(t, n, 1);
        const auto b = values(t, n, 2);
        device_bytes da(a.size()), db(b.size()), dd(a.size());
        cuda_ok(cudaMemcpy(da.at(shift * es), a.data(), a.size(), cudaMemcpyHostToDevice));
        cuda_ok(cudaMemcpy(db.at(shift * es), b.data(), b.size(), cudaMemcpyHostToDevice));
        for (dc::reduce_op op : dc::all_reduce_ops) {
          CAPTURE(dc::to_string(op));
          std::vector<unsigned char> want(a.size());
          dc::combine(want.data(), a.data(), b.data(), n, t, op);
          dc::cuda::combine(dd.at(shift * es), da.at(shift * es), db.at(shift * es), n, t, op,
                            nullptr);
          cuda_ok(cudaDeviceSynchronize());
          CHECK(to_host(dd.at(shift * es), a.size()) == want);
        }
        for (std::size_t divisor :
             {std::size_t{1}, std::size_t{3}, std::size_t{7}, std::size_t{1} << 40}) {
          CAPTURE(divisor);
          std::vector<unsigned char> want(a.size());
          dc::divide(want.data(), a.data(), n, t, divisor);
          dc::cuda::divide(dd.at(shift * es), da.at(shift * es), n, t, divisor, nullptr);
          cuda_ok(cudaDeviceSynchronize());
          CHECK(to_host(dd.at(shift * es), a.size()) == want);
        }
      }
    }
  }
}

TEST_CASE("batched pack and unpack move many tensors in one call, scaling on the way") {
  for (dc::dtype t : dc::all_dtypes) {
    CAPTURE(dc::to_string(t));
    const std::size_t es = dc::dtype_size(t);
    // More tensors than one launch carries, of odd sizes, at odd element offsets.
    const std::size_t tensors = dc::cuda::max_segments_per_launch + 5;
    std::vector<std::vector<unsigned char>> host;
    std::vector<dc::cuda::copy_segment> segs;
    std::size_t total = 0;
    device_bytes pool(tensors * 2000 * es + tensors * es);
    std::size_t pool_offset = es;
    for (std::size_t i = 0; i < tensors; ++i) {
      const std::size_t n = (i * 37) % 1999 + (i % 3 == 0 ? 0 : 1);  // some are empty
      host.push_back(values(t, n, static_cast<int>(i)));
      void* d = pool.at(pool_offset);
      cuda_ok(cudaMemcpy(d, host.back().data(), n * es, cudaMemcpyHostToDevice));
      segs.push_back({d, n, total});
      total += n;
      pool_offset += n * es + es;
    }
    device_bytes packed(total * es);
    const double scale = dc::is_floating_point(t) ? 0.5 : 1.0;  // exact in every float type
    dc::cuda::pack(segs.data(), segs.size(), packed.at(0), t, scale, nullptr);
    cuda_ok(cudaDeviceSynchronize());
    auto p = to_host(packed.at(0), total * es);
    std::vector<unsigned char> want;
    for (const auto& h : host) want.insert(want.end(), h.begin(), h.end());
    if (scale != 1.0) {  // x * 0.5 == x / 2 exactly
      dc::divide(want.data(), want.data(), total, t, 2);
    }
    CHECK(p == want);

    // Unpack with the inverse scale restores every tensor exactly.
    for (const auto& s : segs) cuda_ok(cudaMemset(s.data, 0, s.count * es));
    dc::cuda::unpack(segs.data(), segs.size(), packed.at(0), t, 1.0 / scale, nullptr);
    cuda_ok(cudaDeviceSynchronize());
    for (std::size_t i = 0; i < tensors; ++i) {
      CAPTURE(i);
      CHECK(to_host(segs[i].data, segs[i].count * es) == host[i]);
    }
  }
  dc::cuda::copy_segment s{nullptr, 0, 0};
  CHECK_THROWS_AS(dc::cuda::pack(&s, 1, &s, dc::dtype::i32, 0.5, nullptr),
                  dc::invalid_argument_error);
}

TEST_CASE("one-rank NCCL collectives, send/recv to self, and device fusion") {
  dc::hash_store kv(std::chrono::seconds(30));
  dc::nccl_backend b(kv, 0, 1, 0, std::chrono::seconds(60));
  CHECK(b.size() == 1);
  CHECK(b.rank() == 0);
  const auto until = [] { return dc::deadline_after(std::chrono::seconds(60)); };
  constexpr std::size_t n = 1001;
  for (dc::dtype t : dc::all_dtypes) {
    CAPTURE(dc::to_string(t));
    const std::size_t es = dc::dtype_size(t);
    const auto a = values(t, n, 5);
    device_bytes din(n * es), dout(n * es);
    cuda_ok(cudaMemcpy(din.at(es), a.data(), n * es, cudaMemcpyHostToDevice));
    for (dc::reduce_op op : dc::all_reduce_ops) {
      CAPTURE(dc::to_string(op));
      cuda_ok(cudaMemset(dout.at(0), 0, n * es));
      b.native_allreduce(din.at(es), dout.at(0), n, t, op, until());  // one rank: the identity
      CHECK(to_host(dout.at(0), n * es) == a);
      cuda_ok(cudaMemset(dout.at(0), 0, n * es));
      b.native_reduce_scatter(din.at(es), dout.at(0), n, t, op, until());
      CHECK(to_host(dout.at(0), n * es) == a);
    }
    cuda_ok(cudaMemset(dout.at(0), 0, n * es));
    b.native_allgather(din.at(es), dout.at(0), n, t, until());
    CHECK(to_host(dout.at(0), n * es) == a);
    b.native_broadcast(din.at(es), n, t, 0, until());
    CHECK(to_host(din.at(es), n * es) == a);

    cuda_ok(cudaMemset(dout.at(0), 0, n * es));
    auto r = b.irecv(dout.at(0), n * es, 0, 7);
    auto s = b.isend(din.at(es), n * es, 0, 7);
    r.wait(until());
    s.wait(until());
    CHECK(to_host(dout.at(0), n * es) == a);
  }
  b.native_barrier(until());

  // Grouped allreduce of three f32 tensors through the device fusion buffer, pre-scaled by 0.5.
  std::vector<float> x(100, 3.0f), y(7, -1.0f), z(4000, 8.0f);
  device_bytes dx(x.size() * 4), dy(y.size() * 4), dz(z.size() * 4);
  cuda_ok(cudaMemcpy(dx.at(0), x.data(), x.size() * 4, cudaMemcpyHostToDevice));
  cuda_ok(cudaMemcpy(dy.at(0), y.data(), y.size() * 4, cudaMemcpyHostToDevice));
  cuda_ok(cudaMemcpy(dz.at(0), z.data(), z.size() * 4, cudaMemcpyHostToDevice));
  const dc::tensor_view views[] = {dc::cuda_view(dx.at(0), x.size(), dc::dtype::f32, 0),
                                   dc::cuda_view(dy.at(0), y.size(), dc::dtype::f32, 0),
                                   dc::cuda_view(dz.at(0), z.size(), dc::dtype::f32, 0)};
  dc::cuda::fusion_buffer fb(1024);  // x and y fuse; z (16000 bytes) runs in place
  int runs = 0;
  fb.allreduce(dc::span<const dc::tensor_view>(views, 3), dc::reduce_op::sum, b.stream(), 0.5, 1.0,
               [&](const void* in, void* out, std::size_t count, dc::dtype t, dc::reduce_op op,
                   cudaStream_t st) {
                 ++runs;
                 b.iallreduce(in, out, count, t, op, st).wait(until());
               });
  CHECK(runs == 2);
  CHECK(fb.capacity() == (100 + 7) * 4);
  std::vector<float> got(z.size());
  cuda_ok(cudaMemcpy(got.data(), dx.at(0), x.size() * 4, cudaMemcpyDeviceToHost));
  CHECK(got[0] == 1.5f);
  CHECK(got[99] == 1.5f);
  cuda_ok(cudaMemcpy(got.data(), dy.at(0), y.size() * 4, cudaMemcpyDeviceToHost));
  CHECK(got[6] == -0.5f);
  cuda_ok(cudaMemcpy(got.data(), dz.at(0), z.size() * 4, cudaMemcpyDeviceToHost));
  CHECK(got[3999] == 4.0f);
}

// Grouped allreduce through communicator<nccl_backend, S, cuda::fusion> on one rank: many tensors
// of every dtype, odd counts, at odd element offsets, some empty, one past the threshold (run in
// place); sum and avg, each checked bit for bit against the host reference (the fold of the one
// rank's input, divided by the world size for avg). The packing buffer grows once, then is reused.
template <class S>
void grouped_through_cuda_fusion() {
  dc::hash_store kv(std::chrono::seconds(30));
  dc::config c;
  c.timeout = std::chrono::seconds(60);
  c.fusion_threshold = 64 << 10;
  dc::communicator<dc::nccl_backend, S, dc::cuda::fusion> comm(
      dc::nccl_backend(kv, 0, 1, 0, std::chrono::seconds(60)), c);
  CHECK(comm.fusion().threshold() == c.fusion_threshold);

  constexpr std::size_t tensors = 150;  // more than one batched launch carries
  std::vector<std::vector<unsigned char>> host;
  std::vector<dc::tensor_view> views;
  std::vector<std::size_t> offsets;
  std::size_t total = 0;
  for (std::size_t i = 0; i < tensors; ++i) {
    const dc::dtype t = dc::all_dtypes[(i * 5) % std::size(dc::all_dtypes)];
    std::size_t n = (i * 131) % 997 + (i % 11 == 0 ? 0 : 1);  // some empty, most odd
    if (i == 17) n = 70001;  // past the 64 KiB threshold in any dtype
    host.push_back(values(t, n, static_cast<int>(i)));
    offsets.push_back(total + dc::dtype_size(t));  // one element into an 8-byte aligned slot
    total += (n + 2) * 8;
  }
  device_bytes pool(total);
  for (std::size_t i = 0; i < tensors; ++i) {
    const dc::dtype t = dc::all_dtypes[(i * 5) % std::size(dc::all_dtypes)];
    views.push_back(dc::cuda_view(pool.at(offsets[i]), host[i].size() / dc::dtype_size(t), t, 0));
  }
  for (int round = 0; round < 2; ++round) {
    for (dc::reduce_op op : {dc::reduce_op::sum, dc::reduce_op::avg}) {
      CAPTURE(round);
      CAPTURE(dc::to_string(op));
      for (std::size_t i = 0; i < tensors; ++i) {
        cuda_ok(cudaMemcpy(pool.at(offsets[i]), host[i].data(), host[i].size(),
                           cudaMemcpyHostToDevice));
      }
      const std::size_t before = comm.fusion().capacity();
      comm.allreduce(dc::span<const dc::tensor_view>(views.data(), views.size()), op);
      if (round == 1) CHECK(comm.fusion().capacity() == before);  // reused, not regrown
      CHECK(comm.fusion().capacity() > 0);
      CHECK(comm.fusion().capacity() <= c.fusion_threshold);
      for (std::size_t i = 0; i < tensors; ++i) {
        CAPTURE(i);
        const dc::tensor_view& v = views[i];
        std::vector<unsigned char> want(host[i].size());
        const void* in[] = {host[i].data()};
        if (v.count != 0) dc::fold(want.data(), in, 1, v.count, v.type, op);
        if (op == dc::reduce_op::avg && v.count != 0) {
          dc::divide(want.data(), want.data(), v.count, v.type, 1);
        }
        CHECK(to_host(v.data, host[i].size()) == want);
      }
    }
  }

  // fusion::buffer packs with host copies: refused on device tensors, naming cuda::fusion.
  dc::communicator<dc::nccl_backend, S, dc::fusion::buffer> host_packed(
      dc::nccl_backend(kv, 0, 1, 0, std::chrono::seconds(60)), c);
  CHECK_THROWS_WITH_AS(
      host_packed.allreduce(dc::span<const dc::tensor_view>(views.data(), views.size())),
      doctest::Contains("cuda::fusion"), dc::invalid_argument_error);
}

TEST_CASE("grouped allreduce through cuda::fusion, strategy native") {
  grouped_through_cuda_fusion<dc::strategy::native>();
}
TEST_CASE("grouped allreduce through cuda::fusion, strategy ring") {
  grouped_through_cuda_fusion<dc::strategy::ring>();
}

TEST_CASE("nccl_memory: fold, copy and divide match the host kernels; scratch is device memory") {
  dc::hash_store kv(std::chrono::seconds(30));
  dc::nccl_backend b(kv, 0, 1, 0, std::chrono::seconds(60));
  dc::nccl_memory m = b.memory();
  const auto until = [] { return dc::deadline_after(std::chrono::seconds(60)); };
  constexpr std::size_t n = 4099;
  for (dc::dtype t : dc::all_dtypes) {
    CAPTURE(dc::to_string(t));
    const std::size_t es = dc::dtype_size(t);
    std::vector<std::vector<unsigned char>> host;
    for (int q = 0; q < 4; ++q) host.push_back(values(t, n, q + 3));
    device_bytes d(4 * n * es), dst(n * es);
    for (std::size_t q = 0; q < 4; ++q) {
      cuda_ok(cudaMemcpy(d.at(q * n * es), host[q].data(), n * es, cudaMemcpyHostToDevice));
    }
    for (dc::reduce_op op : dc::all_reduce_ops) {
      CAPTURE(dc::to_string(op));
      for (std::size_t inputs = 1; inputs <= 4; ++inputs) {
        CAPTURE(inputs);
        std::vector<const void*> hin, din;
        for (std::size_t q = 0; q < inputs; ++q) {
          hin.push_back(host[q].data());
          din.push_back(d.at(q * n * es));
        }
        std::vector<unsigned char> want(n * es);
        dc::fold(want.data(), hin.data(), inputs, n, t, op);
        m.fold(dst.at(0), din.data(), inputs, n, t, op);
        m.complete(until());
        CHECK(to_host(dst.at(0), n * es) == want);
        if (inputs >= 3) {  // in place into the last input but one, as the strategies fold
          unsigned char* alias = d.at((inputs - 2) * n * es);
          m.fold(alias, din.data(), inputs, n, t, op);
          m.complete(until());
          CHECK(to_host(alias, n * es) == want);
          cuda_ok(cudaMemcpy(alias, host[inputs - 2].data(), n * es, cudaMemcpyHostToDevice));
        }
      }
    }
    std::vector<unsigned char> want(n * es);
    dc::divide(want.data(), host[0].data(), n, t, 3);
    m.divide(dst.at(0), d.at(0), n, t, 3);
    m.complete(until());
    CHECK(to_host(dst.at(0), n * es) == want);
    m.copy(dst.at(0), d.at(n * es), n * es);
    m.complete(until());
    CHECK(to_host(dst.at(0), n * es) == host[1]);
  }
  unsigned char* s = m.scratch(100);
  cudaPointerAttributes attr{};
  cuda_ok(cudaPointerGetAttributes(&attr, s));
  CHECK(attr.type == cudaMemoryTypeDevice);
  CHECK(m.scratch(50) == s);                            // reused while large enough
  cuda_ok(cudaMemset(m.scratch(1 << 20), 0, 1 << 20));  // grown
}

// ring, tree and parameter_server through the communicator on the NCCL backend: one rank, so
// the result is the input, copied out of place; reduce_scatter, allgather, broadcast and barrier
// go through the point-to-point paths too.
template <class S>
void one_rank_strategy() {
  dc::hash_store kv(std::chrono::seconds(30));
  dc::config c;
  c.timeout = std::chrono::seconds(60);
  c.segment_bytes = 256;
  dc::communicator<dc::nccl_backend, S, dc::fusion::none> comm(
      dc::nccl_backend(kv, 0, 1, 0, std::chrono::seconds(60)), c);
  for (dc::dtype t : dc::all_dtypes) {
    CAPTURE(dc::to_string(t));
    const std::size_t es = dc::dtype_size(t);
    for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{301}, std::size_t{5000}}) {
      CAPTURE(n);
      const auto a = values(t, n, 9);
      device_bytes din(n * es), dout(n * es);
      cuda_ok(cudaMemcpy(din.at(0), a.data(), n * es, cudaMemcpyHostToDevice));
      for (dc::reduce_op op : {dc::reduce_op::sum, dc::reduce_op::avg, dc::reduce_op::max}) {
        CAPTURE(dc::to_string(op));
        cuda_ok(cudaMemset(dout.at(0), 0, n * es));
        comm.allreduce(dc::cuda_view(din.at(0), n, t, 0), dc::cuda_view(dout.at(0), n, t, 0), op);
        CHECK(to_host(dout.at(0), n * es) == a);
        comm.allreduce(dc::cuda_view(dout.at(0), n, t, 0), op);  // in place
        CHECK(to_host(dout.at(0), n * es) == a);
      }
      cuda_ok(cudaMemset(dout.at(0), 0, n * es));
      comm.reduce_scatter(dc::cuda_view(din.at(0), n, t, 0), dc::cuda_view(dout.at(0), n, t, 0));
      CHECK(to_host(dout.at(0), n * es) == a);
      cuda_ok(cudaMemset(dout.at(0), 0, n * es));
      comm.allgather(dc::cuda_view(din.at(0), n, t, 0), dc::cuda_view(dout.at(0), n, t, 0));
      CHECK(to_host(dout.at(0), n * es) == a);
      comm.broadcast(dc::cuda_view(din.at(0), n, t, 0), 0);
      CHECK(to_host(din.at(0), n * es) == a);
    }
  }
  comm.barrier();
}

TEST_CASE("strategy ring on the NCCL backend") { one_rank_strategy<dc::strategy::ring>(); }
TEST_CASE("strategy tree on the NCCL backend") { one_rank_strategy<dc::strategy::tree>(); }
TEST_CASE("strategy parameter_server on the NCCL backend") {
  one_rank_strategy<dc::strategy::parameter_server>();
}

// shrink() on a backend made from a job: every rank alive, the survivors' communicator is the
// same group anew (a new NCCL communicator through the group store) and reduces; a backend made
// over a store it does not own cannot shrink, and says so.
TEST_CASE("shrink on the NCCL backend") {
  dc::job j;
  j.kv = std::make_shared<dc::hash_store>(std::chrono::seconds(30));
  dc::config c;
  c.timeout = std::chrono::seconds(60);
  dc::communicator<dc::nccl_backend, dc::strategy::native, dc::cuda::fusion> comm(
      dc::nccl_backend(j, 0, std::chrono::seconds(60)), c);
  auto survivors = comm.shrink();
  CHECK(survivors.size() == 1);
  constexpr std::size_t n = 257;
  const auto a = values(dc::dtype::f32, n, 5);
  device_bytes din(n * 4), dout(n * 4);
  cuda_ok(cudaMemcpy(din.at(0), a.data(), n * 4, cudaMemcpyHostToDevice));
  survivors.allreduce(dc::tensor_view{din.at(0), n, dc::dtype::f32, dc::memory_kind::cuda, 0},
                      dc::tensor_view{dout.at(0), n, dc::dtype::f32, dc::memory_kind::cuda, 0});
  std::vector<unsigned char> back(n * 4);
  cuda_ok(cudaMemcpy(back.data(), dout.at(0), n * 4, cudaMemcpyDeviceToHost));
  CHECK(back == a);

  dc::hash_store kv(std::chrono::seconds(30));
  dc::communicator<dc::nccl_backend, dc::strategy::native, dc::cuda::fusion> unowned(
      dc::nccl_backend(kv, 0, 1, 0, std::chrono::seconds(60)), c);
  CHECK_THROWS_WITH_AS(unowned.shrink(), doctest::Contains("no store of its own"),
                       dc::invalid_argument_error);
}

// split (ncclCommSplit) and alltoall (pairwise over NCCL's send/receive) on one rank: a child of
// one rank that reduces on its own, and an alltoall that is a copy.
TEST_CASE("split and alltoall on the NCCL backend") {
  dc::hash_store kv(std::chrono::seconds(30));
  dc::config c;
  c.timeout = std::chrono::seconds(60);
  dc::communicator<dc::nccl_backend, dc::strategy::native, dc::cuda::fusion> comm(
      dc::nccl_backend(kv, 0, 1, 0, std::chrono::seconds(60)), c);
  auto child = comm.split(0);
  REQUIRE(child);
  CHECK(child->size() == 1);
  CHECK(child->rank() == 0);
  CHECK_FALSE(comm.split(-1).has_value());
  constexpr std::size_t n = 1001;
  const auto a = values(dc::dtype::f32, n, 3);
  device_bytes din(n * 4), dout(n * 4);
  cuda_ok(cudaMemcpy(din.at(0), a.data(), n * 4, cudaMemcpyHostToDevice));
  dc::tensor_view in{din.at(0), n, dc::dtype::f32, dc::memory_kind::cuda, 0};
  dc::tensor_view out{dout.at(0), n, dc::dtype::f32, dc::memory_kind::cuda, 0};
  child->allreduce(in, out);
  std::vector<unsigned char> back(n * 4);
  cuda_ok(cudaMemcpy(back.data(), dout.at(0), n * 4, cudaMemcpyDeviceToHost));
  CHECK(back == a);
  cuda_ok(cudaMemset(dout.at(0), 0, n * 4));
  comm.alltoall(in, out);
  cuda_ok(cudaMemcpy(back.data(), dout.at(0), n * 4, cudaMemcpyDeviceToHost));
  CHECK(back == a);
}

// The engine's device path (engine.hpp: engine(data, control)): tensors over NCCL through
// cuda::fusion, the ranks' agreement over a host communicator (the local backend; one rank, as
// NCCL runs one rank per GPU). Tensors of several dtypes submitted by name, in two steps, the
// second reusing the names; each completes with the one rank's input bit for bit (the sum and
// the average over one rank), and the grouped allreduce of a step is one collective.
TEST_CASE("engine: device tensors over NCCL, the agreement over a host communicator") {
  dc::hash_store kv(std::chrono::seconds(30));
  dc::config c;
  c.timeout = std::chrono::seconds(60);
  dc::any_communicator data(
      dc::communicator<dc::nccl_backend, dc::strategy::native, dc::cuda::fusion>(
          dc::nccl_backend(kv, 0, 1, 0, std::chrono::seconds(60)), c));
  dc::local_world world(1);
  world.run([&](dc::local_backend b) {
    cuda_ok(cudaSetDevice(0));  // this thread's device
    dc::any_communicator control(
        dc::communicator<dc::local_backend, dc::strategy::ring>(std::move(b), c));
    dc::engine eng(data, control, c);
    constexpr dc::dtype types[] = {dc::dtype::f32, dc::dtype::f16, dc::dtype::bf16, dc::dtype::f64,
                                   dc::dtype::i32};
    constexpr std::size_t counts[] = {1001, 7, 65536, 3, 129};
    for (int step = 0; step < 2; ++step) {
      CAPTURE(step);
      const dc::reduce_op op = step == 0 ? dc::reduce_op::avg : dc::reduce_op::sum;
      std::vector<std::vector<unsigned char>> host;
      std::vector<std::unique_ptr<device_bytes>> device;
      std::vector<dc::work> works;
      for (std::size_t i = 0; i < std::size(types); ++i) {
        host.push_back(values(types[i], counts[i], static_cast<int>(i) + step));
        device.push_back(std::make_unique<device_bytes>(host[i].size()));
        cuda_ok(
            cudaMemcpy(device[i]->at(0), host[i].data(), host[i].size(), cudaMemcpyHostToDevice));
        works.push_back(eng.allreduce_async("grad." + std::to_string(i),
                                            dc::cuda_view(device[i]->at(0), counts[i], types[i], 0),
                                            op));
      }
      for (dc::work& w : works) w.wait();
      for (std::size_t i = 0; i < std::size(types); ++i) {
        CAPTURE(i);
        CHECK(to_host(device[i]->at(0), host[i].size()) == host[i]);  // one rank: its own input
      }
    }
    eng.synchronize();
    CHECK(eng.stats().tensors == 2 * std::size(types));
  });
}

int main(int argc, char** argv) {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("SKIP: no CUDA device: %s\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount returned 0");
    return 77;
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
