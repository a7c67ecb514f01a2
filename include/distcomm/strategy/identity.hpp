// Every strategy's one identity, shared by the automatic table (DISTCOMM_ALGO, strategy/table.hpp),
// the cost model (sim/) and the registry of strategies by name (registry/strategies.hpp), with its
// names, declared once here. A strategy class says which it is: `static constexpr algorithm id`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

namespace distcomm {

enum class algorithm : std::uint8_t {
  ring,
  tree,
  parameter_server,
  native,
  recursive_doubling,
  automatic,
  hierarchical,
};

struct algorithm_info {
  algorithm id;
  const char* name;   // what programs print and accept first: "rd"
  const char* alias;  // accepted too, the strategy class's own name where it differs; "" if none
  const char* summary;
};

// In the order of help texts and of the README.
inline constexpr algorithm_info algorithm_infos[] = {
    {algorithm::automatic, "auto", "automatic",
     "picks one of the others per size from a table (DISTCOMM_ALGO)"},
    {algorithm::ring, "ring", "", "reduce-scatter then allgather around a ring; bandwidth-optimal"},
    {algorithm::tree, "tree", "", "reduce up a binary tree, broadcast down; few messages per rank"},
    {algorithm::recursive_doubling, "rd", "recursive_doubling",
     "log2(p) exchange rounds; the fewest latencies"},
    {algorithm::parameter_server, "ps", "parameter_server",
     "ranks push to DISTCOMM_PS_SERVERS servers and pull the sum"},
    {algorithm::native, "native", "",
     "the backend's own collectives (MPI_Allreduce, gloo, NCCL, shared memory)"},
    {algorithm::hierarchical, "hierarchical", "",
     "inside each host, then across hosts, from a threshold (init() across hosts)"},
};

constexpr const algorithm_info& info_of(algorithm a) {
  for (const algorithm_info& i : algorithm_infos) {
    if (i.id == a) return i;
  }
  return algorithm_infos[0];  // every value has an entry
}
// "rd": the name programs print and accept.
constexpr const char* name_of(algorithm a) { return info_of(a).name; }
// "recursive_doubling": the strategy class's own name (its alias, else its name).
constexpr const char* class_name_of(algorithm a) {
  return *info_of(a).alias != '\0' ? info_of(a).alias : info_of(a).name;
}
// The algorithm with this name or alias, if any.
inline std::optional<algorithm> algorithm_named(const std::string& name) {
  for (const algorithm_info& i : algorithm_infos) {
    if (name == i.name || (*i.alias != '\0' && name == i.alias)) return i.id;
  }
  return std::nullopt;
}

namespace detail {
// Strategy S says which it is (`static constexpr algorithm id`); an application's own may not.
template <class S, class = void>
struct has_algorithm_id : std::false_type {};
template <class S>
struct has_algorithm_id<S, std::void_t<decltype(S::id)>> : std::true_type {};
}  // namespace detail

}  // namespace distcomm
