#include "verdict.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>

namespace distcomm::trace_tool {

namespace {

using json = nlohmann::json;

// One collective as a rank recorded it.
struct call {
  std::uint64_t seq = 0;
  std::string what;
  std::string signature;  // what every rank must agree on
  std::string text;       // "allreduce (f32 x 1048576, sum)"
  std::string state;      // posted, started, completed, failed
  std::string error, error_kind;
  std::int64_t started_us = 0, ended_us = 0;
};

call call_of(const json& e) {
  call c;
  c.seq = e.at("seq").get<std::uint64_t>();
  c.what = e.at("collective").get<std::string>();
  std::string args;
  const auto add = [&](const std::string& a) { args += (args.empty() ? "" : ", ") + a; };
  if (e.contains("tensors")) add(std::to_string(e["tensors"].get<long>()) + " tensors");
  if (e.contains("dtype")) {
    add(e["dtype"].get<std::string>() + " x " + std::to_string(e.value("count", 0UL)));
  } else if (e.value("count", 0UL) != 0) {
    add(std::to_string(e.value("count", 0UL)) + " elements");
  }
  if (e.contains("op")) add(e["op"].get<std::string>());
  if (e.contains("root")) add("root " + std::to_string(e["root"].get<int>()));
  c.text = c.what + (args.empty() ? "" : " (" + args + ")");
  c.signature = c.text;
  c.state = e.value("state", "");
  c.error = e.value("error", "");
  c.error_kind = e.value("error_kind", "");
  c.started_us = e.value("started_us", std::int64_t{0});
  c.ended_us = e.value("ended_us", std::int64_t{0});
  return c;
}

// One rank's record of one communicator.
struct member {
  int job_rank = -1;
  const dump* from = nullptr;
  std::map<std::uint64_t, call> calls;
  std::optional<std::uint64_t> first, last;  // kept
};

struct communicator {
  std::string name, backend, strategy;
  std::vector<int> ranks;         // job ranks, communicator order
  std::map<int, member> members;  // by job rank, those with a record
};

std::string list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    s += (i == 0 ? "" : (i + 1 == ranks.size() ? " and " : ", ")) + std::to_string(ranks[i]);
  }
  return s;
}

std::string seconds(std::int64_t us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(us) / 1e6);
  return buf;
}

// A member that entered a collective this long after the first one did came late to it.
constexpr std::int64_t late_us = 1000000;

// When the first member entered collective `seq` (0: none did), and the members that came late
// to it with how late, latest first.
std::pair<std::int64_t, std::vector<std::pair<int, std::int64_t>>> late_to(const communicator& cm,
                                                                           std::uint64_t seq) {
  std::int64_t first = 0;
  for (const auto& mk : cm.members) {
    const auto it = mk.second.calls.find(seq);
    if (it != mk.second.calls.end() && it->second.started_us != 0) {
      first = first == 0 ? it->second.started_us : std::min(first, it->second.started_us);
    }
  }
  std::vector<std::pair<int, std::int64_t>> late;
  for (const auto& mk : cm.members) {
    const auto it = mk.second.calls.find(seq);
    if (first != 0 && it != mk.second.calls.end() && it->second.started_us - first >= late_us) {
      late.emplace_back(mk.second.job_rank, it->second.started_us - first);
    }
  }
  std::sort(late.begin(), late.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });
  return {first, late};
}

std::vector<int> ranks_of(const std::vector<std::pair<int, std::int64_t>>& late) {
  std::vector<int> ranks;
  for (const auto& l : late) ranks.push_back(l.first);
  return ranks;
}

// "1st", "2nd", "21st", ..., as the errors count collectives.
std::string ordinal(std::uint64_t n) {
  const char* suffix = "th";
  if (n % 100 < 11 || n % 100 > 13) {
    suffix = n % 10 == 1 ? "st" : n % 10 == 2 ? "nd" : n % 10 == 3 ? "rd" : "th";
  }
  return std::to_string(n) + suffix;
}

std::string shorten(const std::string& s, std::size_t n = 160) {
  return s.size() <= n ? s : s.substr(0, n) + "...";
}

}  // namespace

