// distcomm-multihost-check: what a rank of a job spread over several hosts checks, under
// tests/multihost/netns.sh. Through distcomm::init() (the backend from DISTCOMM_BACKEND):
//  * the world the launcher's variables describe: this rank's node, and ranks per node as said;
//  * an allreduce of the whole job, and of split_by_node()'s group: its members are exactly the
//    ranks that share this rank's host name (each namespace-host has its own);
//  * with --expect-error TEXT: init() must fail, its message containing TEXT (a refused
//    interface, shm across hosts).
// Exit status 0 when all holds; prints one line per rank either way.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "distcomm/distcomm.hpp"
#include "distcomm/init.hpp"
#include "distcomm/rendezvous/world.hpp"

namespace dc = distcomm;

namespace {

int check(const std::string& expect_error) {
  const dc::world_info w = dc::detect_world();
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  if (!expect_error.empty()) {
    try {
      dc::any_communicator comm = dc::init();
      std::printf("rank %d on %s: init() succeeded over %s, expected an error with '%s'\n",
                  w.rank, host, comm.backend_name(), expect_error.c_str());
      return 1;
    } catch (const std::exception& e) {
      const bool ok = std::strstr(e.what(), expect_error.c_str()) != nullptr;
      std::printf("rank %d on %s: %s: %s\n", w.rank, host, ok ? "refused as expected" : "WRONG ERROR",
                  e.what());
      return ok ? 0 : 1;
    }
  }
  dc::any_communicator comm = dc::init();
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
  std::printf("rank %d/%d on %s (node %d, local %d/%d) over %s: job sum %g (want %g), node group "
              "of %d sums %g (want %g): %s\n",
              comm.rank(), comm.size(), host, w.node_rank, w.local_rank, w.local_size,
              comm.backend_name(), v.front(), job_sum, node.size(), node_sum, expected_node,
              ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string expect_error;
  CLI::App app{"A rank's checks in a job across namespace-hosts (tests/multihost)"};
  app.add_option("--expect-error", expect_error, "init() must fail with a message containing this");
  CLI11_PARSE(app, argc, argv);
  try {
    return check(expect_error);
  } catch (const std::exception& e) {
    std::printf("distcomm-multihost-check: %s\n", e.what());
    return 1;
  }
}
