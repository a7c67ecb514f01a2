#include "distcomm/rendezvous/survivors.hpp"

#include <algorithm>
#include <sstream>
#include <thread>

#include "distcomm/log.hpp"

namespace distcomm {

namespace {

std::string encode(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}

std::vector<int> decode(const bytes& value, const std::string& key) {
  std::vector<int> ranks;
  std::string text(value.begin(), value.end());
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      ranks.push_back(std::stoi(item));
    } catch (const std::exception&) {
      throw rendezvous_error("shrink: " + key + " holds '" + text +
                             "', not a list of ranks (another program wrote it?)");
    }
  }
  return ranks;
}

std::string list(const std::vector<int>& ranks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    s += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  }
  return s;
}

// The ranks of `ranks` whose key (keys[i] for ranks[i]) is not set: one check() when all are, and
// a bisection otherwise, so a few absent among many cost a few requests each, not one per rank.
std::vector<int> absent(store& kv, const std::vector<std::string>& keys,
                        const std::vector<int>& ranks) {
  std::vector<int> out;
  std::vector<std::pair<std::size_t, std::size_t>> todo = {{0, keys.size()}};
  while (!todo.empty()) {
    const auto [lo, hi] = todo.back();
    todo.pop_back();
    if (lo >= hi) continue;
    const std::vector<std::string> part(keys.begin() + static_cast<std::ptrdiff_t>(lo),
                                        keys.begin() + static_cast<std::ptrdiff_t>(hi));
    if (kv.check(part)) continue;
    if (hi - lo == 1) {
      out.push_back(ranks[lo]);
      continue;
    }
    const std::size_t mid = lo + (hi - lo) / 2;
    todo.emplace_back(mid, hi);
    todo.emplace_back(lo, mid);
  }
  return out;
}

}  // namespace

void hold_membership(store& kv, int rank) {
  const std::string key = "live/" + std::to_string(rank);
  if (kv.hold(key, bytes{'1'})) kv.set(key + "/held", bytes{'1'});
}

bool membership_gone(store& kv, int rank) {
  const std::string key = "live/" + std::to_string(rank);
  return kv.check({key + "/held"}) && !kv.check({key});
}

std::vector<int> agree_survivors(store& kv, const std::string& prefix, int rank, int size,
                                 std::chrono::duration<double> window) {
  const std::string members_key = prefix + "/members";
  std::vector<std::string> alive_keys;
  for (int r = 0; r < size; ++r) alive_keys.push_back(prefix + "/alive/" + std::to_string(r));
  kv.set(alive_keys[static_cast<std::size_t>(rank)], bytes{'1'});

  // Until every rank is here or known gone, the window is over, or a survivor has decided.
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(window);
  const bool tells_gone = kv.check({"live/" + std::to_string(rank) + "/held"});
  std::vector<int> waited;  // not seen here yet, nor gone
  for (int r = 0; r < size; ++r) waited.push_back(r);
  const auto accounted_for = [&] {
    std::vector<std::string> keys;
    for (int r : waited) keys.push_back(prefix + "/alive/" + std::to_string(r));
    waited = absent(kv, keys, waited);
    if (waited.empty()) return true;
    if (!tells_gone) return false;
    // Every rank still waited for must have held its membership and lost it; one whose hold is
    // still there lives (it is only slow), one that never held may still come. The first such
    // ends the look: usually the first rank waited for.
    for (int r : waited) {
      if (!membership_gone(kv, r)) return false;
    }
    for (int r : waited) {
      log(log_level::info, "shrink: rank " + std::to_string(r) +
                               " is gone (the store saw its process end); not waiting for it");
    }
    return true;
  };
  bool decided = false;
  for (auto pause = std::chrono::milliseconds(1);;
       pause = std::min(pause * 2, std::chrono::milliseconds(50))) {
    if (kv.check({members_key})) {
      decided = true;
      break;
    }
    if (accounted_for() || std::chrono::steady_clock::now() >= until) break;
    std::this_thread::sleep_for(pause);
  }

  bytes agreed;
  if (decided) {
    agreed = kv.get(members_key);
  } else {
    std::vector<int> seen;
    for (int r = 0; r < size; ++r) {
      if (kv.check({alive_keys[static_cast<std::size_t>(r)]})) seen.push_back(r);
    }
    const std::string mine = encode(seen);
    agreed = kv.compare_set(members_key, bytes{}, bytes(mine.begin(), mine.end()));
  }
  std::vector<int> members = decode(agreed, members_key);
  if (std::find(members.begin(), members.end(), rank) == members.end()) {
    throw excluded_error("shrink: rank " + std::to_string(rank) +
                         " was presumed dead: the survivors (ranks " + list(members) +
                         " of the old " + std::to_string(size) +
                         ") went on without it before it arrived (it was stopped, hung or slower "
                         "than the shrink window); it must not rejoin this communicator (exit, "
                         "or join the job anew)");
  }
  log(log_level::info, "shrink: " + std::to_string(members.size()) + " of " + std::to_string(size) +
                           " ranks go on: " + list(members));
  return members;
}

}  // namespace distcomm
