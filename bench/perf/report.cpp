#include "report.hpp"

#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <utility>

#include "distcomm/core/error.hpp"
#include "distcomm/strategy/table.hpp"

namespace distcomm::bench {

namespace {

// Column blocks are 32 characters wide, as nccl-tests' out-of-place and in-place blocks.
std::string centered(const std::string& text, std::size_t width = 32) {
  if (text.size() >= width) return text;
  const std::size_t left = (width - text.size()) / 2;
  return std::string(left, ' ') + text + std::string(width - text.size() - left, ' ');
}

void print_block(const measurement& m) {
  if (!m.ran) {
    std::printf("  %7s  %6s  %6s  %5s", "N/A", "N/A", "N/A", "N/A");
    return;
  }
  if (m.wrong < 0) {
    std::printf("  %7s  %6.2f  %6.2f  %5s", format_time(m.time_us).c_str(), m.algbw, m.busbw,
                "N/A");
  } else {
    std::printf("  %7s  %6.2f  %6.2f  %5lld", format_time(m.time_us).c_str(), m.algbw, m.busbw,
                static_cast<long long>(m.wrong));
  }
}

// The column the peer's is compared with: in place, as the peers' allreduce runs; out of place
// where DistComm has only that form (alltoall, like MPI_Alltoall here).
const measurement& compared(const row& r) { return r.in_place.ran ? r.in_place : r.out_of_place; }
bool has_ratio(const row& r) { return compared(r).ran && r.peer.ran && r.peer.busbw > 0; }
// Ours against the floor: how many round trips of the cache line our collective costs.
bool has_floor(const row& r) { return compared(r).ran && r.floor_us > 0; }
double over_floor(const row& r) { return compared(r).time_us / r.floor_us; }

nlohmann::json to_json(const measurement& m) {
  if (!m.ran) return nullptr;
  nlohmann::json j = {{"time_us", m.time_us}, {"algbw_GBps", m.algbw}, {"busbw_GBps", m.busbw}};
  j["wrong"] = m.wrong < 0 ? nlohmann::json(nullptr) : nlohmann::json(m.wrong);
  return j;
}

std::string csv_cells(const measurement& m) {
  if (!m.ran) return ",,,";
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%.3f,%.6g,%.6g,", m.time_us, m.algbw, m.busbw);
  return buf + (m.wrong < 0 ? std::string() : std::to_string(m.wrong));
}

}  // namespace

std::string device_line(int rank, const std::string& backend) {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "unknown");
  char line[512];
  std::snprintf(line, sizeof(line), "Rank %2d Group %2d Pid %6d on %10s backend %s", rank, 0,
                static_cast<int>(::getpid()), host, backend.c_str());
  return line;
}

double bus_factor(collective c, int ranks) noexcept {
  const double p = ranks;
  switch (c) {
    case collective::allreduce:
      return 2.0 * (p - 1) / p;
    case collective::reduce_scatter:
    case collective::allgather:
    case collective::alltoall:  // as nccl-tests' alltoall_perf
    case collective::alltoallv:
      return (p - 1) / p;
    case collective::broadcast:
      return 1.0;
  }
  return 1.0;
}

std::string format_time(double us) {
  char buf[32];
  if (us >= 10000.0) {
    std::snprintf(buf, sizeof(buf), "%7.0f", us);
  } else if (us >= 100.0) {
    std::snprintf(buf, sizeof(buf), "%7.1f", us);
  } else {
    std::snprintf(buf, sizeof(buf), "%7.2f", us);
  }
  return buf;
}

report::report(const options& o, run_info info) : o_(o), info_(std::move(info)) {}

