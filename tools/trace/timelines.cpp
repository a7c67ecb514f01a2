#include "timelines.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace distcomm::trace_tool {

namespace {

using json = nlohmann::json;

std::string seconds(std::int64_t us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(us) / 1e6);
  return buf;
}

// The events of a file whose writer may have died: a complete file parses as it is; otherwise the
// events written out so far are closed by hand (the last one may be cut in the middle: dropped).
json events_of(const std::string& path, const std::string& text, bool* complete) {
  *complete = false;
  try {
    json j = json::parse(text);
    *complete = true;
    return j.at("traceEvents");
  } catch (const std::exception&) {
  }
  std::size_t end = text.size();
  for (;;) {
    const std::size_t brace = text.rfind('}', end == 0 ? 0 : end - 1);
    if (brace == std::string::npos || end == 0) break;
    try {
      return json::parse(text.substr(0, brace + 1) + "\n]}").at("traceEvents");
    } catch (const std::exception&) {
      end = brace;
    }
  }
  if (text.find("\"traceEvents\"") != std::string::npos) return json::array();
  throw std::runtime_error(path + ": not a DistComm timeline (a Chrome trace with traceEvents)");
}

}  // namespace

timeline_file read_timeline(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot be read");
  std::stringstream buf;
  buf << in.rdbuf();
  timeline_file t;
  t.path = path;
  const std::string text = buf.str();
  if (text.empty()) return t;  // opened, nothing written out before its process ended
  const json events = events_of(path, text, &t.complete);
  std::map<std::int64_t, std::string> tracks;
  for (const json& e : events) {
    if (!e.is_object()) continue;
    if (e.contains("pid") && e["pid"].is_number_integer()) t.rank = e["pid"].get<int>();
    const std::string ph = e.value("ph", "");
    if (ph == "M" && e.value("name", "") == "thread_name") {
      tracks[e.value("tid", std::int64_t{0})] =
          e.contains("args") ? e["args"].value("name", "") : std::string();
    } else if (ph == "X") {
      ++t.spans;
      const auto end = static_cast<std::int64_t>(e.value("ts", 0.0) + e.value("dur", 0.0));
      if (end >= t.last_end_us) {
        t.last_end_us = end;
        t.last_name = e.value("name", "");
        t.last_track = tracks[e.value("tid", std::int64_t{0})];
      }
    }
  }
  return t;
}

std::string describe_timelines(const std::vector<timeline_file>& timelines,
                               const std::vector<dump>& dumps) {
  std::ostringstream out;
  out << "timelines (the last span each recorded):\n";
  std::int64_t latest_dump = 0;
  for (const dump& d : dumps) latest_dump = std::max(latest_dump, d.dumped_us);
  std::vector<timeline_file> sorted = timelines;
  std::sort(sorted.begin(), sorted.end(),
            [](const timeline_file& a, const timeline_file& b) { return a.rank < b.rank; });
  for (const timeline_file& t : sorted) {
    out << "  ";
    if (t.spans == 0) {
      out << (t.rank >= 0 ? "rank " + std::to_string(t.rank) : t.path) << ": no span recorded"
          << (t.complete ? "" : " (its process did not close the file)") << "\n";
      continue;
    }
    out << "rank " << t.rank << ": " << t.last_name;
    if (!t.last_track.empty()) out << " on " << t.last_track;
    const auto own =
        std::find_if(dumps.begin(), dumps.end(), [&](const dump& d) { return d.rank == t.rank; });
    const std::int64_t ref = own != dumps.end() ? own->dumped_us : latest_dump;
    if (ref != 0) {
      const std::int64_t gap = ref - t.last_end_us;
      out << ", ended " << seconds(gap < 0 ? -gap : gap) << (gap < 0 ? " after " : " before ")
          << (own != dumps.end() ? "its dump" : "the last dump of the job");
    }
    if (!t.complete) out << "; the file stops there (its process died, or still runs)";
    out << "\n";
  }
  return out.str();
}

}  // namespace distcomm::trace_tool
