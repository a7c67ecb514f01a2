#include "torch_flight_recorder.hpp"

#include "torch_api.hpp"

#if DISTCOMM_TORCH_HAS_FLIGHT_RECORDER
#include <torch/csrc/distributed/c10d/FlightRecorder.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distcomm/check/fingerprint.hpp"
#include "distcomm/core/dtype.hpp"
#include "distcomm/trace/flight_recorder.hpp"
#include "tensors.hpp"
#endif

namespace distcomm::torch_binding {

#if DISTCOMM_TORCH_HAS_FLIGHT_RECORDER
namespace {

using trace::flight_recorder;
using record = flight_recorder::entry;

// torch's name of a DistComm collective (the analyzer's COLLECTIVES), and the sizes torch would
// record of its input and output for one rank of `size`: `count` is the fingerprint's (per rank
// for reduce_scatter, scatter's and gather's per-rank block).
struct torch_op {
  const char* name;
  std::int64_t in, out;
};
constexpr bool any_name = DISTCOMM_TORCH_ANALYZER_READS_ANY_NAME;
torch_op op_of(const check::call_fingerprint& fp, std::int64_t size) {
  const auto n = static_cast<std::int64_t>(fp.count);
  switch (static_cast<check::call_kind>(fp.kind)) {
    case check::call_kind::allreduce:
      return {"all_reduce", n, n};
    case check::call_kind::grouped_allreduce:
      return {"allreduce_coalesced", n, n};
    case check::call_kind::reduce_scatter:
      return {"reduce_scatter", n * size, n};
    case check::call_kind::allgather:
      return {"all_gather", n, n * size};
    case check::call_kind::allgatherv:
      return {any_name ? "all_gather_v" : "all_gather", n, n};
    case check::call_kind::broadcast:
      return {"broadcast", n, n};
    case check::call_kind::reduce:
      return {"reduce", n, n};
    case check::call_kind::gather:
      return {"gather", n, n * size};
    case check::call_kind::scatter:
      return {"scatter", n * size, n};
    case check::call_kind::alltoall:
      return {"all_to_all", n, n};
    case check::call_kind::alltoallv:
      return {any_name ? "all_to_all_v_single" : "all_to_all", n, n};
    case check::call_kind::barrier:
      return {any_name ? "barrier" : "all_reduce_barrier", 0, 0};
    default:
      return {"", 0, 0};  // not a collective (point to point is not recorded)
  }
}

// torch's states: a collective DistComm saw fail had started, as far as any rank can tell.
const std::string& state_of(flight_recorder::state s) {
  switch (s) {
    case flight_recorder::state::posted:
      return c10d::scheduled_state_str;
    case flight_recorder::state::completed:
      return c10d::completed_state_str;
    default:
      return c10d::started_state_str;
  }
}

c10::IValue ns_or_none(std::int64_t ns) { return ns == 0 ? c10::IValue() : c10::IValue(ns); }

c10::List<c10::IValue> sizes(std::int64_t n) {
  c10::List<c10::IValue> outer = c10d::new_list();
  c10::List<c10::IValue> shape = c10d::new_list();
  shape.push_back(n);
  outer.push_back(shape);
  return outer;
}

c10::List<c10::IValue> dtypes(const check::call_fingerprint& fp) {
  c10::List<c10::IValue> out = c10d::new_list();
  if (fp.type >= 0) {
    out.push_back(std::string(c10::toString(scalar_type_of(static_cast<dtype>(fp.type)))));
  }
  return out;
}

// "[0, 1, 2]", as torch writes a group's ranks (its c10d::ranks_str formats with fmt, which
// libtorch does not export to extensions).
std::string ranks_text(const std::vector<int>& ranks) {
  std::string s = "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

// One entry, as torch's recorder writes it, of recorder `r` (number `pg_id` of the process).
c10::Dict<c10::IValue, c10::IValue> entry_of(const trace::dump_contents& d,
                                             const flight_recorder& r, std::int64_t pg_id,
                                             const record& e, std::int64_t record_id,
                                             const std::string& desc) {
  const auto size = static_cast<std::int64_t>(r.who().ranks.size());
  const torch_op op = op_of(e.fp, size);
  auto j = c10d::new_dict();
  j.insert(c10d::record_id_key_str, record_id);
  j.insert(c10d::pg_id_key_str, pg_id);
  j.insert(c10d::pg_name_key_str, c10::ivalue::Tuple::create(r.who().name, desc));
  j.insert(c10d::collective_seq_id_key_str, static_cast<std::int64_t>(e.seq) + 1);
  j.insert(c10d::p2p_seq_id_key_str, std::int64_t{0});
  j.insert(c10d::op_id_key_str, static_cast<std::int64_t>(e.seq) + 1);
  j.insert(c10d::profiling_name_key_str, std::string(torch_flight_recorder_format()) + op.name);
  j.insert(c10d::time_created_key_str,
           d.wall_ns(e.posted != flight_recorder::time_point{} ? e.posted : e.started));
  j.insert(c10d::input_sizes_key_str, sizes(op.in));
  j.insert(c10d::input_dtypes_key_str, dtypes(e.fp));
  j.insert(c10d::output_sizes_key_str, sizes(op.out));
  j.insert(c10d::output_dtypes_key_str, dtypes(e.fp));
  j.insert(c10d::state_key_str, state_of(e.st));
  j.insert(c10d::time_discovered_started_key_str, ns_or_none(d.wall_ns(e.started)));
  j.insert(c10d::time_discovered_completed_key_str,
           ns_or_none(e.st == flight_recorder::state::completed ? d.wall_ns(e.ended) : 0));
  j.insert(c10d::retired_key_str,
           e.st == flight_recorder::state::completed || e.st == flight_recorder::state::failed);
  j.insert(c10d::timeout_key_str, static_cast<std::int64_t>(r.who().timeout.count() * 1000.0));
  j.insert(c10d::is_p2p_key_str, false);
  j.insert(c10d::frames_key_str, c10d::new_list());
  return j;
}

// The dump in torch's form: every recorder a process group of torch's ("pg_config", keyed by the
// recorder's name, which the binding gives after torch's group: process_group.cpp), its entries
// in the order they were posted across groups, as torch's one recorder per process keeps them.
void write_torch_dump(const trace::dump_contents& d) {
  struct item {
    flight_recorder::time_point at;
    std::size_t pg;
    record e;
  };
  std::vector<item> items;
  auto pg_config = c10d::new_dict();
  auto pg_status = c10d::new_dict();
  std::vector<std::string> descs;
  for (std::size_t i = 0; i < d.recorders.size(); ++i) {
    const flight_recorder& r = *d.recorders[i];
    const flight_recorder::identity& id = r.who();
    descs.push_back("distcomm " + id.backend + "/" + id.strategy);
    auto config = c10d::new_dict();
    config.insert(c10d::name_key_str, id.name);
    config.insert("desc", descs.back());
    config.insert("ranks", ranks_text(id.ranks));
    pg_config.insert(id.name, config);
    std::int64_t enqueued = -1, started = -1, completed = -1;
    for (record& e : r.entries()) {
      if (op_of(e.fp, 1).name[0] == '\0') continue;
      const auto seq = static_cast<std::int64_t>(e.seq) + 1;
      enqueued = std::max(enqueued, seq);
      if (e.st != flight_recorder::state::posted) started = std::max(started, seq);
      if (e.st == flight_recorder::state::completed) completed = std::max(completed, seq);
      const auto at = e.posted != flight_recorder::time_point{} ? e.posted : e.started;
      items.push_back({at, i, std::move(e)});
    }
    auto status = c10d::new_dict();
    status.insert("last_enqueued_collective", enqueued);
    status.insert("last_started_collective", started);
    status.insert("last_completed_collective", completed);
    pg_status.insert(id.name, status);
  }
  std::stable_sort(items.begin(), items.end(),
                   [](const item& a, const item& b) { return a.at < b.at; });
  auto entries = c10d::new_list();
  for (std::size_t k = 0; k < items.size(); ++k) {
    const item& it = items[k];
    entries.push_back(entry_of(d, *d.recorders[it.pg], static_cast<std::int64_t>(it.pg), it.e,
                               static_cast<std::int64_t>(k), descs[it.pg]));
  }
  auto dump = c10d::new_dict();
  dump.insert(c10d::version_key_str, c10d::version_val_str);
  dump.insert(c10d::comm_lib_version_key_str, std::string("distcomm ") + DISTCOMM_TORCH_VERSION);
  dump.insert(c10d::pg_config_key_str, pg_config);
  dump.insert(c10d::pg_status_key_str, pg_status);
  dump.insert(c10d::entries_key_str, entries);
  trace::write_dump_file(d.dir, "distcomm_torch_fr_" + std::to_string(d.job_rank),
                         c10d::pickle_str(dump));
}

}  // namespace

void add_torch_flight_recorder_format() { trace::add_dump_writer("torch", &write_torch_dump); }
// torch's names for the library that ran an entry (its analyzer's), not DistComm's backends.
const char* torch_flight_recorder_format() { return any_name ? "distcomm:" : "nccl:"; }
#else
void add_torch_flight_recorder_format() {}
const char* torch_flight_recorder_format() { return ""; }
#endif

}  // namespace distcomm::torch_binding
