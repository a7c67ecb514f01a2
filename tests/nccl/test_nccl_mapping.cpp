// What the NCCL backend decides without a GPU: which NCCL type and operation each DistComm dtype
// and reduce_op becomes, and how rank 0's unique id reaches the other ranks through the store.
#include <doctest/doctest.h>

#include <thread>
#include <vector>

#include "distcomm/backends/nccl.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/rendezvous/hash_store.hpp"

namespace dc = distcomm;

TEST_CASE("every dtype maps to the NCCL type of the same width and kind") {
  CHECK(dc::detail::nccl_datatype(dc::dtype::f16) == ncclFloat16);
  CHECK(dc::detail::nccl_datatype(dc::dtype::bf16) == ncclBfloat16);
  CHECK(dc::detail::nccl_datatype(dc::dtype::f32) == ncclFloat32);
  CHECK(dc::detail::nccl_datatype(dc::dtype::f64) == ncclFloat64);
  CHECK(dc::detail::nccl_datatype(dc::dtype::i8) == ncclInt8);
  CHECK(dc::detail::nccl_datatype(dc::dtype::u8) == ncclUint8);
  CHECK(dc::detail::nccl_datatype(dc::dtype::i32) == ncclInt32);
  CHECK(dc::detail::nccl_datatype(dc::dtype::i64) == ncclInt64);
  CHECK_THROWS_AS(dc::detail::nccl_datatype(static_cast<dc::dtype>(42)),
                  dc::invalid_argument_error);
}

TEST_CASE("reduce ops map to NCCL's; integer avg is a sum followed by DistComm's division") {
  for (dc::dtype t : dc::all_dtypes) {
    CAPTURE(dc::to_string(t));
    bool divide = true;
    CHECK(dc::detail::nccl_redop(dc::reduce_op::sum, t, &divide) == ncclSum);
    CHECK_FALSE(divide);
    CHECK(dc::detail::nccl_redop(dc::reduce_op::prod, t, &divide) == ncclProd);
    CHECK(dc::detail::nccl_redop(dc::reduce_op::min, t, &divide) == ncclMin);
    CHECK(dc::detail::nccl_redop(dc::reduce_op::max, t, &divide) == ncclMax);
    CHECK_FALSE(divide);
    const ncclRedOp_t avg = dc::detail::nccl_redop(dc::reduce_op::avg, t, &divide);
    if (dc::is_floating_point(t)) {
      CHECK(avg == ncclAvg);
      CHECK_FALSE(divide);
    } else {
      CHECK(avg == ncclSum);
      CHECK(divide);
    }
  }
  bool divide = false;
  CHECK_THROWS_AS(dc::detail::nccl_redop(static_cast<dc::reduce_op>(9), dc::dtype::f32, &divide),
                  dc::invalid_argument_error);
  CHECK_THROWS_AS(dc::detail::nccl_redop(dc::reduce_op::sum, static_cast<dc::dtype>(9), &divide),
                  dc::invalid_argument_error);
}

TEST_CASE("rank 0's unique id reaches every rank through the store; only rank 0 makes one") {
  dc::hash_store kv(std::chrono::seconds(10));
  constexpr int size = 4;
  const dc::bytes id = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<dc::bytes> got(size);
  std::vector<int> made(size, 0);
  std::vector<std::thread> ranks;
  for (int r = size - 1; r >= 0; --r) {  // readers first: they must wait for rank 0
    ranks.emplace_back([&, r] {
      got[r] = dc::detail::share_from_rank0(kv, r, "nccl/test/id", id.size(), [&] {
        ++made[r];
        return id;
      });
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < size; ++r) {
    CAPTURE(r);
    CHECK(got[r] == id);
    CHECK(made[r] == (r == 0 ? 1 : 0));
  }
}

TEST_CASE("a value of the wrong size under the id's key is a rendezvous error") {
  dc::hash_store kv(std::chrono::seconds(10));
  kv.set("nccl/test/id", dc::bytes{1, 2, 3});
  CHECK_THROWS_AS(dc::detail::share_from_rank0(kv, 1, "nccl/test/id", sizeof(ncclUniqueId),
                                               [] { return dc::bytes{}; }),
                  dc::rendezvous_error);
}

TEST_CASE("a rank waiting for an id nobody publishes times out") {
  dc::hash_store kv(std::chrono::milliseconds(200));
  CHECK_THROWS_AS(dc::detail::share_from_rank0(kv, 1, "nccl/test/missing", sizeof(ncclUniqueId),
                                               [] { return dc::bytes{}; }),
                  dc::timeout_error);
}
