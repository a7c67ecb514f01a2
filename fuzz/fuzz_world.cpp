// libFuzzer target for world detection. The input is split at NUL bytes (environment values
// never hold one):
//   part 0   TF_CONFIG                      -> detect_world
//   part 1   a Slurm host list              -> expand_hostlist, first_host, detect_world (srun)
//   part 2   a Slurm tasks-per-node list    -> detect_world (srun)
//   part 3   NAME=VALUE lines, any variable -> detect_world
// A missing part reuses part 0. A distcomm::error is the expected answer to bad input; any other
// exception, a crash, a sanitizer report, or an accepted world that breaks its invariants
// (rank < size, ...) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "distcomm/core/error.hpp"
#include "distcomm/rendezvous/world.hpp"

namespace {

using env = std::map<std::string, std::string>;

void require(bool ok) {
  if (!ok) std::abort();
}

void detect(const env& e) {
  try {
    const distcomm::world_info w = distcomm::detect_world([&](const char* name) -> const char* {
      const auto it = e.find(name);
      return it == e.end() ? nullptr : it->second.c_str();
    });
    require(w.rank >= 0 && w.rank < w.size);
    require(w.local_rank >= 0 && w.local_rank < w.local_size && w.local_size <= w.size);
    require(w.node_rank >= 0 && w.node_rank < w.size);
    require(w.master_port >= 0 && w.master_port <= 65535);
    require(w.ps_servers >= 0 && w.ps_servers <= w.size);
    require(!w.to_string().empty());
  } catch (const distcomm::error&) {
  }
}

// expand_hostlist and first_host must agree: same first name, and the same verdict on syntax.
void hostlist(const std::string& list) {
  std::string first;
  bool first_ok = true;
  try {
    first = distcomm::first_host(list);
  } catch (const distcomm::error&) {
    first_ok = false;
  }
  try {
    const std::vector<std::string> hosts = distcomm::expand_hostlist(list, 4096);
    require(first_ok && !hosts.empty() && hosts.front() == first);
    for (const std::string& h : hosts) require(!h.empty());
  } catch (const distcomm::error& e) {
    // Only a list that is too long may be valid for first_host and refused here.
    require(!first_ok || std::string(e.what()).find("names more than") != std::string::npos);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (;;) {
    const std::size_t nul = input.find('\0', start);
    parts.push_back(
        input.substr(start, nul == std::string::npos ? std::string::npos : nul - start));
    if (nul == std::string::npos) break;
    start = nul + 1;
  }
  const auto part = [&](std::size_t i) -> const std::string& {
    return i < parts.size() ? parts[i] : parts[0];
  };

  detect({{"TF_CONFIG", part(0)}});

  hostlist(part(1));
  // A multi-node srun step, so the node list is needed, on a node the per-node list may lack.
  detect({{"SLURM_STEP_ID", "0"},
          {"SLURM_PROCID", "3"},
          {"SLURM_NTASKS", "8"},
          {"SLURM_LOCALID", "1"},
          {"SLURM_NODEID", std::to_string(size % 5)},
          {"SLURM_STEP_NODELIST", part(1)},
          {"SLURM_STEP_TASKS_PER_NODE", part(2)}});

  env e;
  const std::string& lines = part(3);
  std::size_t pos = 0;
  while (pos < lines.size()) {
    std::size_t end = lines.find('\n', pos);
    if (end == std::string::npos) end = lines.size();
    const std::string line = lines.substr(pos, end - pos);
    const std::size_t eq = line.find('=');
    if (eq != std::string::npos && eq > 0) e[line.substr(0, eq)] = line.substr(eq + 1);
    pos = end + 1;
  }
  detect(e);
  return 0;
}
