// Growing a running job: a process started for a rank the job lost, with the same job variables,
// joins the running ranks at one of their step boundaries instead of starting a job of its own
// (distcomm::grow(), init.hpp; docs/FAULTS.md, "Grow").
//
// Everything goes through the job's store, under `distcomm/join/`:
//   - every rank sets `distcomm/started` once every rank has met (bootstrap()). A process that
//     finds it set before it arrives comes late: the job runs without it, so it is a replacement.
//   - the replacement takes a ticket (a counter), writes its job rank under `ticket/<t>` and waits
//     for `answer/<t>`;
//   - at a step boundary the running ranks read the tickets (their rank 0 does, and tells the
//     others), decide who joins, and that rank answers each ticket: admitted as rank r of n in
//     grow number g, or refused with the reason. Every member of the grown job then connects anew
//     over the store's `distcomm/grow/<g>/` keys, ranked by job rank.
// The count of answered tickets lives in the store, so a new rank 0 (the old one was lost, the
// store lives elsewhere: docs/FAULTS.md) goes on where the last one stopped.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distcomm/rendezvous/bootstrap.hpp"
#include "distcomm/rendezvous/store.hpp"
#include "distcomm/rendezvous/world.hpp"

namespace distcomm::join {

// Every rank, once every rank has met.
void mark_started(store& kv);
// True when the job has started without this process (it comes as a replacement). Never waits.
bool started(store& kv);

// A process waiting to join: its ticket number and the job rank it was started as.
struct ticket {
  std::int64_t number = 0;
  int job_rank = 0;
};

// Where a joiner was admitted: grow number `grow`, rank `rank` of `size`.
struct admission {
  std::int64_t grow = 0;
  int rank = 0;
  int size = 0;
};

// The joiner: takes a ticket for `job_rank`; its answer comes under answer_key().
std::int64_t ask(store& kv, int job_rank);
std::string answer_key(std::int64_t ticket);
// The answer to `ticket`, once answer_key(ticket) is set; rendezvous_error with the running
// ranks' reason when it was refused.
admission answer(store& kv, std::int64_t ticket);

// Rank 0 of the running communicator: tickets not answered yet (two store reads); the ones among
// them whose job rank is written, in order; the answers; the next grow number.
std::int64_t waiting(store& kv);
std::vector<ticket> unanswered(store& kv);
void admit(store& kv, const ticket& t, const admission& a);
void refuse(store& kv, const ticket& t, const std::string& why);
std::int64_t next_grow(store& kv);

// The keys the members of grow number `grow` connect over.
std::shared_ptr<store> group_store(std::shared_ptr<store> root, std::int64_t grow);
// The launcher's world with this process as `rank` of `size`: the grown job's world.
world_info grown_world(const world_info& launched, int rank, int size);

// Whether this process joined a running job as a replacement (bootstrap() says so once admitted):
// its program's state must come from the running ranks.
void mark_replacement();
bool is_replacement() noexcept;

// The job this process bootstrapped (bootstrap() remembers the last): the launcher's world and
// the whole job's store; a null store before any bootstrap, for a job of one process, and once
// the store is gone (remember() keeps no reference: shared_bootstrap() keeps the job's).
void remember(const job& launched);
job launched();

}  // namespace distcomm::join
