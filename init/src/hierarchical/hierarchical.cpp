#include "distcomm/hierarchical.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "distcomm/core/error.hpp"
#include "distcomm/plugin/store_plugin.hpp"
#include "distcomm/registry/backends.hpp"
#include "distcomm/rendezvous/host_names.hpp"
#include "distcomm/rendezvous/prefix_store.hpp"
#include "distcomm/rendezvous/store.hpp"
#include "distcomm/strategy/table.hpp"

namespace distcomm {

namespace {

// The level across hosts takes the automatic table its backend declares for links between
// hosts (backend_traits::across_hosts_algo), unless the settings' own DISTCOMM_ALGO or a named
// strategy say otherwise.
init_options across_options(const init_options& inter) {
  init_options o = inter;
  config cfg = o.settings ? *o.settings : config::from_env();
  const char* algo = traits_of(resolved_backend(o)).across_hosts_algo();
  if (algo != nullptr && o.strategy.empty() && cfg.strategy.empty() && cfg.algo.empty()) {
    cfg.algo = algo_table::parse(algo, "hierarchical's table across nodes");
    o.settings = cfg;
  }
  return o;
}

}  // namespace

hierarchical hierarchical::connect(const init_options& intra, const init_options& inter,
                                   const job* given) {
  const config cfg = intra.settings ? *intra.settings : config::from_env();
  plugin::enable_store_plugins();
  const job j = given ? *given : shared_bootstrap(cfg);
  const int rank = j.world.rank;
  const int size = j.world.size;
  std::string prefix = "distcomm/hierarchical/0";
  std::vector<std::string> hosts(1, this_host_name());
  if (size > 1) {
    // The n-th hierarchical of every rank gets the same keys.
    prefix = "distcomm/hierarchical/" +
             std::to_string(j.kv->add("distcomm/hierarchical/count/" + std::to_string(rank), 1));
    hosts = host_names(*j.kv, prefix + "/host/", rank, size, cfg.timeout);
  }
  // Nodes in the order of their first rank; local ranks in rank order.
  std::vector<std::string> nodes;
  std::vector<int> per_node;
  int node = 0, local_rank = 0;
  for (int q = 0; q < size; ++q) {
    const std::string& h = hosts[static_cast<std::size_t>(q)];
    const auto at = std::find(nodes.begin(), nodes.end(), h);
    const int n = static_cast<int>(at - nodes.begin());
    if (at == nodes.end()) {
      nodes.push_back(h);
      per_node.push_back(0);
    }
    if (q == rank) {
      node = n;
      local_rank = per_node[static_cast<std::size_t>(n)];
    }
    ++per_node[static_cast<std::size_t>(n)];
  }
  const int local_size = per_node[static_cast<std::size_t>(node)];
  for (std::size_t n = 0; n < nodes.size(); ++n) {
    if (per_node[n] != local_size) {
      throw invalid_argument_error(
          "hierarchical: node " + nodes[n] + " runs " + std::to_string(per_node[n]) +
          " rank(s) and node " + nodes[static_cast<std::size_t>(node)] + " runs " +
          std::to_string(local_size) +
          "; a hierarchical allreduce needs the same number on every node (use a flat one)");
    }
  }
  // The node's ranks, and the ranks of this local rank on every node: worlds of their own, each
  // with keys of its own in the job's store.
  job on_node;
  on_node.world.rank = local_rank;
  on_node.world.size = local_size;
  on_node.world.local_rank = local_rank;
  on_node.world.local_size = local_size;
  on_node.world.launcher = j.world.launcher;
  on_node.kv = j.kv ? std::make_shared<prefix_store>(prefix + "/node/" + std::to_string(node), j.kv)
                    : nullptr;
  job across;
  across.world.rank = node;
  across.world.size = static_cast<int>(nodes.size());
  across.world.node_rank = node;
  across.world.launcher = j.world.launcher;
  across.kv =
      j.kv ? std::make_shared<prefix_store>(prefix + "/local/" + std::to_string(local_rank), j.kv)
           : nullptr;
  // MPI connects only MPI_COMM_WORLD: its groups are split from it (MPI_Comm_split), with the
  // same members in the same order.
  const auto connect_group = [&](const job& group, const init_options& o, int color, int key) {
    if (!traits_of(resolved_backend(o)).can(capability::mpi_world)) return init(group, o);
    any_communicator world = init(j, o);
    std::optional<any_communicator> part = world.split(color, key);
    if (!part) throw error("hierarchical: splitting the MPI world gave this rank no group");
    return std::move(*part);
  };
  any_communicator within = connect_group(on_node, intra, node, local_rank);
  any_communicator between = connect_group(across, across_options(inter), local_rank, node);
  return hierarchical(std::move(within), std::move(between));
}

hierarchical::hierarchical(any_communicator intra, any_communicator inter)
    : intra_(std::move(intra)),
      inter_(std::move(inter)),
      name_(std::string(intra_.backend_name()) + "+" + inter_.backend_name()) {}

void hierarchical::allreduce(void* data, std::size_t count, dtype t, reduce_op op,
                             deadline until) {
  // The flat communicator's call: agreed on every rank of the job, so each level's calls are the
  // same on every rank of that level, and they end by the call's deadline.
  run(tensor_view{data, count, t}, op, until);
}

void hierarchical::allreduce(tensor_view data, reduce_op op) { run(data, op, std::nullopt); }

void hierarchical::retune(const config& was, const config& now) {
  if (!started_) started_.emplace(was, inter_.current_tuning());
  const config& flat_start = started_->first;
  const tuning& own = started_->second;
  // A setting left where flat started keeps the level's own value; one moved goes to both.
  const auto follow = [](std::size_t to, std::size_t flat_was, std::size_t own_value) {
    return to == flat_was ? own_value : to;
  };
  tuning across = own;  // its table included
  across.fusion_threshold =
      follow(now.fusion_threshold, flat_start.fusion_threshold, own.fusion_threshold);
  across.fusion_cutoff = follow(now.fusion_cutoff.value_or(0), flat_start.fusion_cutoff.value_or(0),
                                own.fusion_cutoff);
  across.segment_bytes = follow(now.segment_bytes.value_or(0), flat_start.segment_bytes.value_or(0),
                                own.segment_bytes);
  if (!(across == inter_.current_tuning())) inter_.retune(across);
}

std::size_t hierarchical::agree(std::size_t threshold) {
  // The largest and the smallest asked for: max of (t, -t), over the host, then across hosts.
  std::int64_t range[2] = {static_cast<std::int64_t>(threshold),
                           -static_cast<std::int64_t>(threshold)};
  intra_.allreduce(tensor_view{range, 2, dtype::i64}, reduce_op::max);
  inter_.allreduce(tensor_view{range, 2, dtype::i64}, reduce_op::max);
  if (range[0] != -range[1]) {
    throw mismatch_error("retune: the ranks asked for different hierarchical thresholds (" +
                         format_bytes(static_cast<std::size_t>(-range[1])) + " to " +
                         format_bytes(static_cast<std::size_t>(range[0])) +
                         "); every rank must retune to the same settings");
  }
  return threshold;
}

void hierarchical::run(tensor_view data, reduce_op op, std::optional<deadline> within) {
  // Under an outer call: each level call without an agreement of its own, by its deadline.
  const auto level = [within](any_communicator& c) -> any_communicator& {
    if (within) c.next_call_agreed(*within);
    return c;
  };
  const std::size_t es = dtype_size(data.type);
  const std::size_t local = static_cast<std::size_t>(intra_.size());
  const std::size_t block = data.count / local;
  const std::size_t even = block * local;
  auto* bytes_of = static_cast<unsigned char*>(data.data);
  if (block != 0) {
    slice_.resize(block * es);
    const tensor_view head{data.data, even, data.type};
    const tensor_view mine{slice_.data(), block, data.type};
    level(intra_).reduce_scatter(head, mine, op);
    level(inter_).allreduce(mine, op);
    level(intra_).allgather(mine, head);
  }
  if (even < data.count) {
    const tensor_view tail{bytes_of + even * es, data.count - even, data.type};
    level(intra_).allreduce(tail, op);
    level(inter_).allreduce(tail, op);
  }
}

}  // namespace distcomm
