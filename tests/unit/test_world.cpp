// detect_world with injected environments: the two tables of docs/RENDEZVOUS.md (read from the
// file, every row run), then each launcher, overrides, detection order, the Slurm host-list
// expander, TF_CONFIG mappings, single_node, to_string and require_master.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "distcomm/core/error.hpp"
#include "distcomm/rendezvous/world.hpp"

using namespace distcomm;

namespace {

#define CHECK_HAS(text, part)                                      \
  CHECK_MESSAGE(std::string(text).find(part) != std::string::npos, \
                "'" << (text) << "' does not mention '" << (part) << "'")

using env = std::map<std::string, std::string>;

world_info detect(const env& e) {
  return detect_world([&](const char* name) -> const char* {
    const auto it = e.find(name);
    return it == e.end() ? nullptr : it->second.c_str();
  });
}

// The message of the rendezvous_error that f throws; any other outcome is named instead.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const rendezvous_error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<not a rendezvous_error: ") + e.what() + ">";
  }
  return "<no exception>";
}

// The message detect_world gives for e.
std::string error_for(const env& e) {
  return error_of([&] { detect(e); });
}

// ---- the table syntax of docs/RENDEZVOUS.md --------------------------------------------------

// `A=1 B='x y' C=` -> {A: 1, B: x y, C: ""}. Throws std::runtime_error on anything else.
env parse_env(const std::string& text) {
  env e;
  std::size_t pos = 0;
  const auto skip_spaces = [&] {
    while (pos < text.size() && text[pos] == ' ') ++pos;
  };
  skip_spaces();
  while (pos < text.size()) {
    const std::size_t eq = text.find('=', pos);
    if (eq == std::string::npos || eq == pos) {
      throw std::runtime_error("expected NAME=VALUE at " + std::to_string(pos));
    }
    const std::string name = text.substr(pos, eq - pos);
    for (const char c : name) {
      if (!(c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
            (c >= '0' && c <= '9'))) {
        throw std::runtime_error("bad variable name '" + name + "'");
      }
    }
    pos = eq + 1;
    std::string value;
    if (pos < text.size() && text[pos] == '\'') {
      const std::size_t close = text.find('\'', pos + 1);
      if (close == std::string::npos) throw std::runtime_error("unclosed quote in " + name);
      value = text.substr(pos + 1, close - pos - 1);
      pos = close + 1;
      if (pos < text.size() && text[pos] != ' ') {
        throw std::runtime_error("text after the closing quote of " + name);
      }
    } else {
      const std::size_t end = std::min(text.find(' ', pos), text.size());
      value = text.substr(pos, end - pos);
      if (value.find('\'') != std::string::npos) {
        throw std::runtime_error("stray quote in " + name);
      }
      pos = end;
    }
    if (!e.emplace(name, value).second) throw std::runtime_error(name + " set twice");
    skip_spaces();
  }
  return e;
}

// The text of a cell that is exactly one code span.
std::string code_span(std::string cell) {
  const auto first = cell.find_first_not_of(' ');
  const auto last = cell.find_last_not_of(' ');
  if (first == std::string::npos) throw std::runtime_error("empty cell");
  cell = cell.substr(first, last - first + 1);
  if (cell.size() < 2 || cell.front() != '`' || cell.back() != '`' ||
      cell.find('`', 1) != cell.size() - 1) {
    throw std::runtime_error("cell is not one `code span`: " + cell);
  }
  return cell.substr(1, cell.size() - 2);
}

// Splits a table row into cells at '|' outside code spans.
std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  bool code = false;
  for (std::size_t i = 1; i < line.size(); ++i) {  // line[0] is the leading '|'
    const char c = line[i];
    if (c == '`') code = !code;
    if (c == '|' && !code) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty() && cur.find_first_not_of(' ') != std::string::npos) out.push_back(cur);
  return out;
}

struct row {
  int line = 0;
  std::string environment;
  std::string expected;
};

std::string rendezvous_md() {
  const std::string path = std::string(DISTCOMM_SOURCE_DIR) + "/docs/RENDEZVOUS.md";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The rows of the table whose header line is `header`. Rows that cannot be parsed are reported
// through `broken` (and fail the calling test).
std::vector<row> read_table(const std::string& header, std::vector<std::string>& broken) {
  std::istringstream in(rendezvous_md());
  std::string line;
  int number = 0;
  bool inside = false;
  bool found = false;
  std::vector<row> rows;
  while (std::getline(in, line)) {
    ++number;
    if (!inside) {
      if (line == header) inside = found = true;
      continue;
    }
    if (line.rfind("|---", 0) == 0) continue;
    if (line.empty() || line[0] != '|') break;
    try {
      const std::vector<std::string> c = cells(line);
      if (c.size() != 2) throw std::runtime_error(std::to_string(c.size()) + " cells, not 2");
      rows.push_back(row{number, code_span(c[0]), code_span(c[1])});
      parse_env(rows.back().environment);
    } catch (const std::exception& e) {
      broken.push_back("docs/RENDEZVOUS.md:" + std::to_string(number) + ": " + e.what());
    }
  }
  if (!found) broken.push_back("docs/RENDEZVOUS.md has no table headed '" + header + "'");
  return rows;
}

const char* const error_header = "| environment | message contains |";
const char* const example_header = "| environment | to_string() |";

}  // namespace

