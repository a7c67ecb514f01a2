// strategy::hierarchical on ranks as threads: a communicator whose large allreduces go over two
// levels (here: the ranks of a "host" of two, then the ranks with the same place on every host)
// keeps the flat communicator's rules: Tensor Fusion packs by its threshold and cutoff, a grouped
// call's tensors are checked one by one, integer avg is the flat path's, the threshold is part of
// what the ranks agree on, and sub-communicators are flat. The levels across real hosts run in
// tests/multihost (hierarchical_stack_2x2, hierarchical_grouped_mismatch_2x2).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distcomm/backends/local.hpp"
#include "distcomm/communicator.hpp"
#include "distcomm/strategy/hierarchical.hpp"

using namespace distcomm;
using namespace std::chrono_literals;

namespace {

using flat_comm = communicator<local_backend>;
using hier = strategy::hierarchical<>;
using hier_comm = communicator<local_backend, hier>;

constexpr std::size_t KiB = 1024;

// Two levels of a world of 4: hosts {0, 1} and {2, 3}.
class test_levels final : public levels {
 public:
  test_levels(flat_comm& whole, int rank)
      : intra_(std::move(*whole.split(rank / 2, rank))),
        inter_(std::move(*whole.split(rank % 2, rank))) {}
  void allreduce(void* data, std::size_t count, dtype t, reduce_op op, deadline) override {
    ++runs;
    intra_.allreduce(tensor_view{data, count, t}, op);
    inter_.allreduce(tensor_view{data, count, t}, op);
  }
  int size() const override { return intra_.size() * inter_.size(); }
  const std::string& name() const override { return name_; }
  void retune(const config&, const config&) override { ++retunes; }
  std::size_t agree(std::size_t threshold) override {
    std::int64_t range[2] = {static_cast<std::int64_t>(threshold),
                             -static_cast<std::int64_t>(threshold)};
    intra_.allreduce(tensor_view{range, 2, dtype::i64}, reduce_op::max);
    inter_.allreduce(tensor_view{range, 2, dtype::i64}, reduce_op::max);
    if (range[0] != -range[1]) throw mismatch_error("different hierarchical thresholds");
    return threshold;
  }
  int runs = 0;
  int retunes = 0;

 private:
  flat_comm intra_;
  flat_comm inter_;
  std::string name_ = "local+local";
};

config test_settings() {
  config c;
  c.timeout = 5s;
  c.fusion_threshold = 128 * KiB;
  c.fusion_cutoff = 256 * KiB;
  return c;
}

// Each rank of 4: a flat communicator for its levels, and the hierarchical one from `threshold`.
template <class F>
void run4(std::size_t threshold, F&& f, const config& c = test_settings()) {
  local_world w(4);
  local_world levels_world(4);
  w.run([&](local_backend b) {
    const int r = b.rank();
    // The levels' own world, so that their calls are not the hierarchical communicator's.
    flat_comm whole(levels_world.backend(r), c);
    auto over = std::make_shared<test_levels>(whole, r);
    hier_comm comm(std::move(b), c, [&](const config& s) { return hier(s, over, threshold); });
    f(comm, *over, r);
  });
}

}  // namespace

TEST_CASE(
    "hierarchical strategy: Tensor Fusion packs by its threshold and cutoff, then the levels") {
  run4(64 * KiB, [](hier_comm& comm, test_levels& over, int r) {
    // 4 tensors of 48 KiB: 2 buffers under a threshold of 128 KiB; 512 KiB past the 256 KiB
    // cutoff runs alone. All 3 runs from the 64 KiB hierarchical threshold: over the levels.
    std::vector<std::vector<float>> small(4, std::vector<float>(12 * KiB, r + 1.0f));
    std::vector<float> large(128 * KiB, 2.0f * (r + 1));
    std::vector<tensor_view> views;
    for (auto& t : small) views.push_back(view(t));
    views.push_back(view(large));
    comm.allreduce(views);
    CHECK(over.runs == 3);
    for (const auto& t : small) CHECK(t.back() == 10.0f);
    CHECK(large.front() == 20.0f);
    // Below the threshold: the flat strategy, not the levels.
    std::vector<float> little(1000, 1.0f);
    comm.allreduce(view(little));
    CHECK(over.runs == 3);
    CHECK(little[999] == 4.0f);
    CHECK(std::string(comm.backend_name()) == "local+local");
    CHECK(std::string(comm.strategy_name()) == "hierarchical");
  });
}

