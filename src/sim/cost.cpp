#include "distcomm/sim/cost.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "distcomm/core/error.hpp"

namespace distcomm::sim {

namespace {

int ceil_log2(int p) {
  int d = 0;
  while ((1 << d) < p) ++d;
  return d;
}

double segments(double bytes, std::size_t segment) {
  if (segment == 0 || bytes <= 0) return 1;
  return std::ceil(bytes / static_cast<double>(segment));
}

// The link a flat algorithm over `ranks` crosses at its slowest.
const link& flat_link(const machine& m, int ranks) {
  return ranks <= m.ranks_per_node ? m.intra : m.inter;
}

// The latency of one message of `bytes` over `l`: its alpha, and the rendezvous past the eager
// limit.
double alpha_of(const machine& m, const link& l, double bytes) {
  const bool rendezvous = m.eager_bytes != 0 && bytes > static_cast<double>(m.eager_bytes);
  return l.alpha + (rendezvous ? m.rendezvous_alpha : 0);
}

double ring(const machine& m, const link& l, double n, int p) {
  const double chunk = n / p;
  const double segs = segments(chunk, m.segment_bytes);
  return 2.0 * (p - 1) * (segs * alpha_of(m, l, chunk / segs) + chunk * l.beta) +
         (p - 1) * chunk * m.gamma;
}

// DistComm's tree (strategy/algorithms/tree.hpp): one binary tree in heap order, of depth
// floor(log2 p); the segments are reduced up to rank 0, then broadcast down, each phase pipelined.
// In a stage the busiest node takes a segment from each of its children, or sends one to each.
double tree(const machine& m, double n, int p) {
  const link& l = flat_link(m, p);
  const double segs = segments(n, m.segment_bytes);
  const double s = n / segs;
  const int depth = ceil_log2(p + 1) - 1;  // floor(log2 p)
  const double kids = std::min(2, p - 1);
  const double stages = depth + segs - 1;
  return 2.0 * stages * m.one_way * (alpha_of(m, l, s) + kids * s * l.beta) +
         stages * kids * s * m.gamma;
}

double recursive_doubling(const machine& m, double n, int p) {
  const int rounds = ceil_log2(p);
  double t = 0;
  for (int r = 0; r < rounds; ++r) {
    const int distance = 1 << r;
    if (distance < m.ranks_per_node) {
      t += alpha_of(m, m.intra, n) + n * m.intra.beta;
    } else {
      // Every rank of the node crosses its NIC in this round.
      t += alpha_of(m, m.inter, n) + n * m.inter.beta * std::min(m.ranks_per_node, p);
    }
    t += n * m.gamma;
  }
  if ((1 << rounds) != p) {
    // The ranks beyond the largest power of two fold in before and out after.
    const link& l = flat_link(m, p);
    t += 2 * (alpha_of(m, l, n) + n * l.beta) + n * m.gamma;
  }
  return t;
}

double parameter_server(const machine& m, double n, int p, int k) {
  const link& l = flat_link(m, p);
  const double share = n / k;
  const double busiest = std::max(n, (p - 1) * share * m.ps_oversubscription);
  // A server takes a message from each of the other ranks, a rank sends one to each server.
  const double messages = std::max(k, p - 1);
  return 2.0 * m.one_way * (messages * alpha_of(m, l, share) + busiest * l.beta) +
         (p - 1) * share * m.gamma;
}

double hierarchical(const machine& m, double n, int p) {
  const int local = m.ranks_per_node;
  const int nodes = p / local;
  const double piece = n / local;
  const double inside = (local - 1) * (alpha_of(m, m.intra, piece) + piece * m.intra.beta);
  // The node's `local` rings, each of n/L bytes, share its NIC.
  link shared = m.inter;
  shared.beta *= local;
  return 2.0 * inside + (local - 1) * piece * m.gamma + ring(m, shared, piece, nodes);
}

// The machine as `ranks` reducing `bytes` see it: buffers that fit the caches, and a node with
// more ranks than cores time-sharing them.
machine as_run(const machine& m, int ranks, std::size_t bytes) {
  machine out = m;
  if (m.cache_bytes != 0 && bytes <= m.cache_bytes) out.intra.beta = m.cached_beta;
  const int on_node = std::min(ranks, m.ranks_per_node);
  if (m.cores_per_node <= 0 || on_node <= m.cores_per_node) return out;
  const double share = static_cast<double>(on_node) / m.cores_per_node;
  out.intra.alpha += m.oversubscribed_alpha;
  out.inter.alpha += m.oversubscribed_alpha;
  out.intra.beta *= share;  // the cached one too
  out.gamma *= share;
  return out;
}

}  // namespace

algorithm modelled(const std::string& name) {
  const std::optional<algorithm> a = algorithm_named(name);
  if (a && *a == algorithm::native) return algorithm::ring;  // the backend's own: as a ring
  if (a && *a != algorithm::automatic) return *a;
  throw invalid_argument_error("the model knows no strategy '" + name +
                               "' (ring, tree, rd, ps, hierarchical, native as ring)");
}

std::vector<algorithm> algorithms_for(const machine& m, int ranks) {
  std::vector<algorithm> all = {algorithm::ring, algorithm::tree, algorithm::recursive_doubling,
                                algorithm::parameter_server};
  if (m.ranks_per_node > 1 && ranks > m.ranks_per_node && ranks % m.ranks_per_node == 0) {
    all.push_back(algorithm::hierarchical);
  }
  return all;
}

double allreduce_seconds(algorithm a, const machine& m, std::size_t bytes, int ranks,
                         int ps_servers) {
  if (ranks < 1) throw invalid_argument_error("the model needs at least 1 rank");
  if (m.ranks_per_node < 1) throw invalid_argument_error("ranks per node must be at least 1");
  if (ps_servers < 1 || ps_servers > ranks) {
    throw invalid_argument_error("a parameter server of " + std::to_string(ps_servers) +
                                 " servers among " + std::to_string(ranks) + " ranks");
  }
  if (ranks == 1 || bytes == 0) return 0;
  const auto n = static_cast<double>(bytes);
  if (a == algorithm::hierarchical) {
    const std::vector<algorithm> can = algorithms_for(m, ranks);
    if (std::find(can.begin(), can.end(), a) == can.end()) {
      throw invalid_argument_error("hierarchical needs several nodes of several ranks each (" +
                                   std::to_string(ranks) + " ranks, " +
                                   std::to_string(m.ranks_per_node) + " per node)");
    }
  }
  const machine run = as_run(m, ranks, bytes);
  double messages = 0;  // what the strategy's messages and combining take, the call aside
  switch (a) {
    case algorithm::ring:
      messages = ring(run, flat_link(run, ranks), n, ranks);
      break;
    case algorithm::tree:
      messages = tree(run, n, ranks);
      break;
    case algorithm::recursive_doubling:
      messages = recursive_doubling(run, n, ranks);
      break;
    case algorithm::parameter_server:
      messages = parameter_server(run, n, ranks, ps_servers);
      break;
    case algorithm::hierarchical:
      messages = hierarchical(run, n, ranks);
      break;
    case algorithm::native:  // the backend's own: as a ring
      messages = ring(run, flat_link(run, ranks), n, ranks);
      break;
    case algorithm::automatic:
      throw invalid_argument_error("the model costs a strategy, not automatic's choice of one");
  }
  return m.call_alpha + messages;
}

double bus_bandwidth(std::size_t bytes, int ranks, double seconds) {
  if (seconds <= 0 || ranks < 2) return 0;
  return static_cast<double>(bytes) / seconds * 2.0 * (ranks - 1) / ranks;
}

}  // namespace distcomm::sim
