// distcomm-timeline: joins the per-rank Chrome traces of DISTCOMM_TIMELINE into one file that
// Perfetto (ui.perfetto.dev) or chrome://tracing open with one process per rank.
//   DISTCOMM_TIMELINE=/tmp/tl.%r.json distcomm-run -np 4 distcomm-train-mlp
//   distcomm-timeline merge -o /tmp/tl.json /tmp/tl.*.json
// Each input must be a trace as DistComm writes it ({"traceEvents": [...]}); one that is cut
// short (a rank killed before it closed its file) is read up to its last complete event, with a
// warning, so the ranks that died are in the picture too.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace {

using json = nlohmann::json;

// The events of one rank's file. A file whose writer died has no closing "]}": its complete
// lines (one event each) are kept.
json read_events(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  try {
    json doc = json::parse(s);
    if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
      throw std::runtime_error("'" + path + "' is JSON but not a trace (no traceEvents array)");
    }
    return doc["traceEvents"];
  } catch (const json::parse_error&) {
    json events = json::array();
    std::istringstream lines(s);
    std::string line;
    std::getline(lines, line);  // the opening {"displayTimeUnit": ..., "traceEvents": [
    std::size_t dropped = 0;
    while (std::getline(lines, line)) {
      if (!line.empty() && line.back() == ',') line.pop_back();
      try {
        events.push_back(json::parse(line));
      } catch (const json::parse_error&) {
        ++dropped;
      }
    }
    std::fprintf(stderr,
                 "distcomm-timeline: '%s' was not closed (its rank did not finish); read %zu "
                 "events, skipped %zu incomplete line%s\n",
                 path.c_str(), events.size(), dropped, dropped == 1 ? "" : "s");
    return events;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"DistComm timelines (DISTCOMM_TIMELINE): join the ranks' Chrome traces"};
  app.require_subcommand(1);
  std::string out;
  std::vector<std::string> inputs;
  CLI::App* merge = app.add_subcommand("merge", "Join per-rank trace files into one");
  merge->add_option("-o,--output", out, "The merged trace")->required();
  merge->add_option("inputs", inputs, "Per-rank trace files")->required()->check(CLI::ExistingFile);
  CLI11_PARSE(app, argc, argv);
  try {
    json all = json::array();
    for (const std::string& path : inputs) {
      for (auto& e : read_events(path)) all.push_back(std::move(e));
    }
    std::ofstream f(out);
    if (!f) throw std::runtime_error("cannot write '" + out + "'");
    f << json{{"displayTimeUnit", "ms"}, {"traceEvents", all}}.dump() << '\n';
    std::printf("distcomm-timeline: %zu events from %zu files in %s\n", all.size(), inputs.size(),
                out.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "distcomm-timeline: %s\n", e.what());
    return 1;
  }
  return 0;
}
