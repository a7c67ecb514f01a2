// distcomm::autotune::choice and its file: see include/distcomm/autotune/choice.hpp.
#include "distcomm/autotune/choice.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "distcomm/core/error.hpp"
#include "distcomm/core/files.hpp"

namespace distcomm::autotune {

namespace {

constexpr const char* format_name = "distcomm-autotune 1";

}  // namespace

std::string choice::describe() const {
  std::ostringstream os;
  os << "fusion threshold " << format_bytes(settings.fusion_threshold) << ", cut-off "
     << format_bytes(settings.fusion_cutoff) << ", segment " << format_bytes(settings.segment_bytes)
     << ", table "
     << (settings.algo.empty() ? std::string("(backend's)") : settings.algo.to_string())
     << (settings.hierarchical_threshold != 0
             ? ", hierarchical from " + format_bytes(settings.hierarchical_threshold)
             : std::string())
     << ", cycle " << cycle_ms << " ms";
  return os.str();
}

std::string choice::mismatch(const std::string& b, const std::string& s, int p) const {
  if (backend == b && strategy == s && ranks == p) return {};
  return "it was made for " + std::to_string(ranks) + " ranks of " + backend + " (" + strategy +
         "), this job is " + std::to_string(p) + " ranks of " + b + " (" + s + ")";
}

std::string to_json(const choice& c) {
  nlohmann::json j;
  j["format"] = format_name;
  j["backend"] = c.backend;
  j["strategy"] = c.strategy;
  j["ranks"] = c.ranks;
  j["fusion_threshold"] = c.settings.fusion_threshold;
  j["fusion_cutoff"] = c.settings.fusion_cutoff;
  j["segment_bytes"] = c.settings.segment_bytes;
  j["algo"] = c.settings.algo.to_string();
  j["cycle_ms"] = c.cycle_ms;
  if (c.settings.hierarchical_threshold != 0) {
    j["hierarchical_threshold"] = c.settings.hierarchical_threshold;
  }
  j["step_seconds"] = c.step_seconds;
  j["start_seconds"] = c.start_seconds;
  j["trials"] = c.trials;
  return j.dump(1) + "\n";
}

choice from_json(const std::string& text, const std::string& source) {
  const auto bad = [&](const std::string& what) {
    return invalid_argument_error(source + ": not an autotune choice (" + what +
                                  "); delete it to search again");
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw bad(e.what());
  }
  choice c;
  try {
    if (!j.is_object() || j.value("format", std::string()) != format_name) {
      throw bad(std::string("no \"format\": \"") + format_name + "\"");
    }
    c.backend = j.at("backend").get<std::string>();
    c.strategy = j.at("strategy").get<std::string>();
    c.ranks = j.at("ranks").get<int>();
    c.settings.fusion_threshold = j.at("fusion_threshold").get<std::size_t>();
    c.settings.fusion_cutoff = j.at("fusion_cutoff").get<std::size_t>();
    c.settings.segment_bytes = j.at("segment_bytes").get<std::size_t>();
    const std::string algo = j.at("algo").get<std::string>();
    if (!algo.empty()) c.settings.algo = algo_table::parse(algo, source + ": \"algo\"");
    c.cycle_ms = j.at("cycle_ms").get<double>();
    c.settings.hierarchical_threshold = j.value("hierarchical_threshold", std::size_t{0});
    c.step_seconds = j.value("step_seconds", 0.0);
    c.start_seconds = j.value("start_seconds", 0.0);
    c.trials = j.value("trials", 0);
  } catch (const nlohmann::json::exception& e) {
    throw bad(e.what());
  }
  if (c.ranks < 1) throw bad("\"ranks\" is " + std::to_string(c.ranks));
  if (!(c.cycle_ms > 0) || !std::isfinite(c.cycle_ms)) throw bad("\"cycle_ms\" is not positive");
  if (!valid_segment_bytes(c.settings.segment_bytes)) {
    throw bad("\"segment_bytes\" is outside 64 bytes .. 1G");
  }
  return c;
}

std::optional<std::string> read_file(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return std::nullopt;
    throw invalid_argument_error(file + ": cannot read it: " + std::strerror(errno));
  }
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

void save(const choice& c, const std::string& file) {
  // Atomically, never through a link or a file planted beside it (core/files.hpp).
  const std::string why = write_file_atomically(file, to_json(c));
  if (!why.empty()) throw error(file + ": cannot write the autotune choice: " + why);
}

}  // namespace distcomm::autotune