dump read_dump(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read '" + path + "'");
  json j;
  try {
    in >> j;
  } catch (const json::exception& e) {
    throw std::runtime_error("'" + path + "' is not JSON: " + e.what());
  }
  if (!j.is_object() || j.value("format", "") != "distcomm-flight-recorder/1" ||
      !j.contains("communicators") || !j["communicators"].is_array()) {
    throw std::runtime_error("'" + path +
                             "' is not a DistComm flight recorder dump (format "
                             "distcomm-flight-recorder/1)");
  }
  dump d;
  d.path = path;
  d.rank = j.value("rank", -1);
  d.host = j.value("host", "");
  d.pid = j.value("pid", 0L);
  d.reason = j.value("reason", "");
  d.dumped_us = j.value("dumped_us", std::int64_t{0});
  d.communicators = j["communicators"];
  return d;
}

std::vector<dump> read_dumps(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const std::string& p : paths) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) throw std::runtime_error("'" + p + "' does not exist");
    if (!S_ISDIR(st.st_mode)) {
      files.push_back(p);
      continue;
    }
    DIR* dir = ::opendir(p.c_str());
    if (dir == nullptr) throw std::runtime_error("cannot list '" + p + "'");
    std::vector<std::string> found;
    while (const dirent* e = ::readdir(dir)) {
      const std::string name = e->d_name;
      if (name.rfind("distcomm-flight.", 0) == 0 && name.size() > 5 &&
          name.compare(name.size() - 5, 5, ".json") == 0) {
        found.push_back(p + "/" + name);
      }
    }
    ::closedir(dir);
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  std::map<int, dump> by_rank;
  for (const std::string& f : files) {
    dump d = read_dump(f);
    auto it = by_rank.find(d.rank);
    if (it == by_rank.end() || it->second.dumped_us < d.dumped_us) by_rank[d.rank] = std::move(d);
  }
  std::vector<dump> out;
  for (auto& kv : by_rank) out.push_back(std::move(kv.second));
  return out;
}

