// TF_CONFIG (TFJob, AzureML TensorFlow, Vertex/Cloud ML) mapped to DistComm ranks:
//   ps j -> j,  chief j -> P + j,  worker i -> P + C + i   (P ps tasks, C chiefs)
// so the ps tasks are the server ranks 0..P-1 of strategy::parameter_server and P its default
// server count, while a job without ps tasks keeps chief -> 0, worker i -> i + C. Rank 0 hosts
// the store, so the master is rank 0's own `host:port`. Evaluators are outside the world.
// docs/RENDEZVOUS.md explains the choice.
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "distcomm/core/error.hpp"
#include "world_detail.hpp"

namespace distcomm::detail {
namespace {

using nlohmann::json;

// TF_CONFIG is a few levels deep; anything deeper is not a cluster description.
constexpr int max_depth = 16;

[[noreturn]] void bad(const std::string& why) {
  throw rendezvous_error("rendezvous: TF_CONFIG " + why);
}

const char* type_name(const json& j) { return j.type_name(); }  // "string", "number", ...

// The task lists in rank order. `master` is the name older TensorFlow (and Cloud ML Engine) gives
// the chief.
struct role {
  const char* key;
  const std::vector<std::string>* tasks;
};

}  // namespace

std::optional<tf_world> parse_tf_config(const std::string& text) {
  json doc;
  try {
    doc = json::parse(text, [](int depth, json::parse_event_t, json&) {
      if (depth > max_depth) {
        throw rendezvous_error("rendezvous: TF_CONFIG is nested more than " +
                               std::to_string(max_depth) + " levels deep");
      }
      return true;
    });
  } catch (const json::exception& e) {
    bad("is not valid JSON: " + std::string(e.what()));
  }
  if (!doc.is_object()) bad("must be a JSON object, not " + std::string(type_name(doc)));

  const auto cluster_it = doc.find("cluster");
  if (cluster_it == doc.end() || cluster_it->is_null()) return std::nullopt;
  const json& cluster = *cluster_it;
  if (!cluster.is_object()) {
    bad("\"cluster\" must be an object of task lists, not " + std::string(type_name(cluster)));
  }
  if (cluster.empty()) return std::nullopt;

  std::map<std::string, std::vector<std::string>> lists;
  for (auto it = cluster.begin(); it != cluster.end(); ++it) {
    const std::string& key = it.key();
    if (key != "chief" && key != "master" && key != "worker" && key != "ps" && key != "evaluator") {
      bad("cluster has task type " + quote(key) +
          "; DistComm knows chief, master, worker, ps and evaluator");
    }
    if (!it->is_array()) {
      bad("cluster." + key + " must be a list of \"host:port\" strings, not " +
          std::string(type_name(*it)));
    }
    std::vector<std::string>& tasks = lists[key];
    for (const json& t : *it) {
      if (!t.is_string()) {
        bad("cluster." + key + "[" + std::to_string(tasks.size()) + "] must be a \"host:port\" " +
            "string, not " + std::string(type_name(t)));
      }
      tasks.push_back(t.get<std::string>());
    }
  }
  if (!lists["chief"].empty() && !lists["master"].empty()) {
    bad("names both a chief and a master (the old name of the chief); keep one");
  }

  const auto task_it = doc.find("task");
  if (task_it == doc.end() || task_it->is_null()) {
    bad("has a cluster but no task: set \"task\": {\"type\": ..., \"index\": ...} for this "
        "process");
  }
  const json& task = *task_it;
  if (!task.is_object()) bad("\"task\" must be an object, not " + std::string(type_name(task)));
  const auto type_it = task.find("type");
  if (type_it == task.end() || !type_it->is_string()) {
    bad("task has no \"type\" string (chief, worker, ps or evaluator)");
  }
  const std::string type = type_it->get<std::string>();
  const auto index_it = task.find("index");
  if (index_it == task.end()) bad("task has no \"index\"");
  if (!index_it->is_number_integer()) {
    bad("task index must be a non-negative integer, not " + std::string(type_name(*index_it)) +
        " " + quote(index_it->dump(-1, ' ', false, json::error_handler_t::replace)));
  }
  if (!index_it->is_number_unsigned() && index_it->get<long long>() < 0) {
    bad("task index " + std::to_string(index_it->get<long long>()) + " is negative");
  }
  const auto index = index_it->get<unsigned long long>();

  if (type == "evaluator") {
    bad("task is evaluator " + std::to_string(index) +
        ": an evaluator is not part of the training world and averages no gradients; do not "
        "start DistComm in the evaluator (or unset TF_CONFIG for it)");
  }
  if (type != "chief" && type != "master" && type != "worker" && type != "ps") {
    bad("task type " + quote(type) + " is not one of chief, master, worker, ps, evaluator");
  }
  const std::vector<std::string>& own = lists[type];
  if (index >= own.size()) {
    bad("task index " + std::to_string(index) + " is out of range: cluster." + type + " has " +
        std::to_string(own.size()) + (own.size() == 1 ? " task" : " tasks"));
  }

  const std::vector<std::string>& chiefs =
      lists["chief"].empty() ? lists["master"] : lists["chief"];
  if (lists["ps"].size() + chiefs.size() + lists["worker"].size() > 1000000) {
    bad("names more than 1000000 tasks");
  }
  const std::vector<role> roles = {
      {"ps", &lists["ps"]},
      {lists["chief"].empty() ? "master" : "chief", &chiefs},
      {"worker", &lists["worker"]},
  };
  // Every address in rank order, checked; hosts decide local rank, local size and node.
  std::vector<std::string> hosts;
  std::map<std::string, std::string> taken;  // `host:port` -> the task that has it
  tf_world w;
  for (const role& r : roles) {
    for (std::size_t i = 0; i < r.tasks->size(); ++i) {
      const std::string name = "cluster." + std::string(r.key) + "[" + std::to_string(i) + "]";
      const std::string& address = (*r.tasks)[i];
      const host_port hp = parse_host_port(address, "TF_CONFIG " + name + "=" + quote(address));
      const auto [at, fresh] = taken.emplace(hp.host + ":" + std::to_string(hp.port), name);
      if (!fresh) bad(name + "=" + quote(address) + " repeats the address of " + at->second);
      if (hosts.empty()) {
        w.master_host = hp.host;
        w.master_port = hp.port;
      }
      if (type == r.key && i == index) w.rank = static_cast<int>(hosts.size());
      hosts.push_back(hp.host);
    }
  }
  w.size = static_cast<int>(hosts.size());
  w.ps = static_cast<int>(lists["ps"].size());
  w.task = type + " " + std::to_string(index);

  const std::string& mine = hosts[static_cast<std::size_t>(w.rank)];
  std::map<std::string, int> node_of;  // host -> node, numbered in order of first appearance
  w.local_size = 0;
  for (std::size_t r = 0; r < hosts.size(); ++r) {
    node_of.emplace(hosts[r], static_cast<int>(node_of.size()));
    if (hosts[r] != mine) continue;
    if (r < static_cast<std::size_t>(w.rank)) ++w.local_rank;
    ++w.local_size;
  }
  w.node_rank = node_of[mine];
  return w;
}

}  // namespace distcomm::detail
