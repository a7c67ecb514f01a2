// distcomm-multihost-check: what a rank of a job spread over several hosts checks, under
// tests/multihost/netns.sh. Through distcomm::init() (the backend from DISTCOMM_BACKEND):
//  * the world the launcher's variables describe: this rank's node, and ranks per node as said;
//  * an allreduce of the whole job, and of split_by_node()'s group: its members are exactly the
//    ranks that share this rank's host name (each namespace-host has its own);
//  * with --hierarchical: distcomm::hierarchical (shm inside each host, the job's backend
//    across) gives the flat allreduce's result, on a count the node's ranks do not divide;
//    with --bench BYTES as well, both timed (f32 sum, medians of 10), printed, not asserted;
//  * non-blocking and grouped allreduces (one past 256 KiB, one small) complete with the sums;
//  * with --expect-backend NAME: init() chose NAME (e.g. "shm+gloo", hierarchical);
//  * on a hierarchical communicator: retune() moves its threshold on every rank (an allreduce
//    below the new one still sums) and leaves the level across hosts its own table, and ranks
//    asking for different thresholds get a mismatch_error on every rank, the threshold kept;
//  * with --stack, on a hierarchical communicator: Tensor Fusion's threshold and cutoff, and
//    integer avg's rounding, as on the flat path (check_stack);
//  * with --grouped-mismatch: a grouped allreduce whose tensors differ between hosts gives
//    mismatch_error on every rank (check_grouped_mismatch), and nothing else is checked;
//  * with --expect-error TEXT: init() must fail, its message containing TEXT (a refused
//    interface, shm across hosts).
// Exit status 0 when all holds; prints one line per rank either way.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "distcomm/distcomm.hpp"
#include "distcomm/hierarchical.hpp"
#include "distcomm/init.hpp"
#include "distcomm/rendezvous/world.hpp"

namespace dc = distcomm;

