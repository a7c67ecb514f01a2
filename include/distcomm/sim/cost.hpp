// The cost model (distcomm-sim, docs/SCALING.md): the time of one allreduce of each of DistComm's
// strategies from an alpha-beta-gamma description of the machine. A message of b bytes over a link
// costs alpha + b * beta seconds; combining b bytes costs b * gamma. Ranks sit ranks_per_node to a
// node: inside a node they talk over the intra link, across nodes over the inter link, and the
// ranks of one node share its inter link (its NIC) when they cross it at the same time.
//
// With p ranks, n bytes, L ranks per node, N = p / L nodes, s the segment size (m segments):
//   ring   2(p-1) (ceil(n/p/s) alpha + n/p beta) + (p-1) n/p gamma, over the slowest link
//          the ring crosses (inter once p > L; in node order each node's NIC carries one
//          neighbour's share per step);
//   tree   (one binary tree, reduced up then broadcast down, each pipelined)
//          2 (d + m - 1)(alpha + k s beta) + (d + m - 1) k s gamma, d = floor(log2 p), k =
//          min(2, p - 1) children of the busiest node;
//   rd     recursive doubling, log2 p rounds of alpha + n beta + n gamma; a round whose partner
//          is in another node uses the inter link, shared by the node's L ranks;
//   ps     k servers among the ranks: each rank pushes n/k to each server and pulls the sums,
//          2 (max(k, p-1) alpha + max(n, (p-1) n/k o) beta) + (p-1) n/k gamma: the busiest
//          end sends or takes that many messages and bytes, o the servers' oversubscription
//          (servers sharing a link);
//   hierarchical  reduce-scatter in the node (ring, intra), allreduce of n/L across the nodes
//          (ring, inter, the node's L rings sharing its NIC), allgather in the node.
// More ranks on a node than cores (machine::cores_per_node) add oversubscribed_alpha to every
// message and multiply the node's beta and gamma by ranks / cores; an allreduce of at most
// cache_bytes moves inside the node at cached_beta. Every allreduce adds call_alpha, and every
// message larger than eager_bytes rendezvous_alpha. The tree's and the parameter server's
// messages go one way (a stage's busiest end only takes, or only gives), the others' are
// exchanges (each rank sends and takes at once): a one-way message costs one_way times an
// exchange's alpha and beta. native is modelled as ring.
// Non-power-of-two rank counts for rd: the next power of two's rounds (the extra ranks fold in and
// out, counted as one more round each way).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "distcomm/strategy/identity.hpp"

namespace distcomm::sim {

// One kind of link: a message of b bytes costs alpha + b * beta seconds.
struct link {
  double alpha = 0;  // seconds per message
  double beta = 0;   // seconds per byte
};

struct machine {
  link inter;        // between nodes (the only link with ranks_per_node 1)
  link intra;        // inside a node
  double gamma = 0;  // seconds per byte combined
  int ranks_per_node = 1;
  double ps_oversubscription = 1;  // parameter servers sharing one link (1: a link each)
  std::size_t segment_bytes = 0;   // ring and tree segments; 0: unsegmented
  // Processes sharing cores: with more ranks on a node than cores_per_node (0: never), every
  // message waits for the scheduler (oversubscribed_alpha more), and copying and combining run
  // on ranks / cores of a core each (beta inside the node and gamma times that).
  int cores_per_node = 0;
  double oversubscribed_alpha = 0;
  // Allreduces of at most cache_bytes (0: no such size) move inside a node at cached_beta: their
  // buffers stay in the caches, where larger ones go to memory at intra.beta.
  std::size_t cache_bytes = 0;
  double cached_beta = 0;
  // Every allreduce costs call_alpha once, whatever it sends: the call itself and the ranks
  // agreeing on it before it runs (DISTCOMM_MISMATCH_CHECK's exchange).
  double call_alpha = 0;
  // Messages of more than eager_bytes (0: no limit) cost rendezvous_alpha more: the handshake of
  // a transport's rendezvous protocol, as Open MPI's above its eager limit.
  std::size_t eager_bytes = 0;
  double rendezvous_alpha = 0;
  // A message that goes one way while nothing comes back costs this times an exchange's alpha
  // and beta: 1 on a full-duplex link with the cores to drive both ways; less where the two
  // directions share something (the memory and the cores of a shared-memory transport).
  double one_way = 1;
};

// The strategies' one identity (strategy/identity.hpp; name_of() gives "ring", "rd", ...).
using distcomm::algorithm;

// The strategy a name or alias stands for in the model: native is costed as a ring, auto is not a
// strategy (the model picks); invalid_argument_error for those and for unknown names.
algorithm modelled(const std::string& name);
// Every algorithm the machine can run for `ranks`: hierarchical only across several nodes of
// several ranks each.
std::vector<algorithm> algorithms_for(const machine& m, int ranks);

// Seconds for one allreduce of `bytes` over `ranks` (>= 1; 1 costs nothing) with `ps_servers`
// servers for the parameter server (1 to ranks). invalid_argument_error for a bad argument, or
// hierarchical where algorithms_for() leaves it out.
double allreduce_seconds(algorithm a, const machine& m, std::size_t bytes, int ranks,
                         int ps_servers = 1);

// nccl-tests' bus bandwidth of an allreduce: bytes / seconds * 2 (p - 1) / p, bytes per second.
double bus_bandwidth(std::size_t bytes, int ranks, double seconds);

}  // namespace distcomm::sim
