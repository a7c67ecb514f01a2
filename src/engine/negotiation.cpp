// The engine's full exchange: see include/distcomm/engine/negotiation.hpp.
#include "distcomm/engine/negotiation.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "distcomm/core/error.hpp"
#include "distcomm/core/reduce_op.hpp"

namespace distcomm::engine_detail {

const char* to_string(tensor_kind k) noexcept {
  switch (k) {
    case tensor_kind::allreduce:
      return "allreduce";
    case tensor_kind::broadcast:
      return "broadcast";
    case tensor_kind::allgather:
      return "allgather";
  }
  return "(unknown)";
}

// ---- reports on the wire ----------------------------------------------------------------------
// "DCER" flags:u8 count:u32, then per entry: name_len:u32 name kind:u8 dtype:u8 count:u64 op:i32
// root:i32 age:f64. Native byte order: every rank of a job runs on the same architecture.

namespace {
constexpr char report_magic[4] = {'D', 'C', 'E', 'R'};

template <class T>
void append(std::vector<unsigned char>& out, const T& v) {
  const auto* p = reinterpret_cast<const unsigned char*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

struct reader {
  const unsigned char* p;
  std::size_t left;
  int rank;
  template <class T>
  T take() {
    T v{};
    need(sizeof(T));
    std::memcpy(&v, p, sizeof(T));
    p += sizeof(T);
    left -= sizeof(T);
    return v;
  }
  std::string take_string(std::size_t n) {
    need(n);
    std::string s(reinterpret_cast<const char*>(p), n);
    p += n;
    left -= n;
    return s;
  }
  void need(std::size_t n) const {
    if (n > left) {
      throw mismatch_error("engine: the report of rank " + std::to_string(rank) +
                           " is cut short: is every rank running the same engine?");
    }
  }
};
}  // namespace

std::vector<unsigned char> serialize(const rank_report& r) {
  std::vector<unsigned char> out(report_magic, report_magic + 4);
  append<std::uint8_t>(out, static_cast<std::uint8_t>((r.joined ? 1 : 0) | (r.shutdown ? 2 : 0) |
                                                      (r.blocked ? 4 : 0)));
  append<std::uint32_t>(out, static_cast<std::uint32_t>(r.pending.size()));
  for (const pending_request& e : r.pending) {
    append<std::uint32_t>(out, static_cast<std::uint32_t>(e.request.name.size()));
    out.insert(out.end(), e.request.name.begin(), e.request.name.end());
    append<std::uint8_t>(out, static_cast<std::uint8_t>(e.request.kind));
    append<std::uint8_t>(out, static_cast<std::uint8_t>(e.request.type));
    append<std::uint64_t>(out, e.request.count);
    append<std::int32_t>(out, e.request.op);
    append<std::int32_t>(out, e.request.root);
    append<double>(out, e.age_s);
  }
  return out;
}

rank_report deserialize(const unsigned char* data, std::size_t bytes, int rank) {
  reader in{data, bytes, rank};
  if (in.take_string(4) != std::string(report_magic, 4)) {
    throw mismatch_error("engine: rank " + std::to_string(rank) +
                         " sent something that is not an engine report: is every rank running "
                         "the same engine on this communicator?");
  }
  rank_report r;
  const auto flags = in.take<std::uint8_t>();
  r.joined = (flags & 1) != 0;
  r.shutdown = (flags & 2) != 0;
  r.blocked = (flags & 4) != 0;
  const auto n = in.take<std::uint32_t>();
  for (std::uint32_t i = 0; i < n; ++i) {
    pending_request e;
    e.request.name = in.take_string(in.take<std::uint32_t>());
    e.request.kind = static_cast<tensor_kind>(in.take<std::uint8_t>());
    e.request.type = static_cast<dtype>(in.take<std::uint8_t>());
    e.request.count = in.take<std::uint64_t>();
    e.request.op = in.take<std::int32_t>();
    e.request.root = in.take<std::int32_t>();
    e.age_s = in.take<double>();
    r.pending.push_back(std::move(e));
  }
  return r;
}

// ---- the cache --------------------------------------------------------------------------------

int response_cache::find(const tensor_request& r) const {
  const auto it = by_name_.find(r.name);
  if (it == by_name_.end()) return -1;
  return entries_[static_cast<std::size_t>(it->second)].same_call(r) ? it->second : -1;
}

int response_cache::put(const tensor_request& r) {
  const auto it = by_name_.find(r.name);
  if (it != by_name_.end()) {
    entries_[static_cast<std::size_t>(it->second)] = r;
    return it->second;
  }
  const int i = static_cast<int>(entries_.size());
  entries_.push_back(r);
  by_name_.emplace(r.name, i);
  return i;
}

// ---- the plan ---------------------------------------------------------------------------------

std::string describe_ranks(const std::vector<int>& ranks) {
  if (ranks.empty()) return "no rank";
  std::ostringstream os;
  os << (ranks.size() == 1 ? "rank " : "ranks ");
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i != 0) os << ", ";
    os << ranks[i];
    if (j >= i + 2) {
      os << '-' << ranks[j];
    } else if (j == i + 1) {
      os << ", " << ranks[j];
    }
    i = j + 1;
  }
  return os.str();
}