void report::header() {
  const bool factor = o_.step_factor > 1;
  std::printf("# Collective test starting: %s\n", info_.program.c_str());
  std::printf(
      "# DistComm %s backend %s collective %s strategy %s fusion-tensors %zu "
      "(threshold %s)",
      DISTCOMM_BENCH_VERSION, info_.backend.c_str(), to_string(o_.coll), info_.strategy.c_str(),
      o_.fusion_tensors, format_bytes(info_.fusion_threshold).c_str());
  if (!info_.peer.empty()) {
    std::printf(" peer %s (%s)", info_.peer.c_str(), info_.peer_detail.c_str());
  }
  std::printf("\n");
  if (o_.pattern == "tp") {
    std::printf("# pattern tp: %.1f us of compute before every call, included in every time\n",
                o_.compute_us);
  }
  std::printf(
      "# nThread %d nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d "
      "iters: %d agg iters: %d validation: %d graph: 0\n",
      info_.threads, o_.min_bytes, o_.max_bytes, factor ? o_.step_factor : o_.step_bytes,
      factor ? "factor" : "bytes", o_.warmup_iters, o_.iters, o_.agg_iters, o_.check);
  std::printf("#\n# Using devices\n");
  for (const std::string& line : info_.devices) std::printf("#  %s\n", line.c_str());
  if (!o_.profile_file.empty()) {
    std::fflush(stdout);
    return;  // the profile prints its own table
  }
  const bool peer = !info_.peer.empty();
  // nccl-tests' own heading, then DistComm's peer block.
  std::printf(
      "#\n# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place"
      "          ",
      "", "", "", "", "");
  if (peer) {
    const bool exchange = o_.coll == collective::alltoall || o_.coll == collective::alltoallv;
    const char* form = exchange ? ", out-of-place" : ", in-place";
    std::printf("%s", centered("peer " + info_.peer + form).c_str());
  }
  if (info_.floor) std::printf("%s", centered("floor", 17).c_str());
  std::printf("\n# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s", "size",
              "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
              "busbw", "#wrong");
  if (peer) {
    std::printf("  %7s  %6s  %6s %6s  %6s", "time", "algbw", "busbw", "#wrong", "ratio");
  }
  if (info_.floor) std::printf("  %7s  %6s", "time", "x");
  std::printf("\n# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s", "(B)",
              "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
              "");
  if (peer) std::printf("  %7s  %6s  %6s  %5s  %6s", "(us)", "(GB/s)", "(GB/s)", "", "");
  if (info_.floor) std::printf("  %7s  %6s", "(us)", "floor");
  std::printf("\n");
  std::fflush(stdout);
}

void report::count(const measurement& m, bool ours) {
  if (!m.ran) return;
  if (m.wrong > 0) ++errors_;
  if (ours) {
    busbw_sum_ += m.busbw;
    ++busbw_n_;
  } else {
    peer_busbw_sum_ += m.busbw;
    ++peer_busbw_n_;
  }
}

void report::add(const row& r) {
  if (o_.run_cycles != 1 && (rows_.empty() || rows_.back().cycle != r.cycle)) {
    std::printf("# Cycle %d\n", r.cycle);
  }
  std::printf("%12zu  %12zu  %8s  %6s  %6d", r.bytes, r.count, nccl_name(o_.type), to_string(o_.op),
              r.root);
  print_block(r.out_of_place);
  print_block(r.in_place);
  if (!info_.peer.empty()) {
    print_block(r.peer);
    if (has_ratio(r)) {
      std::printf("  %6.2f", compared(r).busbw / r.peer.busbw);
    } else {
      std::printf("  %6s", "N/A");
    }
  }
  if (info_.floor) {
    if (has_floor(r)) {
      std::printf("  %7s  %6.2f", format_time(r.floor_us).c_str(), over_floor(r));
    } else {
      std::printf("  %7s  %6s", "N/A", "N/A");
    }
  }
  std::printf("\n");
  std::fflush(stdout);
  count(r.out_of_place, true);
  count(r.in_place, true);
  count(r.peer, false);
  // A sweep that runs forever (-N 0) keeps nothing: its rows are only printed.
  if (o_.run_cycles != 0) rows_.push_back(r);
}

void report::profile_header(const std::string& file, std::size_t tensors, std::size_t elements) {
  profile_file_ = file;
  std::printf("#\n# Gradient set %s: %zu tensors, %zu elements of %s (%zu bytes), redop %s\n",
              file.c_str(), tensors, elements, nccl_name(o_.type), elements * dtype_size(o_.type),
              to_string(o_.op));
  std::printf("#\n# %12s  %8s  %11s  %7s  %6s  %6s %6s\n", "mode", "tensors", "collectives", "time",
              "algbw", "busbw", "#wrong");
  std::printf("# %12s  %8s  %11s  %7s  %6s  %6s  %5s\n", "", "", "per step", "(us)", "(GB/s)",
              "(GB/s)", "");
  std::fflush(stdout);
}

void report::add(const profile_row& r) {
  std::printf("  %12s  %8zu  %11zu", r.mode.c_str(), r.tensors, r.collectives);
  print_block(r.m);
  std::printf("\n");
  std::fflush(stdout);
  count(r.m, r.mode.rfind("peer", 0) != 0);
  profile_.push_back(r);
}

void report::finish() {
  std::printf("# Out of bounds values : %d %s\n", errors_, errors_ ? "FAILED" : "OK");
  std::printf("# Avg bus bandwidth    : %g \n", busbw_n_ ? busbw_sum_ / busbw_n_ : 0.0);
  if (peer_busbw_n_) {
    std::printf("# Avg peer bus bandwidth : %g (%s)\n", peer_busbw_sum_ / peer_busbw_n_,
                info_.peer.c_str());
  }
  std::printf("#\n");
  std::fflush(stdout);
  if (!o_.json_file.empty()) write_json();
  if (!o_.csv_file.empty()) write_csv();
}