// ---- the tables ------------------------------------------------------------------------------

TEST_CASE("world: the table syntax") {
  CHECK(parse_env("A=1 B='x y' C=") == env{{"A", "1"}, {"B", "x y"}, {"C", ""}});
  CHECK(parse_env("  T='{\"a\": [1, 2]}'  ") == env{{"T", "{\"a\": [1, 2]}"}});
  CHECK(parse_env("") == env{});
  for (const char* bad : {"A", "=1", "A='x", "A='x'y", "A=x'y", "A=1 A=2", "A-B=1"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(parse_env(bad), std::runtime_error);
  }
  CHECK(cells("| `a|b` | `c` |") == std::vector<std::string>{" `a|b` ", " `c` "});
  CHECK(code_span(" `x y` ") == "x y");
  CHECK_THROWS(code_span("x"));
  CHECK_THROWS(code_span("`a` `b`"));
}

TEST_CASE("world: every row of the RENDEZVOUS.md error table raises its message") {
  std::vector<std::string> broken;
  const std::vector<row> rows = read_table(error_header, broken);
  for (const std::string& b : broken) FAIL_CHECK(b);
  CHECK(rows.size() >= 25);
  std::set<std::string> seen;
  for (const row& r : rows) {
    CAPTURE(r.line);
    CAPTURE(r.environment);
    CHECK_MESSAGE(seen.insert(r.environment).second, "environment listed twice");
    const std::string message = error_for(parse_env(r.environment));
    CHECK(message.rfind("rendezvous: ", 0) == 0);
    CHECK_HAS(message, r.expected);
  }
}

TEST_CASE("world: every row of the RENDEZVOUS.md examples table gives its world") {
  std::vector<std::string> broken;
  const std::vector<row> rows = read_table(example_header, broken);
  for (const std::string& b : broken) FAIL_CHECK(b);
  CHECK(rows.size() >= 20);
  for (const row& r : rows) {
    CAPTURE(r.line);
    CAPTURE(r.environment);
    std::string got;
    const std::string failure =
        error_of([&] { got = detect(parse_env(r.environment)).to_string(); });
    CHECK(failure == "<no exception>");
    CHECK(got == r.expected);
  }
}

TEST_CASE("world: every variable detect_world reads is documented in RENDEZVOUS.md") {
  const std::string doc = rendezvous_md();
  std::vector<std::string> broken;
  std::vector<row> rows = read_table(example_header, broken);
  const std::vector<row> errors = read_table(error_header, broken);
  rows.insert(rows.end(), errors.begin(), errors.end());
  std::set<std::string> asked;
  for (const row& r : rows) {
    const env e = parse_env(r.environment);
    error_of([&] {
      detect_world([&](const char* name) -> const char* {
        asked.insert(name);
        const auto it = e.find(name);
        return it == e.end() ? nullptr : it->second.c_str();
      });
    });
  }
  CHECK(asked.size() > 35);
  for (const std::string& name : asked) {
    CAPTURE(name);
    CHECK(doc.find("`" + name + "`") != std::string::npos);
  }
}

// ---- launchers, one by one -------------------------------------------------------------------

TEST_CASE("world: nothing set is one process") {
  const world_info w = detect({});
  CHECK(w.rank == 0);
  CHECK(w.size == 1);
  CHECK(w.launcher == launcher_kind::none);
  CHECK(w.single_node());
  CHECK(w.loopback_master);
  CHECK(w.master_addr == "127.0.0.1");
  CHECK(w.master_port == 0);
}

TEST_CASE("world: torchrun-style variables") {
  const world_info w = detect({{"RANK", "5"},
                               {"WORLD_SIZE", "8"},
                               {"LOCAL_RANK", "1"},
                               {"LOCAL_WORLD_SIZE", "4"},
                               {"GROUP_RANK", "1"},
                               {"MASTER_ADDR", "10.0.0.1"},
                               {"MASTER_PORT", "29500"}});
  CHECK(w.launcher == launcher_kind::torchrun);
  CHECK(w.rank == 5);
  CHECK(w.size == 8);
  CHECK(w.local_rank == 1);
  CHECK(w.local_size == 4);
  CHECK(w.node_rank == 1);
  CHECK(w.master_addr == "10.0.0.1");
  CHECK(w.master_port == 29500);
  CHECK_FALSE(w.loopback_master);
  CHECK_FALSE(w.single_node());
  CHECK(w.ps_servers == 0);
  // NODE_RANK (AzureML) serves when GROUP_RANK is absent, and both may be set when they agree.
  CHECK(detect({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"NODE_RANK", "1"}}).node_rank == 1);
  CHECK(detect({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"NODE_RANK", "1"}, {"GROUP_RANK", "1"}})
            .node_rank == 1);
}