namespace {

std::string quoted(const std::string& name) { return "'" + name + "'"; }

std::string describe_value(const tensor_request& r, const char* field) {
  const std::string f = field;
  if (f == "collective") return to_string(r.kind);
  if (f == "dtype") return to_string(r.type);
  if (f == "count") return std::to_string(r.count);
  if (f == "op") return r.op < 0 ? "(none)" : to_string(static_cast<reduce_op>(r.op));
  return std::to_string(r.root);
}

// The first field on which the holders' calls differ, as "count: 10 on ranks 0, 2; 12 on rank 1".
std::string describe_difference(const std::vector<std::pair<int, const tensor_request*>>& calls) {
  for (const char* field : {"collective", "dtype", "count", "op", "root"}) {
    std::map<std::string, std::vector<int>> by_value;
    for (const auto& [rank, req] : calls) by_value[describe_value(*req, field)].push_back(rank);
    if (by_value.size() < 2) continue;
    std::string out = std::string(field) + ": ";
    bool first = true;
    for (const auto& [value, ranks] : by_value) {
      out += (first ? "" : "; ") + value + " on " + describe_ranks(ranks);
      first = false;
    }
    return out;
  }
  return "(no field differs)";
}

}  // namespace

plan negotiate(const std::vector<rank_report>& reports, response_cache& cache,
               const negotiation_settings& s) {
  plan out;
  const int p = static_cast<int>(reports.size());
  std::vector<int> active;
  bool all_blocked = p > 0;
  for (int r = 0; r < p; ++r) {
    const rank_report& rep = reports[static_cast<std::size_t>(r)];
    if (rep.joined) {
      out.joined.push_back(r);
    } else {
      active.push_back(r);
    }
    if (rep.shutdown && out.shutdown_rank < 0) out.shutdown_rank = r;
    if (!rep.blocked) all_blocked = false;
  }
  out.all_joined = active.empty();

  // Every name, with the ranks holding it and their calls, in first-seen order (by rank, then
  // submission): the order new entries join the cache in.
  struct holding {
    std::vector<std::pair<int, const tensor_request*>> calls;
    double age_s = 0;
  };
  std::vector<std::string> order;
  std::unordered_map<std::string, holding> by_name;
  for (int r = 0; r < p; ++r) {
    for (const pending_request& e : reports[static_cast<std::size_t>(r)].pending) {
      auto [it, fresh] = by_name.try_emplace(e.request.name);
      if (fresh) order.push_back(e.request.name);
      it->second.calls.emplace_back(r, &e.request);
      it->second.age_s = std::max(it->second.age_s, e.age_s);
    }
  }

  if (out.shutdown_rank >= 0) {
    // Nothing runs once a rank leaves; what is pending anywhere fails, naming it.
    if (!order.empty()) {
      failure f;
      f.what = failure::kind::shutdown;
      f.everything = true;
      f.names = order;
      std::ostringstream os;
      os << "engine: rank " << out.shutdown_rank
         << " shut its engine down (destroyed it) while tensors were pending:";
      for (const std::string& n : order) {
        std::vector<int> ranks;
        for (const auto& c : by_name[n].calls) ranks.push_back(c.first);
        os << ' ' << quoted(n) << " on " << describe_ranks(ranks) << ';';
      }
      os << " a rank with fewer steps than the others calls join() instead of leaving";
      f.message = os.str();
      out.failures.push_back(std::move(f));
    }
    return out;
  }

  std::vector<std::pair<int, std::string>> ready_new;  // (holder's position, name) to order by
  std::vector<std::string> partial;                    // names some active ranks lack
  for (const std::string& n : order) {
    const holding& h = by_name[n];
    // A rank that joined submits nothing until every rank has joined.
    std::vector<int> late;
    for (const auto& c : h.calls) {
      if (reports[static_cast<std::size_t>(c.first)].joined) late.push_back(c.first);
    }
    if (!late.empty()) {
      failure f;
      f.names = {n};
      f.message = "engine: tensor " + quoted(n) + " was submitted by " + describe_ranks(late) +
                  " after join(); a rank that joined submits nothing until every rank has "
                  "joined";
      out.failures.push_back(std::move(f));
      continue;
    }
    std::vector<int> missing;
    for (int r : active) {
      const bool has =
          std::any_of(h.calls.begin(), h.calls.end(), [&](const auto& c) { return c.first == r; });
      if (!has) missing.push_back(r);
    }
    if (!missing.empty()) {
      std::vector<int> holders;
      for (const auto& c : h.calls) holders.push_back(c.first);
      if (s.timeout_s > 0 && h.age_s >= s.timeout_s) {
        failure f;
        f.what = failure::kind::timeout;
        f.names = {n};
        std::ostringstream os;
        os << "engine: tensor " << quoted(n) << " was submitted by " << describe_ranks(holders)
           << " but not by " << describe_ranks(missing) << " within " << s.timeout_s
           << " s (DISTCOMM_TIMEOUT)";
        f.message = os.str();
        out.failures.push_back(std::move(f));
        continue;
      }
      if (s.stall_s > 0 && h.age_s >= s.stall_s) {
        out.stalls.push_back({n, h.age_s, holders, missing});
      }
      partial.push_back(n);
      continue;
    }
    bool same = true;
    for (const auto& c : h.calls) same = same && c.second->same_call(*h.calls.front().second);
    if (!same) {
      failure f;
      f.names = {n};
      f.message = "engine: ranks submitted tensor " + quoted(n) + " with different calls, " +
                  describe_difference(h.calls);
      out.failures.push_back(std::move(f));
      continue;
    }
    // Ordered by the submission order of the lowest active rank.
    const rank_report& lowest = reports[static_cast<std::size_t>(active.front())];
    std::size_t pos = 0;
    while (pos < lowest.pending.size() && lowest.pending[pos].request.name != n) ++pos;
    ready_new.emplace_back(static_cast<int>(pos), n);
  }

  std::sort(ready_new.begin(), ready_new.end());
  for (const auto& [pos, n] : ready_new) {
    out.ready.push_back(cache.put(*by_name[n].calls.front().second));
  }
  std::sort(out.ready.begin(), out.ready.end());

  // Every rank waits on the engine, nothing can run, and no rank submits anything more: the
  // ranks disagree on which tensors there are.
  if (all_blocked && out.ready.empty() && out.failures.empty() && !partial.empty() &&
      !out.all_joined) {
    failure f;
    f.everything = true;
    f.names = partial;
    std::ostringstream os;
    os << "engine: every rank waits, and no tensor is pending on every rank: ";
    bool first = true;
    for (const std::string& n : partial) {
      const holding& h = by_name[n];
      std::vector<int> holders, missing;
      for (const auto& c : h.calls) holders.push_back(c.first);
      for (int r : active) {
        if (std::find(holders.begin(), holders.end(), r) == holders.end()) missing.push_back(r);
      }
      os << (first ? "" : "; ") << quoted(n) << " was submitted by " << describe_ranks(holders)
         << ", never by " << describe_ranks(missing);
      first = false;
    }
    os << " (ranks must submit the same tensor names; one that runs out of data calls join())";
    f.message = os.str();
    out.failures.push_back(std::move(f));
    out.stalls.clear();
  }
  return out;
}

}  // namespace distcomm::engine_detail
