// agree_survivors: after a collective failed (a peer lost, a deadline passed), the ranks of a
// communicator that are still alive agree through the job's store on who they are, so that they
// can go on with fewer ranks (communicator::shrink).
//
// Each survivor writes `<prefix>/alive/<rank>`, then waits until every rank of the old
// communicator has, or is known gone, or `window` has passed. A rank is known gone when the
// store removed what it held (hold_membership: its store connection closed),
// so a killed process costs the survivors the time the store takes to see it, not the window;
// on a store that cannot tell, and for a rank hung or cut off, the window. It then proposes the
// ranks it saw alive as the new membership with one compare-and-set of `<prefix>/members`: the
// first proposal wins, and every survivor reads the same list. A rank that arrives after the list
// was decided, and is not on it, gets excluded_error: it was presumed dead (stopped, then
// continued, or slower than the window) and must not join a second world. The store must outlive
// the lost ranks (docs/FAULTS.md, "The job's store").
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

// Says in `kv` that this process is `rank` of the group whose store `kv` is, for as long as it
// lives: `live/<rank>`, held (store::hold), then `live/<rank>/held` for good, once the hold is
// in place, so that the pair tells a rank gone from one that has not arrived. Every communicator
// that can shrink calls it when it is made. Nothing is said where the store cannot tell.
void hold_membership(store& kv, int rank);
// Whether `rank` said it was alive with hold_membership in `kv` and the store has removed it.
bool membership_gone(store& kv, int rank);

}  // namespace distcomm