std::string analyse(const std::vector<dump>& dumps, int expected_ranks) {
  std::ostringstream out;
  if (dumps.empty()) return "no flight recorder dumps found (is DISTCOMM_DUMP_DIR set?)\n";

  std::map<std::string, communicator> comms;
  for (const dump& d : dumps) {
    for (const json& c : d.communicators) {
      communicator& cm = comms[c.value("name", "?")];
      cm.name = c.value("name", "?");
      cm.backend = c.value("backend", "");
      cm.strategy = c.value("strategy", "");
      if (cm.ranks.empty()) cm.ranks = c.value("ranks", std::vector<int>{});
      member& m = cm.members[d.rank];
      m.job_rank = d.rank;
      m.from = &d;
      for (const json& e : c.value("entries", json::array())) {
        call k = call_of(e);
        const std::uint64_t seq = k.seq;
        m.calls[seq] = std::move(k);
        if (!m.first || seq < *m.first) m.first = seq;
        if (!m.last || seq > *m.last) m.last = seq;
      }
    }
  }

  // Who should have written a dump.
  int expected = expected_ranks;
  for (const auto& kv : comms)
    expected = std::max(expected, static_cast<int>(kv.second.ranks.size()));
  std::set<int> have;
  for (const dump& d : dumps) have.insert(d.rank);
  std::vector<int> missing;
  for (int r = 0; r < expected; ++r) {
    if (!have.count(r)) missing.push_back(r);
  }
  std::vector<int> present(have.begin(), have.end());
  out << "dumps from " << list(present) << " of " << expected << " ranks";
  if (!missing.empty()) {
    out << "; no dump from " << list(missing)
        << " (killed, stopped, or it never failed nor got SIGUSR1)";
  }
  out << "\n";

  bool any = false;
  for (const auto& kv : comms) {
    const communicator& cm = kv.second;
    std::uint64_t lo = 0, hi = 0;
    bool some = false;
    for (const auto& mk : cm.members) {
      const member& m = mk.second;
      if (!m.first) continue;
      lo = some ? std::max(lo, *m.first) : *m.first;
      hi = some ? std::max(hi, *m.last) : *m.last;
      some = true;
    }
    if (!some) continue;
    // The first collective not completed alike by every member with a record.
    std::optional<std::uint64_t> at;
    for (std::uint64_t s = lo; s <= hi && !at; ++s) {
      std::set<std::string> sigs;
      for (const auto& mk : cm.members) {
        const auto it = mk.second.calls.find(s);
        if (it == mk.second.calls.end() || it->second.state != "completed") {
          at = s;
          break;
        }
        sigs.insert(it->second.signature);
      }
      if (!at && sigs.size() > 1) at = s;
    }
    const std::string title = "communicator " + cm.name + " (" + std::to_string(cm.ranks.size()) +
                              " ranks, " + cm.backend + ", " + cm.strategy + ")";
    if (!at) {
      out << title << ": every rank with a record completed collectives #" << lo << "-#" << hi
          << " alike\n";
      continue;
    }
    any = true;
    const std::uint64_t s = *at;
    out << title << ": the ranks diverged at collective #" << s << " (its " << ordinal(s + 1)
        << ")\n";

    // What each member did there.
    std::map<std::string, std::vector<int>> by_call;  // signature -> ranks
    std::map<std::string, std::vector<int>> by_line;  // what to print -> ranks
    // Ranks still inside the call are one line whatever the moment each was dumped: the line
    // holds `inside_mark` where the span of their times inside goes (shortest, longest).
    const std::string inside_mark = "\x01";
    std::map<std::string, std::pair<std::int64_t, std::int64_t>> inside_for;
    std::vector<int> not_reached, still_inside, failed_timeout, failed_lost, completed;
    const auto [first_start, late] = late_to(cm, s);
    for (const auto& mk : cm.members) {
      const member& m = mk.second;
      const int r = m.job_rank;
      const auto it = m.calls.find(s);
      if (it == m.calls.end()) {
        not_reached.push_back(r);
        std::string line = "never reached it";
        if (m.last && *m.last < s) {
          const call& prev = m.calls.at(*m.last);
          line +=
              "; its last was #" + std::to_string(prev.seq) + " " + prev.text + ", " + prev.state;
        } else if (!m.last) {
          line += "; no collective recorded";
        }
        line += " (dumped: " + shorten(m.from->reason, 80) + ")";
        by_line[line].push_back(r);
        continue;
      }
      const call& c = it->second;
      by_call[c.signature].push_back(r);
      std::string line = c.text + ", " + c.state;
      if (c.state == "started" || c.state == "posted") {
        still_inside.push_back(r);
        line += " (still inside it when dumped, for " + inside_mark + ")";
      } else if (c.state == "failed") {
        if (c.error_kind == "timeout") failed_timeout.push_back(r);
        if (c.error_kind == "peer_lost") failed_lost.push_back(r);
        line += " after " + seconds(c.ended_us - c.started_us) + ": " + shorten(c.error);
      }
      if (c.state == "completed") completed.push_back(r);
      if (first_start != 0 && c.started_us - first_start >= late_us) {
        line += "; entered it " + seconds(c.started_us - first_start) + " after the first rank";
      }
      if (c.state == "started" || c.state == "posted") {
        const std::int64_t inside = m.from->dumped_us - c.started_us;
        const auto [span, fresh] = inside_for.emplace(line, std::make_pair(inside, inside));
        if (!fresh) {
          span->second.first = std::min(span->second.first, inside);
          span->second.second = std::max(span->second.second, inside);
        }
      }
      by_line[line].push_back(r);
    }
    for (int r : cm.ranks) {
      if (!cm.members.count(r)) {
        by_line[std::string(have.count(r) ? "its dump has no record of this communicator"
                                          : "no dump")]
            .push_back(r);
      }
    }
    for (const auto& l : by_line) {
      std::string line = l.first;
      const auto span = inside_for.find(line);
      if (span != inside_for.end()) {
        const std::string shortest = seconds(span->second.first);
        const std::string longest = seconds(span->second.second);
        line.replace(line.find(inside_mark), inside_mark.size(),
                     shortest == longest ? shortest : shortest + " to " + longest);
      }
      out << "  " << list(l.second) << ": " << line << "\n";
    }

    // The verdict.
    std::vector<int> absent;  // members without a record at all
    for (int r : cm.ranks) {
      if (!cm.members.count(r)) absent.push_back(r);
    }
    const std::string where = "#" + std::to_string(s);
    if (by_call.size() > 1) {
      // The smallest group is the odd one out.
      auto odd = std::min_element(by_call.begin(), by_call.end(), [](const auto& a, const auto& b) {
        return a.second.size() < b.second.size();
      });
      auto rest = std::max_element(
          by_call.begin(), by_call.end(),
          [](const auto& a, const auto& b) { return a.second.size() < b.second.size(); });
      out << "verdict: mismatched call at " << where << ": " << list(odd->second) << " called "
          << odd->first << " where " << list(rest->second) << " called " << rest->first
          << " (a skipped or extra collective, or other arguments, on "
          << (odd->second.size() == 1 ? "that rank" : "those ranks") << ")\n";
    } else if (!not_reached.empty()) {
      out << "verdict: " << list(not_reached) << " never reached " << where << ", which the others "
          << "entered: " << (not_reached.size() == 1 ? "it was" : "they were")
          << " elsewhere (a collective skipped, a longer compute step, or a hang outside "
             "DistComm)\n";
    } else if (!late.empty()) {
      out << "verdict: " << list(ranks_of(late)) << " came late to " << where << " ("
          << seconds(late.front().second) << " after the first rank)";
      if (!failed_timeout.empty()) out << "; the others timed out waiting (DISTCOMM_TIMEOUT)";
      out << "\n";
    } else if (const auto next = late_to(cm, s + 1).second;
               !completed.empty() && !(failed_timeout.empty() && failed_lost.empty()) &&
               !next.empty()) {
      // A rank stopped just after a collective may still hold its last messages of it (a
      // transport's thread sends them after the call returned): the ranks waiting for them time
      // out there (or learn it from the first rank that timed out, whichever comes first), while
      // those it had already served went on to the next and waited for it.
      std::vector<int> waiting = failed_timeout;
      waiting.insert(waiting.end(), failed_lost.begin(), failed_lost.end());
      std::sort(waiting.begin(), waiting.end());
      out << "verdict: " << list(ranks_of(next)) << " came late to #" << s + 1 << " ("
          << seconds(next.front().second) << " after the first rank); the others timed out "
          << "waiting (DISTCOMM_TIMEOUT), " << list(waiting) << " in " << where
          << " for what it had not sent yet\n";
    } else if (!absent.empty()) {
      // A rank with no record at all comes first, even where some completed the collective: a
      // rank killed just after one may have taken its last messages of it along.
      out << "verdict: " << list(absent) << " left no record, and the others ";
      if (!failed_lost.empty()) {
        out << "lost " << (absent.size() == 1 ? "it" : "them") << " in " << where
            << ": it died (killed or crashed) there or before\n";
      } else if (!failed_timeout.empty()) {
        out << "timed out in " << where << " waiting: " << (absent.size() == 1 ? "it" : "they")
            << " stopped (SIGSTOP, a debugger), hung outside DistComm, or died without a trace\n";
      } else if (!still_inside.empty()) {
        out << "are still inside " << where << ", waiting for "
            << (absent.size() == 1 ? "it" : "them") << "\n";
      } else {
        out << "failed in " << where << "\n";
      }
    } else if (!completed.empty()) {
      std::vector<int> rest;
      for (int r : cm.ranks) {
        if (std::find(completed.begin(), completed.end(), r) == completed.end()) rest.push_back(r);
      }
      out << "verdict: " << list(rest) << " failed in " << where << ", which " << list(completed)
          << " completed (see the errors above)\n";
    } else if (!still_inside.empty()) {
      out << "verdict: " << list(still_inside) << " still inside " << where
          << " when dumped; the other ranks had left it\n";
    } else {
      out << "verdict: every rank failed in " << where << " (see the errors above)\n";
    }
  }
  if (!any && missing.empty()) out << "verdict: no divergence recorded\n";
  return out.str();
}

}  // namespace distcomm::trace_tool