TEST_CASE("hierarchical strategy: integer avg is the flat path's (the sum, divided once)") {
  run4(KiB, [](hier_comm& comm, test_levels& over, int r) {
    const auto value = [](int rank, std::size_t i) {
      return static_cast<std::int32_t>((rank * 7 + static_cast<int>(i % 13)) % 11) - 5;
    };
    std::vector<std::int32_t> v(10001), flat(10001);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = value(r, i);
    comm.allreduce(view(v), reduce_op::avg);
    CHECK(over.runs == 1);
    bool same = true;
    for (std::size_t i = 0; i < v.size(); ++i) {
      std::int64_t total = 0;
      for (int q = 0; q < 4; ++q) total += value(q, i);
      same = same && v[i] == static_cast<std::int32_t>(total / 4);  // truncated toward zero
    }
    CHECK(same);
  });
}

TEST_CASE("hierarchical strategy: a grouped call's tensors are checked one by one") {
  std::atomic<int> refused{0};
  run4(64 * KiB, [&](hier_comm& comm, test_levels& over, int r) {
    // 256 KiB either way, [64 KiB, 192 KiB] on one host and [192 KiB, 64 KiB] on the other.
    std::vector<float> a(r < 2 ? 16 * KiB : 48 * KiB, 1.0f), b(r < 2 ? 48 * KiB : 16 * KiB, 1.0f);
    const tensor_view both[] = {view(a), view(b)};
    try {
      comm.allreduce(span<const tensor_view>(both, 2));
    } catch (const mismatch_error& e) {
      CHECK(std::string(e.what()).find("grouped allreduce") != std::string::npos);
      ++refused;
    }
    CHECK(over.runs == 0);
  });
  CHECK(refused == 4);
}

TEST_CASE("hierarchical strategy: the threshold is part of what the ranks agree on") {
  std::atomic<int> refused{0};
  local_world w(4), levels_world(4);
  w.run([&](local_backend b) {
    const int r = b.rank();
    flat_comm whole(levels_world.backend(r), test_settings());
    auto over = std::make_shared<test_levels>(whole, r);
    const std::size_t threshold = r == 3 ? 128 * KiB : 64 * KiB;
    hier_comm comm(std::move(b), test_settings(),
                   [&](const config& s) { return hier(s, over, threshold); });
    std::vector<float> v(1000, 1.0f);
    try {
      comm.allreduce(view(v));
    } catch (const mismatch_error&) {
      ++refused;
    }
  });
  CHECK(refused == 4);
}

TEST_CASE("hierarchical strategy: retune moves the threshold on every rank, or refuses") {
  run4(64 * KiB, [](hier_comm& comm, test_levels& over, int r) {
    tuning t = comm.current_tuning();
    CHECK(t.hierarchical_threshold == 64 * KiB);
    t.hierarchical_threshold = 512 * KiB;
    comm.retune(t);
    CHECK(comm.current_tuning().hierarchical_threshold == 512 * KiB);
    CHECK(over.retunes == 1);
    std::vector<float> v(64 * KiB, 1.0f);  // 256 KiB: flat now
    comm.allreduce(view(v));
    CHECK(over.runs == 0);
    CHECK(v.back() == 4.0f);
    t.hierarchical_threshold = r == 0 ? KiB : 2 * KiB;
    CHECK_THROWS_AS(comm.retune(t), mismatch_error);
    CHECK(comm.current_tuning().hierarchical_threshold == 512 * KiB);
  });
}

TEST_CASE("hierarchical strategy: sub-communicators are flat") {
  run4(KiB, [](hier_comm& comm, test_levels& over, int r) {
    std::optional<hier_comm> half = comm.split(r % 2, r);
    REQUIRE(half);
    std::vector<float> v(10000, 1.0f);
    half->allreduce(view(v));
    CHECK(v.back() == 2.0f);
    CHECK(over.runs == 0);
    CHECK(half->current_tuning().hierarchical_threshold == 0);
    CHECK(std::string(half->backend_name()) == "local");
  });
}
