#include "distcomm/rendezvous/join.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <sstream>

#include "distcomm/core/error.hpp"
#include "distcomm/rendezvous/prefix_store.hpp"

namespace distcomm::join {

namespace {

const std::string started_key = "distcomm/started";
const std::string tickets_key = "distcomm/join/tickets";
const std::string grows_key = "distcomm/join/grows";

std::string ticket_key(std::int64_t t) { return "distcomm/join/ticket/" + std::to_string(t); }

bytes text(const std::string& s) { return bytes(s.begin(), s.end()); }
std::string text(const bytes& b) { return std::string(b.begin(), b.end()); }

// The last ticket answered, kept in the store: the rank that answers (rank 0 of the running
// communicator) changes when a job loses its rank 0. One rank answers at a time, in ticket order.
const std::string answered_key = "distcomm/join/answered";

std::int64_t answered(store& kv) { return kv.add(answered_key, 0); }

void answered_up_to(store& kv, std::int64_t t) {
  const std::int64_t seen = answered(kv);
  if (t > seen) kv.add(answered_key, t - seen);
}

// Not owned: the job's store lives as long as its owner keeps it (shared_bootstrap(): the life of
// the process), and a store a program dropped is not kept past its time.
std::mutex launched_mu;
world_info launched_world;
std::weak_ptr<store> launched_kv;
// Set once this process was admitted to a running job.
std::atomic<bool> replacement{false};

}  // namespace

void mark_started(store& kv) { kv.set(started_key, text("1")); }

bool started(store& kv) { return kv.check({started_key}); }

std::int64_t ask(store& kv, int job_rank) {
  const std::int64_t t = kv.add(tickets_key, 1);
  kv.set(ticket_key(t), text(std::to_string(job_rank)));
  return t;
}

std::string answer_key(std::int64_t ticket) {
  return "distcomm/join/answer/" + std::to_string(ticket);
}

admission answer(store& kv, std::int64_t ticket) {
  const std::string said = text(kv.get(answer_key(ticket)));
  std::istringstream in(said);
  std::string verdict;
  in >> verdict;
  admission a;
  if (verdict == "admitted" && in >> a.grow >> a.rank >> a.size && a.size > 0 && a.rank >= 0 &&
      a.rank < a.size) {
    return a;
  }
  if (verdict == "refused") {
    std::string why;
    std::getline(in >> std::ws, why);
    throw rendezvous_error("join: the running ranks refused this process: " + why);
  }
  throw rendezvous_error("join: " + answer_key(ticket) + " holds '" + said +
                         "', not an answer (another program wrote it?)");
}

std::int64_t waiting(store& kv) {
  return std::max<std::int64_t>(0, kv.add(tickets_key, 0) - answered(kv));
}

std::vector<ticket> unanswered(store& kv) {
  std::vector<ticket> out;
  const std::int64_t last = kv.add(tickets_key, 0);
  // In ticket order, up to the first one whose job rank is not written yet (taken a moment ago).
  for (std::int64_t t = answered(kv) + 1; t <= last && kv.check({ticket_key(t)}); ++t) {
    const std::string r = text(kv.get(ticket_key(t)));
    ticket k{t, -1};
    try {
      k.job_rank = std::stoi(r);
    } catch (const std::exception&) {
      refuse(kv, k, "its ticket holds '" + r + "', not a rank");
      continue;
    }
    out.push_back(k);
  }
  return out;
}

void admit(store& kv, const ticket& t, const admission& a) {
  kv.set(answer_key(t.number), text("admitted " + std::to_string(a.grow) + " " +
                                    std::to_string(a.rank) + " " + std::to_string(a.size)));
  answered_up_to(kv, t.number);
}

void refuse(store& kv, const ticket& t, const std::string& why) {
  kv.set(answer_key(t.number), text("refused " + why));
  answered_up_to(kv, t.number);
}

std::int64_t next_grow(store& kv) { return kv.add(grows_key, 1) - 1; }

std::shared_ptr<store> group_store(std::shared_ptr<store> root, std::int64_t grow) {
  return std::make_shared<prefix_store>("distcomm/grow/" + std::to_string(grow), std::move(root));
}

world_info grown_world(const world_info& launched, int rank, int size) {
  world_info w = launched;
  if (launched.single_node()) {
    w.local_rank = rank;
    w.local_size = size;
  }
  w.rank = rank;
  w.size = size;
  return w;
}

void mark_replacement() { replacement = true; }
bool is_replacement() noexcept { return replacement; }

void remember(const job& j) {
  const std::lock_guard<std::mutex> lock(launched_mu);
  launched_world = j.world;
  launched_kv = j.kv;
}

job launched() {
  const std::lock_guard<std::mutex> lock(launched_mu);
  return job{launched_world, launched_kv.lock()};
}

}  // namespace distcomm::join