void report::write_json() const {
  nlohmann::json j;
  j["program"] = info_.program;
  j["version"] = DISTCOMM_BENCH_VERSION;
  j["backend"] = info_.backend;
  j["strategy"] = info_.strategy;
  j["collective"] = to_string(o_.coll);
  j["ranks"] = info_.ranks;
  j["threads_per_process"] = info_.threads;
  j["datatype"] = nccl_name(o_.type);
  j["redop"] = to_string(o_.op);
  j["fusion_tensors"] = o_.fusion_tensors;
  j["fusion_threshold"] = info_.fusion_threshold;
  j["iters"] = o_.iters;
  j["agg_iters"] = o_.agg_iters;
  j["warmup_iters"] = o_.warmup_iters;
  j["check"] = o_.check;
  j["average"] = o_.average;
  j["peer"] = info_.peer.empty() ? nlohmann::json(nullptr) : nlohmann::json(info_.peer);
  j["peer_detail"] = info_.peer_detail;
  j["floor"] = info_.floor;
  j["pattern"] = o_.pattern;
  if (o_.pattern == "tp") j["compute_us"] = o_.compute_us;
  j["devices"] = info_.devices;
  j["results"] = nlohmann::json::array();
  for (const row& r : rows_) {
    nlohmann::json e = {{"cycle", r.cycle},
                        {"size", r.bytes},
                        {"count", r.count},
                        {"root", r.root},
                        {"out_of_place", to_json(r.out_of_place)},
                        {"in_place", to_json(r.in_place)}};
    if (!info_.peer.empty()) {
      e["peer"] = to_json(r.peer);
      e["ratio"] =
          has_ratio(r) ? nlohmann::json(compared(r).busbw / r.peer.busbw) : nlohmann::json(nullptr);
    }
    if (info_.floor) {
      e["floor_us"] = has_floor(r) ? nlohmann::json(r.floor_us) : nlohmann::json(nullptr);
      e["x_floor"] = has_floor(r) ? nlohmann::json(over_floor(r)) : nlohmann::json(nullptr);
    }
    j["results"].push_back(std::move(e));
  }
  if (!profile_.empty()) {
    j["profile_file"] = profile_file_;
    j["profile"] = nlohmann::json::array();
    for (const profile_row& r : profile_) {
      j["profile"].push_back({{"mode", r.mode},
                              {"tensors", r.tensors},
                              {"collectives", r.collectives},
                              {"result", to_json(r.m)}});
    }
  }
  j["out_of_bounds"] = errors_;
  j["avg_busbw_GBps"] = busbw_n_ ? busbw_sum_ / busbw_n_ : 0.0;
  std::ofstream f(o_.json_file);
  f << j.dump(2) << "\n";
  if (!f) throw invalid_argument_error("--json: cannot write " + o_.json_file);
}

void report::write_csv() const {
  std::ofstream f(o_.csv_file);
  const std::string prefix = info_.program + "," + info_.backend + "," + info_.strategy + "," +
                             to_string(o_.coll) + "," + std::to_string(info_.ranks) + "," +
                             nccl_name(o_.type) + "," + to_string(o_.op) + ",";
  if (!profile_.empty()) {
    f << "program,backend,strategy,collective,ranks,type,redop,mode,tensors,collectives,"
         "time_us,algbw_GBps,busbw_GBps,wrong\n";
    for (const profile_row& r : profile_) {
      f << prefix << r.mode << "," << r.tensors << "," << r.collectives << "," << csv_cells(r.m)
        << "\n";
    }
  } else {
    f << "program,backend,strategy,collective,ranks,type,redop,cycle,size,count,root,"
         "oop_time_us,oop_algbw_GBps,oop_busbw_GBps,oop_wrong,"
         "ip_time_us,ip_algbw_GBps,ip_busbw_GBps,ip_wrong";
    if (!info_.peer.empty()) {
      f << ",peer,peer_time_us,peer_algbw_GBps,peer_busbw_GBps,peer_wrong,ratio";
    }
    if (info_.floor) f << ",floor_us,x_floor";
    f << "\n";
    for (const row& r : rows_) {
      f << prefix << r.cycle << "," << r.bytes << "," << r.count << "," << r.root << ","
        << csv_cells(r.out_of_place) << "," << csv_cells(r.in_place);
      if (!info_.peer.empty()) {
        f << "," << info_.peer << "," << csv_cells(r.peer) << ",";
        if (has_ratio(r)) f << compared(r).busbw / r.peer.busbw;
      }
      if (info_.floor) {
        f << ",";
        if (has_floor(r))
          f << r.floor_us << "," << over_floor(r);
        else
          f << ",";
      }
      f << "\n";
    }
  }
  if (!f) throw invalid_argument_error("--csv: cannot write " + o_.csv_file);
}

}  // namespace distcomm::bench
