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

}  // namespace

std::vector<int> agree_survivors(store& kv, const std::string& prefix, int rank, int size,
                                 std::chrono::duration<double> window) {
  const std::string members_key = prefix + "/members";
  std::vector<std::string> alive_keys;
  for (int r = 0; r < size; ++r) alive_keys.push_back(prefix + "/alive/" + std::to_string(r));
  kv.set(alive_keys[static_cast<std::size_t>(rank)], bytes{'1'});

  // Until every rank is here, the window is over, or a survivor has decided.
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(window);
  bool decided = false;
  for (auto pause = std::chrono::milliseconds(1);;
       pause = std::min(pause * 2, std::chrono::milliseconds(50))) {
    if (kv.check({members_key})) {
      decided = true;
      break;
    }
    if (kv.check(alive_keys) || std::chrono::steady_clock::now() >= until) break;
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
