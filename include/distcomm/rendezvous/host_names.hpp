// Which ranks share a host, learned through a store: every rank publishes its host name and reads
// everyone's. distcomm::hierarchical and the torch.distributed binding group ranks by it.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "distcomm/rendezvous/store.hpp"

namespace distcomm {

// This host's name (gethostname), "unknown" when it cannot be read.
std::string this_host_name();

// Every rank's host name, in rank order: this rank's is set under `prefix` + its rank, then every
// rank's is waited for (timeout_error after `timeout`, naming the keys missing). Collective over
// the `size` ranks sharing `kv`.
std::vector<std::string> host_names(store& kv, const std::string& prefix, int rank, int size,
                                    std::chrono::duration<double> timeout);

}  // namespace distcomm
