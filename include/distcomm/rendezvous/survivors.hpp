// agree_survivors: after a collective failed (a peer lost, a deadline passed), the ranks of a
// communicator that are still alive agree through the job's store on who they are, so that they
// can go on with fewer ranks (communicator::shrink).
//
// Each survivor writes `<prefix>/alive/<rank>`, then waits until every rank of the old
// communicator has, or `window` has passed. It then proposes the ranks it saw alive as the new
// membership with one compare-and-set of `<prefix>/members`: the first proposal wins, and every
// survivor reads the same list. A rank that arrives after the list was decided, and is not on it,
// gets excluded_error: it was presumed dead (stopped, then continued, or slower than the window)
// and must not join a second world. The store must outlive the lost ranks: with DistComm's own
// store that is rank 0's process (docs/FAULTS.md, "Shrink").
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "distcomm/core/error.hpp"
#include "distcomm/rendezvous/store.hpp"

namespace distcomm {

// The ranks of `size` that are alive, in order, as every survivor reads them; throws
// excluded_error when `rank` is not among them, timeout_error when the store does not answer
// within its timeout.
std::vector<int> agree_survivors(store& kv, const std::string& prefix, int rank, int size,
                                 std::chrono::duration<double> window);

}  // namespace distcomm
