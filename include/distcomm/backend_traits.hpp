// What a backend is and can do, declared once, in the backend's own header:
//   static constexpr backend_traits traits =
//       backend_traits("gloo", "gloo's TCP transport, meeting through the job's store")
//           .with(capability::processes | capability::store | capability::split | ...)
//           .default_rank(3);
// Everything else reads it: the registry and init()'s default rule (init/), distcomm-run, the
// torch binding, grow, shrink and hierarchical; the build reads the same lines
// (cmake/DistCommBackend.cmake) to know which tests and benchmarks a backend gets, and plugins
// declare the same through the C ABI (distcomm_backend_traits_v1.h). docs/EXTENDING.md.
#pragma once

#include <cstdint>

#include "distcomm/core/tensor_view.hpp"

namespace distcomm {

// What a backend can do, combined with |. The values are those of the plugin ABI's
// DISTCOMM_V1_CAN_* (plugin/abi.hpp checks it).
enum class capability : std::uint32_t {
  none = 0,
  processes = 1u << 0,    // its ranks are processes (else threads of one process)
  store = 1u << 1,        // its ranks meet through the job's key-value store
  mpi_world = 1u << 2,    // its world is MPI_COMM_WORLD: mpirun, mpiexec or srun start the ranks
  single_host = 1u << 3,  // every rank is on one host
  split = 1u << 4,        // split() and subset() make sub-communicators
  shrink = 1u << 5,       // shrink(): the survivors of a lost rank go on
  grow = 1u << 6,         // grow(): replacements for lost ranks join a running job
};

constexpr capability operator|(capability a, capability b) noexcept {
  return static_cast<capability>(static_cast<std::uint32_t>(a) | static_cast<std::uint32_t>(b));
}
constexpr capability operator&(capability a, capability b) noexcept {
  return static_cast<capability>(static_cast<std::uint32_t>(a) & static_cast<std::uint32_t>(b));
}

// Every capability with its name, in the order of the enum: for help texts, the build's lists
// and the tests that compare them.
struct capability_name {
  capability value;
  const char* name;
};
inline constexpr capability_name capability_names[] = {{capability::processes, "processes"},
                                                       {capability::store, "store"},
                                                       {capability::mpi_world, "mpi_world"},
                                                       {capability::single_host, "single_host"},
                                                       {capability::split, "split"},
                                                       {capability::shrink, "shrink"},
                                                       {capability::grow, "grow"}};

class backend_traits {
 public:
  constexpr backend_traits(const char* name, const char* summary) noexcept
      : name_(name), summary_(summary) {}

  // What programs print and accept ("gloo"), and one line saying what it is.
  constexpr const char* name() const noexcept { return name_; }
  constexpr const char* summary() const noexcept { return summary_; }
  // The memory its buffers are: host, or cuda (NCCL).
  constexpr memory_kind memory() const noexcept { return memory_; }
  constexpr capability capabilities() const noexcept { return caps_; }
  constexpr bool can(capability c) const noexcept { return (caps_ & c) == c; }
  // Where init()'s default rule ranks it among the backends able to run a job (lower first); 0:
  // never taken unless named. Why each backend has its rank: docs/PERFORMANCE.md, "Which backend
  // by default".
  constexpr int default_rank() const noexcept { return default_rank_; }
  // Whether it can be the level across hosts of a hierarchical job: ranks that are processes on
  // several hosts, moving host memory.
  constexpr bool across_hosts_level() const noexcept {
    return memory_ == memory_kind::host && can(capability::processes) &&
           !can(capability::single_host);
  }
  // The automatic table of the level across hosts of a hierarchical job, where this backend's
  // own table does not suit links between hosts; nullptr: its own.
  constexpr const char* across_hosts_algo() const noexcept { return across_hosts_algo_; }

  // The declaration's builders, each returning the traits with one more fact.
  constexpr backend_traits moves(memory_kind m) const noexcept {
    backend_traits t = *this;
    t.memory_ = m;
    return t;
  }
  constexpr backend_traits with(capability c) const noexcept {
    backend_traits t = *this;
    t.caps_ = t.caps_ | c;
    return t;
  }
  constexpr backend_traits default_rank(int rank) const noexcept {
    backend_traits t = *this;
    t.default_rank_ = rank;
    return t;
  }
  constexpr backend_traits across_hosts(const char* algo) const noexcept {
    backend_traits t = *this;
    t.across_hosts_algo_ = algo;
    return t;
  }

 private:
  const char* name_;
  const char* summary_;
  memory_kind memory_ = memory_kind::host;
  capability caps_ = capability::none;
  int default_rank_ = 0;
  const char* across_hosts_algo_ = nullptr;
};

}  // namespace distcomm