namespace {

// Median seconds of 10 allreduces of `bytes` (f32 sum) through `reduce`, after 2 unmeasured.
template <class F>
double median_seconds(dc::any_communicator& comm, std::size_t bytes, F&& reduce) {
  std::vector<float> v(bytes / sizeof(float), 1.0f);
  std::vector<double> t;
  for (int i = 0; i < 12; ++i) {
    comm.barrier();
    const auto start = std::chrono::steady_clock::now();
    reduce(dc::view(v));
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (i >= 2) t.push_back(took.count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// distcomm::hierarchical against the flat allreduce of `comm`: the same values (small integers,
// exact in f64); timed when bench_bytes > 0.
bool check_hierarchical(dc::any_communicator& comm, std::size_t bench_bytes) {
  dc::init_options intra;
  intra.backend = "shm";
  dc::hierarchical h = dc::hierarchical::connect(intra, dc::init_options{});
  const std::size_t count = 100003;  // not divided by 2 or 3 ranks per node: the tail path too
  std::vector<double> flat(count), hier(count);
  for (std::size_t i = 0; i < count; ++i) {
    flat[i] = hier[i] = static_cast<double>((comm.rank() * 7 + static_cast<int>(i % 13)) % 11);
  }
  comm.allreduce(dc::view(flat), dc::reduce_op::sum);
  h.allreduce(dc::view(hier), dc::reduce_op::sum);
  const bool same = flat == hier;
  std::printf("rank %d: hierarchical (%s x %d inside, %s x %d across) %s the flat allreduce\n",
              comm.rank(), h.intra().backend_name(), h.intra().size(), h.inter().backend_name(),
              h.inter().size(), same ? "equals" : "DIFFERS FROM");
  if (bench_bytes > 0) {
    const double t_flat = median_seconds(
        comm, bench_bytes, [&](dc::tensor_view v) { comm.allreduce(v, dc::reduce_op::sum); });
    const double t_hier = median_seconds(
        comm, bench_bytes, [&](dc::tensor_view v) { h.allreduce(v, dc::reduce_op::sum); });
    std::printf("rank %d: %zu bytes: flat %s %.2f ms, hierarchical %.2f ms: %.2fx\n", comm.rank(),
                bench_bytes, comm.backend_name(), t_flat * 1e3, t_hier * 1e3, t_flat / t_hier);
  }
  return same;
}

// The hierarchical threshold retuned (communicator::retune, as the engine's autotuner does).
bool check_retune(dc::any_communicator& comm) {
  constexpr std::size_t MiB = std::size_t{1} << 20;
  const std::shared_ptr<dc::hierarchical> h = dc::levels_of(comm);
  if (h == nullptr) return false;
  const dc::tuning across = h->inter().current_tuning();
  dc::tuning t = comm.current_tuning();
  t.hierarchical_threshold = MiB;
  comm.retune(t);
  bool ok = comm.current_tuning().hierarchical_threshold == MiB;
  // The level across hosts keeps its own settings (its table) where flat's did not move...
  ok = ok && h->inter().current_tuning() == across;
  // ...and follows a setting that did, keeping its table.
  t.segment_bytes = 512 * 1024;
  comm.retune(t);
  const dc::tuning moved = h->inter().current_tuning();
  ok = ok && moved.segment_bytes == t.segment_bytes &&
       moved.algo.to_string() == across.algo.to_string();
  std::vector<double> v(50000, comm.rank() + 1.0);  // 400 KB: flat from now on
  comm.allreduce(dc::view(v), dc::reduce_op::sum);
  const double sum = comm.size() * (comm.size() + 1) / 2.0;
  ok = ok && v.front() == sum && v.back() == sum;
  t.hierarchical_threshold = comm.rank() == 0 ? 2 * MiB : 4 * MiB;
  std::string refused = "not refused";
  try {
    comm.retune(t);
    ok = false;
  } catch (const dc::mismatch_error& e) {
    refused = e.what();
    ok = ok && refused.find("different hierarchical thresholds") != std::string::npos;
  }
  ok = ok && comm.current_tuning().hierarchical_threshold == MiB;
  std::printf("rank %d: retuned the hierarchical threshold to 1 MiB; different ones: %s: %s\n",
              comm.rank(), refused.c_str(), ok ? "ok" : "WRONG");
  return ok;
}

// A hierarchical communicator is the flat one with a strategy over the levels, so the flat path's
// rules hold on its large allreduces too:
//  * Tensor Fusion packs a grouped call as the settings say: 4 tensors of 48 KiB with a fusion
//    threshold of 128 KiB make 2 buffers, a 512 KiB tensor past a cutoff of 256 KiB runs alone,
//    and each of those 3 runs (from the hierarchical threshold, 64 KiB) takes its own
//    reduce-scatter and allgather inside the host (run under DISTCOMM_FUSION_THRESHOLD=128K,
//    DISTCOMM_FUSION_CUTOFF=256K, DISTCOMM_HIERARCHICAL=64K);
//  * integer avg is the sum divided once by the ranks, truncated toward zero, as on the flat path
//    (not the average of the hosts' averages).
bool check_stack(dc::any_communicator& comm) {
  const std::shared_ptr<dc::hierarchical> h = dc::levels_of(comm);
  if (h == nullptr) {
    std::printf("rank %d: not a hierarchical communicator (%s)\n", comm.rank(),
                comm.backend_name());
    return false;
  }
  const dc::config& cfg = comm.settings();
  bool ok = cfg.fusion_threshold == (std::size_t{128} << 10) &&
            cfg.fusion_cutoff.value_or(0) == (std::size_t{256} << 10) &&
            comm.current_tuning().hierarchical_threshold == (std::size_t{64} << 10);
  const float r = comm.rank() + 1.0f;
  std::vector<std::vector<float>> small(4, std::vector<float>(12288, r));
  std::vector<float> large(131072, 2 * r);
  std::vector<dc::tensor_view> views;
  for (auto& t : small) views.push_back(dc::view(t));
  views.push_back(dc::view(large));
  const std::uint64_t before = h->intra().calls();
  comm.allreduce(dc::span<const dc::tensor_view>(views.data(), views.size()));
  const std::uint64_t runs = (h->intra().calls() - before) / 2;
  const float sum = comm.size() * (comm.size() + 1) / 2.0f;
  bool sums = large.front() == 2 * sum && large.back() == 2 * sum;
  for (const auto& t : small) sums = sums && t.front() == sum && t.back() == sum;
  ok = ok && runs == 3 && sums;
  // Integer avg over the levels (100002 elements: from the threshold, even per host).
  std::vector<std::int32_t> v(100002);
  const auto value = [](int rank, std::size_t i) {
    return static_cast<std::int32_t>((rank * 7 + static_cast<int>(i % 13)) % 11) - 5;
  };
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = value(comm.rank(), i);
  comm.allreduce(dc::view(v), dc::reduce_op::avg);
  bool avg_ok = true;
  for (std::size_t i = 0; i < v.size() && avg_ok; ++i) {
    std::int64_t total = 0;
    for (int q = 0; q < comm.size(); ++q) total += value(q, i);
    avg_ok = v[i] == static_cast<std::int32_t>(total / comm.size());  // truncates toward zero
  }
  ok = ok && avg_ok;
  std::printf(
      "rank %d: hierarchical stack: %llu fused runs (want 3), sums %s, integer avg %s: %s\n",
      comm.rank(), static_cast<unsigned long long>(runs), sums ? "right" : "WRONG",
      avg_ok ? "as flat" : "DIFFERS FROM FLAT", ok ? "ok" : "WRONG");
  return ok;
}

// Ranks whose grouped allreduce lays the same bytes out as different tensors (this host
// [64 KiB, 192 KiB], the other [192 KiB, 64 KiB]: 256 KiB either way, the hierarchical
// threshold) get a mismatch_error on every rank, naming the grouped allreduce, not a sum across
// tensor boundaries.
bool check_grouped_mismatch(dc::any_communicator& comm, int node) {
  std::vector<float> a(node == 0 ? 16384 : 49152, 1.0f), b(node == 0 ? 49152 : 16384, 1.0f);
  const dc::tensor_view both[] = {dc::view(a), dc::view(b)};
  std::string what = "no error";
  bool ok = false;
  try {
    comm.allreduce(dc::span<const dc::tensor_view>(both, 2));
  } catch (const dc::mismatch_error& e) {
    what = e.what();
    ok = what.find("grouped allreduce") != std::string::npos;
  } catch (const std::exception& e) {
    what = std::string("not a mismatch_error: ") + e.what();
  }
  std::printf("rank %d (%s): grouped layouts differing between hosts: %s: %s\n", comm.rank(),
              comm.backend_name(), what.c_str(), ok ? "ok" : "WRONG");
  return ok;
}

int check(const std::string& expect_error, const std::string& expect_backend, bool hierarchical,
          std::size_t bench_bytes, bool stack, bool grouped_mismatch) {
  const dc::world_info w = dc::detect_world();
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  if (!expect_error.empty()) {
    try {
      dc::any_communicator comm = dc::init();
      std::printf("rank %d on %s: init() succeeded over %s, expected an error with '%s'\n", w.rank,
                  host, comm.backend_name(), expect_error.c_str());
      return 1;
    } catch (const std::exception& e) {
      const bool ok = std::strstr(e.what(), expect_error.c_str()) != nullptr;
      std::printf("rank %d on %s: %s: %s\n", w.rank, host,
                  ok ? "refused as expected" : "WRONG ERROR", e.what());
      return ok ? 0 : 1;
    }
  }
  dc::any_communicator comm = dc::init();
  if (grouped_mismatch) return check_grouped_mismatch(comm, w.node_rank) ? 0 : 1;
  bool ok = comm.rank() == w.rank && comm.size() == w.size;
  // Every rank's host name, through the job's own collectives.
  std::vector<char> mine(64, 0), all(64 * static_cast<std::size_t>(comm.size()), 0);
  std::strncpy(mine.data(), host, mine.size() - 1);
  comm.allgather(dc::tensor_view{mine.data(), mine.size(), dc::dtype::u8},
                 dc::tensor_view{all.data(), all.size(), dc::dtype::u8});
  std::vector<int> same_host;
  for (int q = 0; q < comm.size(); ++q) {
    if (std::string(&all[64 * static_cast<std::size_t>(q)]) == host) same_host.push_back(q);
  }
  ok = ok && static_cast<int>(same_host.size()) == w.local_size;
  std::vector<double> v(100000, comm.rank() + 1.0);
  comm.allreduce(dc::view(v), dc::reduce_op::sum);
  const double job_sum = comm.size() * (comm.size() + 1) / 2.0;
  ok = ok && v.front() == job_sum && v.back() == job_sum;
  dc::any_communicator node = comm.split_by_node();
  double node_sum = 0, expected_node = 0;
  for (int q : same_host) expected_node += q + 1.0;
  std::vector<double> n(1000, comm.rank() + 1.0);
  node.allreduce(dc::view(n), dc::reduce_op::sum);
  node_sum = n.front();
  ok = ok && node.size() == static_cast<int>(same_host.size()) && node_sum == expected_node;
  // Non-blocking, grouped (two tensors, 280 KB together), then a small one behind it.
  std::vector<float> a(70000, comm.rank() + 1.0f), b(3, 2.0f * (comm.rank() + 1));
  std::vector<double> small(3, comm.rank() + 1.0);
  const dc::tensor_view both[] = {dc::view(a), dc::view(b)};
  dc::work grouped = comm.iallreduce(dc::span<const dc::tensor_view>(both, 2));
  dc::work after = comm.iallreduce(dc::view(small));
  grouped.wait();
  after.wait();
  const bool async_ok =
      a.front() == job_sum && a.back() == job_sum && b[2] == 2 * job_sum && small[1] == job_sum;
  if (!async_ok) std::printf("rank %d: non-blocking allreduces WRONG\n", comm.rank());
  ok = ok && async_ok;
  if (!expect_backend.empty() && expect_backend != comm.backend_name()) {
    std::printf("rank %d: init() chose %s, expected %s\n", comm.rank(), comm.backend_name(),
                expect_backend.c_str());
    ok = false;
  }
  if (hierarchical) ok = check_hierarchical(comm, bench_bytes) && ok;
  if (stack) ok = check_stack(comm) && ok;
  if (comm.retunable() && comm.current_tuning().hierarchical_threshold != 0) {
    ok = check_retune(comm) && ok;
  }
  std::printf(
      "rank %d/%d on %s (node %d, local %d/%d) over %s: job sum %g (want %g), node group "
      "of %d sums %g (want %g): %s\n",
      comm.rank(), comm.size(), host, w.node_rank, w.local_rank, w.local_size, comm.backend_name(),
      v.front(), job_sum, node.size(), node_sum, expected_node, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string expect_error;
  bool hierarchical = false;
  std::size_t bench_bytes = 0;
  CLI::App app{"A rank's checks in a job across namespace-hosts (tests/multihost)"};
  app.add_option("--expect-error", expect_error, "init() must fail with a message containing this");
  std::string expect_backend;
  app.add_option("--expect-backend", expect_backend, "init() must choose this backend");
  app.add_flag("--hierarchical", hierarchical, "Check distcomm::hierarchical against the flat one");
  app.add_option("--bench", bench_bytes, "With --hierarchical: time both at this many bytes");
  bool stack = false, grouped_mismatch = false;
  app.add_flag("--stack", stack,
               "On a hierarchical communicator: fusion settings and integer avg as the flat path");
  app.add_flag("--grouped-mismatch", grouped_mismatch,
               "Grouped layouts that differ between hosts must give mismatch_error on every rank");
  CLI11_PARSE(app, argc, argv);
  try {
    return check(expect_error, expect_backend, hierarchical, bench_bytes, stack, grouped_mismatch);
  } catch (const std::exception& e) {
    std::printf("distcomm-multihost-check: %s\n", e.what());
    return 1;
  }
}