TEST_CASE("world: Open MPI and its master sources") {
  const env base = {{"OMPI_COMM_WORLD_RANK", "1"},
                    {"OMPI_COMM_WORLD_SIZE", "4"},
                    {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                    {"OMPI_COMM_WORLD_NODE_RANK", "3"}};
  world_info w = detect(base);
  CHECK(w.launcher == launcher_kind::open_mpi);
  CHECK(w.rank == 1);
  CHECK(w.size == 4);
  CHECK(w.local_rank == 1);
  CHECK(w.local_size == 2);
  CHECK(w.node_rank == 0);  // OMPI_COMM_WORLD_NODE_RANK is not a node index
  CHECK(w.master_addr.empty());
  CHECK_FALSE(w.loopback_master);

  env e = base;
  e["MASTER_ADDR"] = "m";
  e["MASTER_PORT"] = "1234";
  w = detect(e);
  CHECK(w.master_addr == "m");
  CHECK(w.master_port == 1234);
  e["AZ_BATCHAI_MPI_MASTER_NODE"] = "az-host";
  w = detect(e);
  CHECK(w.master_addr == "az-host");  // before MASTER_ADDR
  CHECK(w.master_port == 1234);       // MASTER_PORT still serves
  e["AZ_BATCH_MASTER_NODE"] = "10.0.0.4:6105";
  w = detect(e);
  CHECK(w.master_addr == "10.0.0.4");  // before both
  CHECK(w.master_port == 6105);
  e["AZ_BATCH_MASTER_NODE"] = "[fd00::4]:6105";
  CHECK(detect(e).master_addr == "fd00::4");
}

TEST_CASE("world: MPICH/Hydra and PMIx") {
  world_info w = detect(
      {{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}, {"MPI_LOCALRANKID", "0"}, {"MPI_LOCALNRANKS", "1"}});
  CHECK(w.launcher == launcher_kind::mpich);
  CHECK(w.rank == 2);
  CHECK(w.size == 3);
  CHECK(w.local_size == 1);
  CHECK(w.master_addr.empty());
  w = detect({{"PMIX_RANK", "3"}, {"DISTCOMM_WORLD_SIZE", "4"}});
  CHECK(w.launcher == launcher_kind::mpich);
  CHECK(w.rank == 3);
  CHECK(w.size == 4);
  // PMIx with another launcher: the other launcher matches (srun --mpi=pmix, Open MPI 5).
  w = detect(
      {{"PMIX_RANK", "1"}, {"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}});
  CHECK(w.launcher == launcher_kind::slurm);
  w = detect({{"PMIX_RANK", "1"}, {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  CHECK(w.launcher == launcher_kind::open_mpi);
}

TEST_CASE("world: Slurm") {
  const env step = {{"SLURM_STEP_ID", "0"},
                    {"SLURM_PROCID", "5"},
                    {"SLURM_NTASKS", "8"},
                    {"SLURM_LOCALID", "1"},
                    {"SLURM_NODEID", "1"},
                    {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"},
                    {"SLURM_STEP_NODELIST", "gpu[07-08]"}};
  world_info w = detect(step);
  CHECK(w.launcher == launcher_kind::slurm);
  CHECK(w.rank == 5);
  CHECK(w.size == 8);
  CHECK(w.local_rank == 1);
  CHECK(w.local_size == 4);
  CHECK(w.node_rank == 1);
  CHECK(w.master_addr == "gpu07");
  CHECK(w.master_port == 0);
  CHECK_FALSE(w.loopback_master);

  SUBCASE("SLURM_STEPID (the older name) also marks a step") {
    env e = step;
    e.erase("SLURM_STEP_ID");
    e["SLURM_STEPID"] = "0";
    CHECK(detect(e).launcher == launcher_kind::slurm);
  }
  SUBCASE("no step: the allocation's shell is one process") {
    env e = step;
    e.erase("SLURM_STEP_ID");
    CHECK(detect(e).launcher == launcher_kind::none);
    CHECK(detect(e).size == 1);
  }
  SUBCASE("the job's node list when the step has none") {
    env e = step;
    e.erase("SLURM_STEP_NODELIST");
    e["SLURM_JOB_NODELIST"] = "cn[100-101]";
    CHECK(detect(e).master_addr == "cn100");
  }
  SUBCASE("MASTER_ADDR before the node list") {
    env e = step;
    e["MASTER_ADDR"] = "login";
    e["MASTER_PORT"] = "29500";
    CHECK(detect(e).master_addr == "login");
    CHECK(detect(e).master_port == 29500);
  }
  SUBCASE("SLURM_NTASKS_PER_NODE when there is no per-node list") {
    env e = step;
    e.erase("SLURM_STEP_TASKS_PER_NODE");
    e["SLURM_NTASKS_PER_NODE"] = "4";
    CHECK(detect(e).local_size == 4);
    e.erase("SLURM_NTASKS_PER_NODE");
    CHECK(detect(e).local_size == 2);  // local rank 1 + 1
  }
  SUBCASE("the step's task count before SLURM_NTASKS") {
    env e = step;
    e["SLURM_NTASKS"] = "16";
    e["SLURM_STEP_NUM_TASKS"] = "8";
    CHECK(detect(e).size == 8);
  }
  SUBCASE("one node: loopback rather than the node's name") {
    const world_info one = detect({{"SLURM_STEP_ID", "0"},
                                   {"SLURM_PROCID", "0"},
                                   {"SLURM_NTASKS", "2"},
                                   {"SLURM_LOCALID", "0"},
                                   {"SLURM_NODEID", "0"},
                                   {"SLURM_STEP_TASKS_PER_NODE", "2"},
                                   {"SLURM_STEP_NODELIST", "fake-node"}});
    CHECK(one.single_node());
    CHECK(one.loopback_master);
    CHECK(one.master_addr == "127.0.0.1");
  }
}

TEST_CASE("world: TF_CONFIG mappings") {
  const auto tf = [](const std::string& json) { return detect({{"TF_CONFIG", json}}); };
  const std::string cluster =
      R"("cluster":{"chief":["c0:2222"],"worker":["w0:2222","w1:2222","w2:2222"],)"
      R"("ps":["p0:2222","p1:2222"],"evaluator":["e0:2222"]})";
  const auto task = [&](const char* type, int index) {
    return "{" + cluster + R"(,"task":{"type":")" + type + R"(","index":)" + std::to_string(index) +
           "}}";
  };
  // ps first, then the chief, then the workers; the evaluator is outside the world.
  CHECK(tf(task("ps", 0)).rank == 0);
  CHECK(tf(task("ps", 1)).rank == 1);
  CHECK(tf(task("chief", 0)).rank == 2);
  CHECK(tf(task("worker", 0)).rank == 3);
  CHECK(tf(task("worker", 2)).rank == 5);
  const world_info w = tf(task("worker", 1));
  CHECK(w.launcher == launcher_kind::tf_config);
  CHECK(w.size == 6);
  CHECK(w.ps_servers == 2);
  CHECK(w.master_addr == "p0");  // rank 0's host
  CHECK(w.master_port == 2222);
  CHECK(w.node_rank == 4);
  CHECK_HAS(error_of([&] { tf(task("evaluator", 0)); }), "evaluator is not part of");

  // No ps tasks: chief -> 0, worker i -> i + 1, master = the chief.
  const std::string plain = R"({"cluster":{"chief":["c:1"],"worker":["w0:1","w1:1"]},)";
  CHECK(tf(plain + R"("task":{"type":"chief","index":0}})").rank == 0);
  CHECK(tf(plain + R"("task":{"type":"worker","index":1}})").rank == 2);
  CHECK(tf(plain + R"("task":{"type":"worker","index":1}})").master_addr == "c");
  CHECK(tf(plain + R"("task":{"type":"worker","index":1}})").ps_servers == 0);
  // No chief: worker 0 is rank 0 and the master.
  const world_info w0 =
      tf(R"({"cluster":{"worker":["a:7","b:8"]},"task":{"type":"worker","index":0}})");
  CHECK(w0.rank == 0);
  CHECK(w0.master_addr == "a");
  CHECK(w0.master_port == 7);
  // Tasks on shared hosts: local ranks and nodes follow the hosts in rank order.
  const std::string shared =
      R"({"cluster":{"ps":["h1:1"],"worker":["h0:1","h1:2","h0:2","h2:1"]},"task":)";
  const world_info s = tf(shared + R"({"type":"worker","index":2}})");  // rank 3 on h0
  CHECK(s.rank == 3);
  CHECK(s.local_rank == 1);
  CHECK(s.local_size == 2);
  CHECK(s.node_rank == 1);  // h1 is node 0 (the ps), h0 node 1, h2 node 2
  const world_info p = tf(shared + R"({"type":"ps","index":0}})");
  CHECK(p.local_rank == 0);
  CHECK(p.local_size == 2);
  CHECK(p.node_rank == 0);
  // IPv6 addresses in brackets.
  const world_info v6 = tf(
      R"({"cluster":{"worker":["[fd00::1]:2222","[fd00::2]:2222"]},"task":{"type":"worker","index":1}})");
  CHECK(v6.master_addr == "fd00::1");
  CHECK(v6.to_string() == "rank 1/2 (local 0/1, node 1) master [fd00::1]:2222 from tf_config");
  // Other top-level keys (rpc_layer, environment) are TensorFlow's business.
  CHECK(
      tf(R"({"cluster":{"worker":["a:1"]},"task":{"type":"worker","index":0},"rpc_layer":"grpc"})")
          .size == 1);
  // An empty cluster is TensorFlow's single-process case.
  CHECK(tf(R"({"cluster":{},"task":{"type":"worker","index":0}})").launcher == launcher_kind::none);
  CHECK(tf(R"({"task":{"type":"worker","index":0}})").launcher == launcher_kind::none);
}

TEST_CASE("world: DistComm's own variables") {
  const world_info w = detect({{"DISTCOMM_RANK", "2"},
                               {"DISTCOMM_WORLD_SIZE", "4"},
                               {"DISTCOMM_LOCAL_RANK", "0"},
                               {"DISTCOMM_LOCAL_WORLD_SIZE", "2"},
                               {"DISTCOMM_NODE_RANK", "1"},
                               {"DISTCOMM_MASTER_ADDR", "h0"},
                               {"DISTCOMM_MASTER_PORT", "5000"}});
  CHECK(w.launcher == launcher_kind::distcomm);
  CHECK(w.to_string() == "rank 2/4 (local 0/2, node 1) master h0:5000 from distcomm");
}

// ---- order and overrides ---------------------------------------------------------------------

TEST_CASE("world: the first launcher in the documented order wins") {
  // Every launcher at once, all describing rank 1 of 2 so the agreement check stays quiet; each
  // step removes the winner and the next one must win.
  env e = {
      {"DISTCOMM_RANK", "1"},
      {"DISTCOMM_WORLD_SIZE", "2"},
      {"RANK", "1"},
      {"WORLD_SIZE", "2"},
      {"OMPI_COMM_WORLD_RANK", "1"},
      {"OMPI_COMM_WORLD_SIZE", "2"},
      {"PMI_RANK", "1"},
      {"PMI_SIZE", "2"},
      {"SLURM_STEP_ID", "0"},
      {"SLURM_PROCID", "1"},
      {"SLURM_NTASKS", "2"},
      {"TF_CONFIG", R"({"cluster":{"worker":["a:1","b:1"]},"task":{"type":"worker","index":1}})"},
      {"PMIX_RANK", "1"}};
  const std::vector<std::pair<launcher_kind, std::vector<const char*>>> order = {
      {launcher_kind::distcomm, {"DISTCOMM_RANK", "DISTCOMM_WORLD_SIZE"}},
      {launcher_kind::torchrun, {"RANK", "WORLD_SIZE"}},
      {launcher_kind::open_mpi, {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}},
      {launcher_kind::mpich, {"PMI_RANK", "PMI_SIZE"}},
      {launcher_kind::slurm, {"SLURM_PROCID"}},
      {launcher_kind::tf_config, {"TF_CONFIG"}},
  };
  for (const auto& [kind, vars] : order) {
    CAPTURE(to_string(kind));
    const world_info w = detect(e);
    CHECK(w.launcher == kind);
    CHECK(w.rank == 1);
    CHECK(w.size == 2);
    for (const char* v : vars) e.erase(v);
  }
  // Only PMIX_RANK is left: it needs a size.
  CHECK_HAS(error_for(e), "PMIx exports no world size");
  e["DISTCOMM_WORLD_SIZE"] = "2";
  CHECK(detect(e).launcher == launcher_kind::mpich);
}

TEST_CASE("world: each DISTCOMM_* variable overrides its field of any launcher") {
  const env base = {{"OMPI_COMM_WORLD_RANK", "1"},
                    {"OMPI_COMM_WORLD_SIZE", "4"},
                    {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                    {"AZ_BATCH_MASTER_NODE", "m:100"}};
  const auto with = [&](const char* name, const char* value) {
    env e = base;
    e[name] = value;
    const world_info w = detect(e);
    CHECK(w.launcher == launcher_kind::open_mpi);
    return w;
  };
  CHECK(with("DISTCOMM_RANK", "3").rank == 3);
  CHECK(with("DISTCOMM_WORLD_SIZE", "8").size == 8);
  CHECK(with("DISTCOMM_LOCAL_RANK", "0").local_rank == 0);
  CHECK(with("DISTCOMM_LOCAL_WORLD_SIZE", "4").local_size == 4);
  CHECK(with("DISTCOMM_NODE_RANK", "1").node_rank == 1);
  CHECK(with("DISTCOMM_MASTER_ADDR", "other").master_addr == "other");
  CHECK(with("DISTCOMM_MASTER_PORT", "200").master_port == 200);
  CHECK(with("DISTCOMM_MASTER_PORT", "200").master_addr == "m");
  // An override settles a disagreement between launchers.
  env e = {{"RANK", "0"},
           {"WORLD_SIZE", "1"},
           {"OMPI_COMM_WORLD_RANK", "2"},
           {"OMPI_COMM_WORLD_SIZE", "4"}};
  CHECK_HAS(error_for(e), "describe different worlds");
  e["DISTCOMM_WORLD_SIZE"] = "4";
  e["DISTCOMM_RANK"] = "2";
  CHECK(detect(e).launcher == launcher_kind::distcomm);
  e.erase("DISTCOMM_RANK");
  CHECK(detect(e).launcher == launcher_kind::torchrun);
  CHECK(detect(e).size == 4);
  // Overridden master on a single node: no loopback, the named one is kept.
  const world_info one =
      detect({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"DISTCOMM_MASTER_ADDR", "x"}});
  CHECK(one.master_addr == "x");
  CHECK_FALSE(one.loopback_master);
}

TEST_CASE("world: nested launchers that agree are accepted") {
  // torchrun (4 workers per node) started by mpirun on two nodes.
  CHECK(detect({{"RANK", "5"},
                {"WORLD_SIZE", "8"},
                {"OMPI_COMM_WORLD_RANK", "1"},
                {"OMPI_COMM_WORLD_SIZE", "2"}})
            .rank == 5);
  // The same world told twice.
  CHECK(detect({{"RANK", "1"},
                {"WORLD_SIZE", "2"},
                {"OMPI_COMM_WORLD_RANK", "1"},
                {"OMPI_COMM_WORLD_SIZE", "2"}})
            .launcher == launcher_kind::torchrun);
  // Half a second launcher is not compared.
  CHECK(detect({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"PMI_RANK", "0"}}).rank == 1);
}

// ---- the host-list expander ------------------------------------------------------------------

TEST_CASE("world: expand_hostlist") {
  using list = std::vector<std::string>;
  CHECK(expand_hostlist("node1") == list{"node1"});
  CHECK(expand_hostlist("a,b,c") == list{"a", "b", "c"});
  CHECK(expand_hostlist("node[01-04,07]") ==
        list{"node01", "node02", "node03", "node04", "node07"});
  CHECK(expand_hostlist("node[01-04,07],gpu-[1-2]") ==
        list{"node01", "node02", "node03", "node04", "node07", "gpu-1", "gpu-2"});
  CHECK(expand_hostlist("n[8-10]") == list{"n8", "n9", "n10"});
  CHECK(expand_hostlist("n[08-10]") == list{"n08", "n09", "n10"});
  CHECK(expand_hostlist("n[098-101]") == list{"n098", "n099", "n100", "n101"});
  CHECK(expand_hostlist("n[7]") == list{"n7"});
  CHECK(expand_hostlist("[1-2]x") == list{"1x", "2x"});
  CHECK(expand_hostlist("rack[1-2]-n[01-02]") ==
        list{"rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"});
  CHECK(expand_hostlist("a[1,3]b[5]c[0-1]") == list{"a1b5c0", "a1b5c1", "a3b5c0", "a3b5c1"});
  CHECK(expand_hostlist("10.0.0.[1-3]") == list{"10.0.0.1", "10.0.0.2", "10.0.0.3"});
  CHECK(expand_hostlist("x[000000000000000001-000000000000000002]").size() == 2);
  CHECK(expand_hostlist("n[0-99]").size() == 100);
  CHECK(expand_hostlist("n[0-99]").back() == "n99");

  CHECK(first_host("node[01-04,07],gpu-[1-2]") == "node01");
  CHECK(first_host("gpu-[3-4]x[5-6]") == "gpu-3x5");
  CHECK(first_host("n[0-999999999999999999]") == "n0");  // checked, not expanded

  for (const char* bad : {"", "node[1-", "node[1-2", "node]", "node[]", "node[a]", "node[1-a]",
                          "node[4-1]", "a,,b", ",a", "a,", "node[1-2]]", "n[[1]]", "a b", "a\tb",
                          "n[1 -2]", "n[-1]", "n[1-2,]", "n[0000000000000000001]"}) {
    CAPTURE(bad);
    const std::string m = error_of([&] { expand_hostlist(bad); });
    CHECK_HAS(m, "rendezvous: host list '");
    CHECK_HAS(m, "is not a valid host list");
    CHECK(error_of([&] { first_host(bad); }) == m);
  }
  // Too many names: refused before anything is expanded.
  CHECK_HAS(error_of([] { expand_hostlist("n[0-999999999999999999]"); }), "names more than");
  CHECK_HAS(error_of([] { expand_hostlist("a[0-999]b[0-999]c[0-999]"); }), "names more than");
  CHECK_HAS(error_of([] { expand_hostlist("n[1-3]", 2); }), "names more than 2 hosts");
  CHECK_HAS(error_of([] { expand_hostlist("a,b,c", 2); }), "names more than 2 hosts");
  CHECK(expand_hostlist("n[1-3]", 3).size() == 3);
  CHECK_HAS(error_of([] { expand_hostlist("n", 0); }), "names more than 0 hosts");
}

// ---- printing and the master -----------------------------------------------------------------

TEST_CASE("world: to_string and to_string(launcher_kind)") {
  world_info w;
  CHECK(w.to_string() == "rank 0/1 (local 0/1, node 0) master unset from none");
  w.rank = 3;
  w.size = 8;
  w.local_rank = 1;
  w.local_size = 4;
  w.node_rank = 1;
  w.master_addr = "10.0.0.1";
  w.master_port = 29500;
  w.launcher = launcher_kind::torchrun;
  CHECK(w.to_string() == "rank 3/8 (local 1/4, node 1) master 10.0.0.1:29500 from torchrun");
  w.master_port = 0;
  CHECK(w.to_string() == "rank 3/8 (local 1/4, node 1) master 10.0.0.1:? from torchrun");
  w.master_addr.clear();
  w.master_port = 1;
  CHECK(w.to_string() == "rank 3/8 (local 1/4, node 1) master ?:1 from torchrun");
  w.ps_servers = 2;
  w.launcher = launcher_kind::tf_config;
  CHECK_HAS(w.to_string(), "from tf_config (ps_servers 2)");
  CHECK(std::string(to_string(launcher_kind::distcomm)) == "distcomm");
  CHECK(std::string(to_string(launcher_kind::torchrun)) == "torchrun");
  CHECK(std::string(to_string(launcher_kind::open_mpi)) == "open_mpi");
  CHECK(std::string(to_string(launcher_kind::mpich)) == "mpich");
  CHECK(std::string(to_string(launcher_kind::slurm)) == "slurm");
  CHECK(std::string(to_string(launcher_kind::tf_config)) == "tf_config");
  CHECK(std::string(to_string(launcher_kind::none)) == "none");
}

TEST_CASE("world: single_node") {
  world_info w;
  CHECK(w.single_node());
  w.size = 4;
  CHECK_FALSE(w.single_node());
  w.local_size = 4;
  CHECK(w.single_node());
  // A local rank without a local size: only the lower bound is known.
  CHECK_FALSE(detect({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}}).single_node());
  CHECK(detect({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}}).single_node());
}

TEST_CASE("world: require_master says what to set for each launcher") {
  world_info w;
  w.size = 4;
  w.master_addr = "h";
  w.master_port = 1;
  CHECK_NOTHROW(require_master(w));

  w.master_addr.clear();
  w.master_port = 0;
  w.launcher = launcher_kind::torchrun;
  CHECK(error_of([&] { require_master(w); }) ==
        "rendezvous: this 4-rank world (torchrun) has no master address or port; set MASTER_ADDR "
        "and MASTER_PORT (or DISTCOMM_MASTER_ADDR/PORT) to rank 0's host and a free port");
  w.launcher = launcher_kind::open_mpi;
  CHECK_HAS(error_of([&] { require_master(w); }), "AZ_BATCH_MASTER_NODE=host:port");
  CHECK_HAS(error_of([&] { require_master(w); }), "or use the MPI backend");
  w.launcher = launcher_kind::slurm;
  w.master_addr = "gpu07";
  CHECK(error_of([&] { require_master(w); }) ==
        "rendezvous: this 4-rank world (slurm) has no master port; set MASTER_PORT (or "
        "DISTCOMM_MASTER_PORT) to a free port on rank 0's host gpu07, or use the MPI backend, "
        "which bootstraps through MPI");
  w.launcher = launcher_kind::distcomm;
  CHECK_HAS(error_of([&] { require_master(w); }), "set DISTCOMM_MASTER_PORT to a free port");
  w.launcher = launcher_kind::mpich;
  w.master_addr.clear();
  w.master_port = 5;
  CHECK_HAS(error_of([&] { require_master(w); }), "has no master address; set MASTER_ADDR");
  // Loopback supplies the address on one node, never the port.
  const world_info one = detect({{"OMPI_COMM_WORLD_RANK", "0"},
                                 {"OMPI_COMM_WORLD_SIZE", "2"},
                                 {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  CHECK_HAS(error_of([&] { require_master(one); }), "has no master port");
}

// ---- robustness ------------------------------------------------------------------------------

TEST_CASE(
    "world: garbage in any variable raises rendezvous_error or nothing, never another error") {
  const std::vector<std::string> names = {"DISTCOMM_RANK",
                                          "DISTCOMM_WORLD_SIZE",
                                          "DISTCOMM_LOCAL_RANK",
                                          "DISTCOMM_LOCAL_WORLD_SIZE",
                                          "DISTCOMM_NODE_RANK",
                                          "DISTCOMM_MASTER_ADDR",
                                          "DISTCOMM_MASTER_PORT",
                                          "RANK",
                                          "WORLD_SIZE",
                                          "LOCAL_RANK",
                                          "LOCAL_WORLD_SIZE",
                                          "GROUP_RANK",
                                          "NODE_RANK",
                                          "MASTER_ADDR",
                                          "MASTER_PORT",
                                          "OMPI_COMM_WORLD_RANK",
                                          "OMPI_COMM_WORLD_SIZE",
                                          "OMPI_COMM_WORLD_LOCAL_RANK",
                                          "OMPI_COMM_WORLD_LOCAL_SIZE",
                                          "AZ_BATCH_MASTER_NODE",
                                          "AZ_BATCHAI_MPI_MASTER_NODE",
                                          "PMI_RANK",
                                          "PMI_SIZE",
                                          "MPI_LOCALRANKID",
                                          "MPI_LOCALNRANKS",
                                          "PMIX_RANK",
                                          "SLURM_STEP_ID",
                                          "SLURM_PROCID",
                                          "SLURM_NTASKS",
                                          "SLURM_STEP_NUM_TASKS",
                                          "SLURM_LOCALID",
                                          "SLURM_NODEID",
                                          "SLURM_STEP_TASKS_PER_NODE",
                                          "SLURM_NTASKS_PER_NODE",
                                          "SLURM_STEP_NODELIST",
                                          "SLURM_JOB_NODELIST",
                                          "TF_CONFIG"};
  const std::vector<std::string> values = {
      "0",
      "1",
      "3",
      "-1",
      "2147483647",
      "2147483648",
      "99999999999999999999999",
      "x",
      "1x",
      " 1",
      "+1",
      "0x10",
      "1e3",
      "[",
      "]",
      "a[1-",
      "n[0-99999999999]",
      "h:",
      ":1",
      "h:0",
      "h:65536",
      "[::1]:1",
      "[::1]",
      "2(x",
      "2(x0)",
      "1(x2),3",
      "{",
      "{}",
      "[]",
      "null",
      R"({"cluster":{"worker":["a:1"]},"task":{"type":"worker","index":0}})",
      R"({"cluster":{"worker":[1]},"task":{"type":"worker","index":0}})",
      R"({"cluster":{"worker":["a:1"]},"task":{"type":"worker","index":1e400}})",
      R"({"cluster":{"worker":["a:1"]},"task":{"type":"worker","index":18446744073709551615}})",
      R"({"cluster":{"worker":["a:1"]},"task":{"type":"worker","index":-9223372036854775808}})",
      R"({"cluster":{"worker":["a:1"]},"task":{"type":"worker","index":0.5}})",
      R"({"cluster":[],"task":[]})",
      "\"\\ud800\""};
  // A fixed pseudo-random walk over environments of 1-6 variables.
  std::uint64_t state = 0x9e3779b97f4a7c15ULL;
  const auto next = [&](std::size_t n) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return static_cast<std::size_t>(state % n);
  };
  int refused = 0;
  for (int i = 0; i < 20000; ++i) {
    env e;
    const std::size_t count = 1 + next(6);
    for (std::size_t k = 0; k < count; ++k)
      e[names[next(names.size())]] = values[next(values.size())];
    std::string message;
    try {
      const world_info w = detect(e);
      // Whatever is accepted is consistent.
      CHECK(w.rank >= 0);
      CHECK(w.rank < w.size);
      CHECK(w.local_rank < w.local_size);
      CHECK(w.local_size <= w.size);
      CHECK(w.node_rank < w.size);
      CHECK((w.master_port >= 0 && w.master_port <= 65535));
    } catch (const rendezvous_error& err) {
      ++refused;
      message = err.what();
      CHECK(message.rfind("rendezvous: ", 0) == 0);
    } catch (const std::exception& err) {
      FAIL_CHECK("not a rendezvous_error: " << err.what());
    }
  }
  CHECK(refused > 1000);
}

TEST_CASE("world: detect_world() reads the process environment") {
  // DistComm's own variables match first, so the rest of this process's environment (a CI
  // runner under Slurm, say) cannot change the answer.
  REQUIRE(setenv("DISTCOMM_RANK", "1", 1) == 0);
  REQUIRE(setenv("DISTCOMM_WORLD_SIZE", "3", 1) == 0);
  const world_info w = detect_world();
  unsetenv("DISTCOMM_RANK");
  unsetenv("DISTCOMM_WORLD_SIZE");
  CHECK(w.launcher == launcher_kind::distcomm);
  CHECK(w.rank == 1);
  CHECK(w.size == 3);
}
