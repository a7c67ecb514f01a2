// distcomm-sim: the cost model of DistComm's strategies (sim/cost.hpp, sim/step.hpp) on a machine
// described by its latencies and bandwidths, for machines and rank counts this one does not have.
//   distcomm-sim allreduce --machine 25gbe-4gpu --ranks 8,128 --bytes 8,1M,64M
//   distcomm-sim step --machine 25gbe-4gpu --profile bench/profiles/resnet50.txt
//       --backward-ms 120 --ranks 8,16,32,64,128
//   distcomm-sim calibrate bw_gloo_ring.json lat_gloo_ring.json    # distcomm-bench-* --json
// Every figure is a prediction; docs/SCALING.md says how close the model came to the runs here.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "distcomm/core/error.hpp"
#include "distcomm/sim/calibrate.hpp"
#include "distcomm/sim/cost.hpp"
#include "distcomm/sim/step.hpp"
#include "distcomm/strategy/table.hpp"

namespace {

namespace sim = distcomm::sim;

// The machine as the options give it; a preset first, then each option given over it.
struct machine_options {
  std::string preset;
  double alpha_us = -1, link_gbps = -1, intra_alpha_us = -1, intra_gbs = -1, reduce_gbs = -1;
  int ranks_per_node = -1, cores_per_node = -1;
  std::string cache_bytes;
  double cached_gbs = -1;
  double ps_oversubscription = -1, oversubscribed_alpha_us = -1;
  std::string segment;
  double call_us = -1, rendezvous_alpha_us = -1, one_way = -1;
  std::string eager_bytes;

  void add_to(CLI::App& app) {
    app.add_option("--machine", preset,
                   "A preset: 25gbe-4gpu (4 GPUs per node over 25 Gb/s "
                   "Ethernet, docs/SCALING.md)");
    app.add_option("--alpha-us", alpha_us, "Latency of a message between nodes, microseconds");
    app.add_option("--link-gbps", link_gbps, "Bandwidth between nodes, Gbit/s");
    app.add_option("--intra-alpha-us", intra_alpha_us, "Latency inside a node, microseconds");
    app.add_option("--intra-gbs", intra_gbs, "Bandwidth inside a node, GB/s");
    app.add_option("--reduce-gbs", reduce_gbs, "Rate of combining (summing) bytes, GB/s");
    app.add_option("--ranks-per-node", ranks_per_node, "Ranks on each node");
    app.add_option("--cores-per-node", cores_per_node,
                   "Cores on each node, when ranks may outnumber them (0: never)");
    app.add_option("--cache-bytes", cache_bytes,
                   "Allreduces up to this size (K/M) move inside a node at --cached-gbs");
    app.add_option("--cached-gbs", cached_gbs, "Bandwidth inside a node from the caches, GB/s");
    app.add_option("--oversubscribed-alpha-us", oversubscribed_alpha_us,
                   "What a message costs more when a node's ranks outnumber its cores, us");
    app.add_option("--ps-oversubscription", ps_oversubscription,
                   "Parameter servers sharing one link (1: a link each)");
    app.add_option("--segment", segment, "Ring and tree segment size (K/M suffixes; 0: none)");
    app.add_option("--call-us", call_us,
                   "What every allreduce costs once, whatever it sends (the call, the ranks "
                   "agreeing on it), microseconds");
    app.add_option("--eager-bytes", eager_bytes,
                   "Messages past this size (K/M) cost --rendezvous-alpha-us more (0: none)");
    app.add_option("--rendezvous-alpha-us", rendezvous_alpha_us,
                   "The rendezvous handshake of a message past --eager-bytes, microseconds");
    app.add_option("--one-way", one_way,
                   "What a one-way message (tree, ps) costs against an exchange (ring, rd): a "
                   "factor on its alpha and beta (default 1)")
        ->check(CLI::PositiveNumber);
  }

  sim::machine make() const {
    sim::machine m;
    bool have = false;
    if (preset == "25gbe-4gpu") {
      // 25 Gb/s Ethernet between nodes (about 25 us a message over TCP), PCIe 3.0 x16 between
      // the node's 4 GPUs (about 10 GB/s, 10 us), GPU memory combining at 200 GB/s.
      m.inter = {25e-6, 8.0 / 25e9};
      m.intra = {10e-6, 1.0 / 10e9};
      m.gamma = 1.0 / 200e9;
      m.ranks_per_node = 4;
      have = true;
    } else if (!preset.empty()) {
      throw distcomm::invalid_argument_error("--machine: no preset '" + preset + "' (25gbe-4gpu)");
    }
    if (alpha_us >= 0) m.inter.alpha = alpha_us * 1e-6;
    if (link_gbps > 0) m.inter.beta = 8.0 / (link_gbps * 1e9);
    if (intra_alpha_us >= 0) m.intra.alpha = intra_alpha_us * 1e-6;
    if (intra_gbs > 0) m.intra.beta = 1.0 / (intra_gbs * 1e9);
    if (reduce_gbs > 0) m.gamma = 1.0 / (reduce_gbs * 1e9);
    if (ranks_per_node > 0) m.ranks_per_node = ranks_per_node;
    if (cores_per_node >= 0) m.cores_per_node = cores_per_node;
    if (oversubscribed_alpha_us >= 0) m.oversubscribed_alpha = oversubscribed_alpha_us * 1e-6;
    if (!cache_bytes.empty()) m.cache_bytes = distcomm::parse_bytes(cache_bytes, "--cache-bytes");
    if (cached_gbs > 0) m.cached_beta = 1.0 / (cached_gbs * 1e9);
    if (ps_oversubscription > 0) m.ps_oversubscription = ps_oversubscription;
    if (!segment.empty()) m.segment_bytes = distcomm::parse_bytes(segment, "--segment");
    if (call_us >= 0) m.call_alpha = call_us * 1e-6;
    if (!eager_bytes.empty()) m.eager_bytes = distcomm::parse_bytes(eager_bytes, "--eager-bytes");
    if (rendezvous_alpha_us >= 0) m.rendezvous_alpha = rendezvous_alpha_us * 1e-6;
    if (one_way > 0) m.one_way = one_way;
    if (!have && link_gbps <= 0) {
      throw distcomm::invalid_argument_error(
          "describe the machine: --machine 25gbe-4gpu, or at least --link-gbps (and --alpha-us, "
          "--intra-gbs, --reduce-gbs, --ranks-per-node)");
    }
    if (!have && intra_gbs <= 0) m.intra = m.inter;  // one kind of link
    return m;
  }
};

// The parameter server's servers for `ranks`: as asked, at most the ranks; 0: one per node.
int servers(const sim::machine& m, int asked, int ranks) {
  if (asked > 0) return std::min(asked, ranks);
  return std::max(1, ranks / m.ranks_per_node);
}

std::vector<sim::algorithm> chosen(const std::vector<std::string>& names, const sim::machine& m,
                                   int ranks) {
  if (names.empty()) return sim::algorithms_for(m, ranks);
  std::vector<sim::algorithm> out;
  const std::vector<sim::algorithm> can = sim::algorithms_for(m, ranks);
  for (const std::string& n : names) {
    const sim::algorithm a = sim::modelled(n);
    if (std::find(can.begin(), can.end(), a) != can.end()) out.push_back(a);
  }
  return out;
}

int allreduce_table(const sim::machine& m, const std::vector<int>& ranks,
                    const std::vector<std::string>& sizes, const std::vector<std::string>& names,
                    int ps_servers) {
  for (int p : ranks) {
    const std::vector<sim::algorithm> algos = chosen(names, m, p);
    std::printf("# %d ranks, %d per node; time in us (busbw GB/s)\n", p, m.ranks_per_node);
    std::printf("%12s", "bytes");
    for (sim::algorithm a : algos) std::printf(" %22s", distcomm::name_of(a));
    std::printf(" %14s\n", "fastest");
    for (const std::string& s : sizes) {
      const std::size_t bytes = distcomm::parse_bytes(s, "--bytes");
      std::printf("%12zu", bytes);
      double best = std::numeric_limits<double>::infinity();
      const char* pick = "-";
      for (sim::algorithm a : algos) {
        const double t = sim::allreduce_seconds(a, m, bytes, p, servers(m, ps_servers, p));
        std::printf(" %12.1f (%7.2f)", t * 1e6, sim::bus_bandwidth(bytes, p, t) / 1e9);
        if (t < best) {
          best = t;
          pick = distcomm::name_of(a);
        }
      }
      std::printf(" %14s\n", pick);
    }
  }
  return 0;
}

// What `step` was asked.
struct step_request {
  std::string profile, fusion = "64M", csv, ps_placement = "even";
  double forward_ms = -1, backward_ms = 0, cycle_ms = 0;
  bool no_overlap = false;
};

int step_table(const sim::machine& m, const std::vector<int>& ranks, const step_request& q,
               const std::vector<std::string>& names, int ps_servers) {
  const std::vector<std::size_t> counts = sim::read_profile(q.profile);
  const std::vector<sim::layer> layers = sim::layers_of(counts, 4, q.backward_ms * 1e-3);
  std::size_t total = 0;
  for (const sim::layer& l : layers) total += l.bytes;
  sim::step_options o;
  o.forward_seconds = (q.forward_ms >= 0 ? q.forward_ms : q.backward_ms / 2) * 1e-3;
  o.fusion_threshold = distcomm::parse_bytes(q.fusion, "--fusion");
  o.cycle_seconds = q.cycle_ms * 1e-3;
  o.overlap = !q.no_overlap;
  o.ps_whole_tensors = q.ps_placement == "tensors";
  std::ofstream csv;
  if (!q.csv.empty()) {
    csv.open(q.csv);
    if (!csv) throw distcomm::invalid_argument_error("--csv: cannot write " + q.csv);
    csv << "profile,ranks,strategy,step_ms,efficiency,comm_ms,exposed_ms,buckets\n";
  }
  std::printf(
      "# %s: %zu tensors, %.1f MiB of f32 gradients; forward %.1f ms, backward %.1f ms; "
      "fusion %s, cycle %.1f ms, %s\n",
      q.profile.c_str(), layers.size(), static_cast<double>(total) / (1 << 20),
      o.forward_seconds * 1e3, q.backward_ms, q.fusion.c_str(), q.cycle_ms,
      o.overlap ? "overlapped with backward" : "after backward");
  std::printf("# step time in ms (scaling efficiency %%), %d ranks per node\n", m.ranks_per_node);
  for (int p : ranks) {
    const std::vector<sim::algorithm> algos = chosen(names, m, p);
    std::printf("%6d ranks:", p);
    double best = std::numeric_limits<double>::infinity();
    const char* pick = "-";
    for (sim::algorithm a : algos) {
      o.algo = a;
      o.ranks = p;
      o.ps_servers = servers(m, ps_servers, p);
      const sim::step_result r = sim::simulate_step(m, layers, o);
      std::printf("  %s %.1f (%.0f%%)", distcomm::name_of(a), r.step_seconds * 1e3,
                  r.efficiency * 100);
      if (csv.is_open()) {
        csv << q.profile << ',' << p << ',' << distcomm::name_of(a) << ',' << r.step_seconds * 1e3
            << ',' << r.efficiency << ',' << r.comm_seconds * 1e3 << ',' << r.exposed_seconds * 1e3
            << ',' << r.buckets << '\n';
      }
      if (r.step_seconds < best) {
        best = r.step_seconds;
        pick = distcomm::name_of(a);
      }
    }
    std::printf("  -> %s\n", pick);
  }
  if (csv.is_open() && !csv.flush()) {
    throw distcomm::invalid_argument_error("--csv: cannot write " + q.csv);
  }
  return 0;
}

// The allreduce samples of a distcomm-bench-<backend> --json file: each size's in-place time
// (out-of-place where in-place did not run). Strategies the model has no closed form for
// (automatic) are skipped, saying so.
std::vector<sim::sample> samples_of(const std::string& path, int ps_servers) {
  std::ifstream in(path);
  if (!in) throw distcomm::invalid_argument_error(path + ": cannot be read");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    throw distcomm::invalid_argument_error(path + ": not JSON (" + e.what() + ")");
  }
  const std::string strategy = j.value("strategy", "");
  if (j.value("collective", "") != "allreduce" || !j.contains("results")) {
    throw distcomm::invalid_argument_error(path + ": not a distcomm-bench allreduce sweep (" +
                                           "--json of distcomm-bench-<backend> -c allreduce)");
  }
  std::vector<sim::sample> out;
  if (strategy == "automatic" || strategy == "auto") {
    std::fprintf(stderr, "distcomm-sim: %s: strategy automatic has no closed form; skipped\n",
                 path.c_str());
    return out;
  }
  const sim::algorithm a = sim::modelled(strategy);
  const int ranks = j.value("ranks", 0);
  for (const nlohmann::json& r : j["results"]) {
    const nlohmann::json* m = nullptr;
    for (const char* mode : {"in_place", "out_of_place"}) {
      if (r.contains(mode) && r[mode].is_object()) {
        m = &r[mode];
        break;
      }
    }
    if (m == nullptr || !m->contains("time_us")) continue;
    sim::sample s;
    s.algo = a;
    s.ranks = ranks;
    s.bytes = r.value("size", std::size_t{0});
    s.seconds = m->value("time_us", 0.0) * 1e-6;
    s.ps_servers = std::min(ps_servers, ranks);
    if (s.bytes > 0 && s.seconds > 0) out.push_back(s);
  }
  return out;
}

// Every sample of `files` of at least `min_bytes`, runs of the same strategy, ranks and size
// (several rounds) as their median; `measured` counts the runs.
std::vector<sim::sample> medians_of(const std::vector<std::string>& files, int ps_servers,
                                    std::size_t min_bytes, std::size_t* measured) {
  std::map<std::tuple<int, int, std::size_t>, std::vector<sim::sample>> runs;
  for (const std::string& f : files) {
    for (const sim::sample& s : samples_of(f, ps_servers)) {
      if (s.bytes < min_bytes) continue;
      runs[{static_cast<int>(s.algo), s.ranks, s.bytes}].push_back(s);
      ++*measured;
    }
  }
  std::vector<sim::sample> out;
  for (auto& kv : runs) {
    std::vector<sim::sample>& v = kv.second;
    std::sort(v.begin(), v.end(),
              [](const sim::sample& a, const sim::sample& b) { return a.seconds < b.seconds; });
    sim::sample median = v[v.size() / 2];
    if (v.size() % 2 == 0) median.seconds = (v[v.size() / 2 - 1].seconds + median.seconds) / 2;
    out.push_back(median);
  }
  return out;
}

// "# what: N samples (medians of M measurements) from F files; median error x%, largest y%",
// then with `each` a row per sample.
void report_errors(const char* what, const std::vector<sim::sample>& samples,
                   const std::vector<double>& errors, std::size_t measured, std::size_t files,
                   bool each) {
  std::vector<double> sorted;
  for (double e : errors) sorted.push_back(std::fabs(e));
  std::sort(sorted.begin(), sorted.end());
  std::printf(
      "# %s: %zu samples (medians of %zu measurements) from %zu file%s; median error %.1f%%, "
      "largest %.1f%%\n",
      what, samples.size(), measured, files, files == 1 ? "" : "s",
      sorted.empty() ? 0.0 : sorted[sorted.size() / 2] * 100,
      sorted.empty() ? 0.0 : sorted.back() * 100);
  if (!each) return;
  std::printf("%-14s %6s %12s %14s %14s %8s\n", "strategy", "ranks", "bytes", "measured_us",
              "predicted_us", "error");
  for (std::size_t k = 0; k < samples.size(); ++k) {
    const sim::sample& s = samples[k];
    std::printf("%-14s %6d %12zu %14.2f %14.2f %7.1f%%\n", distcomm::name_of(s.algo), s.ranks,
                s.bytes, s.seconds * 1e6, s.seconds * (1 + errors[k]) * 1e6, errors[k] * 100);
  }
}

// What `calibrate` was asked.
struct calibrate_request {
  std::vector<std::string> files, check;
  double gamma_gbs = 0;
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  std::string cache = "0";
  std::string min_bytes = "0";
  std::string eager = "0";
  bool per_call = false;
  bool one_way = false;
  int ps_servers = 1;
  bool each = false;
};

int calibrate_files(const calibrate_request& q) {
  std::size_t measured = 0;
  const std::size_t min_bytes = distcomm::parse_bytes(q.min_bytes, "--min-bytes");
  const std::vector<sim::sample> samples = medians_of(q.files, q.ps_servers, min_bytes, &measured);
  sim::calibrate_options o;
  if (q.gamma_gbs > 0) o.gamma = 1.0 / (q.gamma_gbs * 1e9);
  o.cores = q.cores;
  o.cache_bytes = distcomm::parse_bytes(q.cache, "--cache");
  o.per_call = q.per_call;
  o.eager_bytes = distcomm::parse_bytes(q.eager, "--eager");
  o.one_way = q.one_way;
  const sim::calibration c = sim::calibrate(samples, o);
  report_errors("fitted", samples, c.errors, measured, q.files.size(), q.each);
  const sim::link& l = c.fitted.inter;
  // A rate from seconds per byte: "inf" where the fit found no cost (times that do not grow
  // with size), which the options read back as such.
  const auto rate = [](double per_byte, double units_per_byte) {
    return per_byte > 0 ? units_per_byte / per_byte / 1e9 : std::numeric_limits<double>::infinity();
  };
  std::printf("--alpha-us %.3g --link-gbps %.4g --reduce-gbs %.4g --ranks-per-node %d",
              l.alpha * 1e6, rate(l.beta, 8), rate(c.fitted.gamma, 1), c.fitted.ranks_per_node);
  if (c.fitted.cores_per_node > 0) {
    std::printf(" --cores-per-node %d --oversubscribed-alpha-us %.3g", c.fitted.cores_per_node,
                c.fitted.oversubscribed_alpha * 1e6);
  }
  if (c.fitted.cache_bytes != 0) {
    std::printf(" --cache-bytes %zu --cached-gbs %.4g", c.fitted.cache_bytes,
                rate(c.fitted.cached_beta, 1));
  }
  if (q.per_call) std::printf(" --call-us %.3g", c.fitted.call_alpha * 1e6);
  if (c.fitted.eager_bytes != 0) {
    std::printf(" --eager-bytes %zu --rendezvous-alpha-us %.3g", c.fitted.eager_bytes,
                c.fitted.rendezvous_alpha * 1e6);
  }
  if (q.one_way) std::printf(" --one-way %.3g", c.fitted.one_way);
  std::printf("\n");
  if (!q.check.empty()) {
    // Held out: measured, not fitted; the fitted machine predicts them.
    std::size_t held = 0;
    const std::vector<sim::sample> other = medians_of(q.check, q.ps_servers, min_bytes, &held);
    sim::machine m = c.fitted;
    std::vector<double> errors;
    for (const sim::sample& s : other) {
      m.ranks_per_node = std::max(m.ranks_per_node, s.ranks);  // still one node
      errors.push_back(
          sim::allreduce_seconds(s.algo, m, s.bytes, s.ranks, s.ps_servers) / s.seconds - 1);
    }
    report_errors("held out", other, errors, held, q.check.size(), q.each);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "DistComm's cost model: predicted allreduce and training-step times of every "
      "strategy, for machines and rank counts this one does not have"};
  app.require_subcommand(1);
  machine_options mo;
  std::vector<int> ranks = {8, 16, 32, 64, 128};
  std::vector<std::string> names;
  int ps_servers = 1;

  CLI::App* ar = app.add_subcommand("allreduce", "One allreduce per size and rank count");
  std::vector<std::string> sizes = {"8", "4K", "1M", "64M"};
  mo.add_to(*ar);
  ar->add_option("--ranks", ranks, "Rank counts")->delimiter(',')->capture_default_str();
  ar->add_option("--bytes", sizes, "Sizes (K/M suffixes)")->delimiter(',')->capture_default_str();

  CLI::App* st = app.add_subcommand("step", "A training step of a gradient profile");
  step_request q;
  mo.add_to(*st);
  st->add_option("--ranks", ranks, "Rank counts")->delimiter(',')->capture_default_str();
  st->add_option("--profile", q.profile, "Gradient profile (bench/profiles/*.txt)")->required();
  st->add_option("--backward-ms", q.backward_ms, "Backward time of one step on one rank, ms")
      ->required();
  st->add_option("--forward-ms", q.forward_ms, "Forward time, ms (default: half of backward)");
  st->add_option("--fusion", q.fusion, "Fusion threshold (K/M suffixes; 0: none)")
      ->capture_default_str();
  st->add_option("--cycle-ms", q.cycle_ms, "The engine's cycle time, ms")->capture_default_str();
  st->add_flag("--no-overlap", q.no_overlap, "Allreduce after backward, not during it");
  st->add_option("--ps-placement", q.ps_placement,
                 "even: every bucket sharded over the servers (DistComm's ps); tensors: each "
                 "tensor whole on one server, round robin (TensorFlow's parameter servers)")
      ->check(CLI::IsMember({"even", "tensors"}))
      ->capture_default_str();
  st->add_option("--csv", q.csv, "Also write every figure to this CSV file (tools/sim/plot.sh)");

  CLI::App* cal = app.add_subcommand(
      "calibrate",
      "Fit the machine's alpha, beta and gamma to distcomm-bench-<backend> --json "
      "allreduce sweeps run here");
  calibrate_request cq;
  cal->add_option("files", cq.files, "distcomm-bench-* --json files")->required();
  cal->add_option("--check", cq.check,
                  "Files held out of the fit: the fitted machine predicts them (e.g. another "
                  "strategy)");
  cal->add_option("--reduce-gbs", cq.gamma_gbs,
                  "Keep the combining rate at this (GB/s, e.g. distcomm-bench-kernels'); fit "
                  "only alpha and beta");
  cal->add_flag("--each", cq.each, "Every sample, measured against the fitted model");
  cal->add_option("--cores", cq.cores,
                  "Cores of the machine the samples ran on (default: this one's); runs of more "
                  "ranks fit the oversubscribed alpha too")
      ->capture_default_str();
  cal->add_option("--cache", cq.cache,
                  "Allreduces up to this size (K/M) get a beta of their own, their buffers in the "
                  "caches (0: one beta for all)")
      ->capture_default_str();
  cal->add_option("--ps-servers", cq.ps_servers, "Servers of the parameter-server runs")
      ->capture_default_str();
  cal->add_flag("--per-call", cq.per_call,
                "Fit a cost per allreduce too (--call-us: the call, the ranks agreeing on it)");
  cal->add_flag("--one-way", cq.one_way,
                "Fit what a one-way message (tree, ps) costs against an exchange (ring, rd) too "
                "(--one-way): needs samples of both kinds");
  cal->add_option("--eager", cq.eager,
                  "A transport's eager limit (K/M): fit what a message past it costs more "
                  "(--rendezvous-alpha-us); 0: none")
      ->capture_default_str();
  cal->add_option("--min-bytes", cq.min_bytes,
                  "Leave out the sizes below this (K/M), fitted and held out alike: e.g. those a "
                  "shaped link's token bucket lets through at the unshaped rate")
      ->capture_default_str();

  for (CLI::App* sub : {ar, st}) {
    sub->add_option("--strategy", names,
                    "Strategies (ring, tree, rd, ps, hierarchical; "
                    "default: all)")
        ->delimiter(',');
    sub->add_option("--ps-servers", ps_servers,
                    "Servers of the parameter server (at most the ranks; 0: one per node)")
        ->capture_default_str();
  }
  CLI11_PARSE(app, argc, argv);
  try {
    if (*cal) return calibrate_files(cq);
    const sim::machine m = mo.make();
    if (*ar) return allreduce_table(m, ranks, sizes, names, ps_servers);
    return step_table(m, ranks, q, names, ps_servers);
  } catch (const distcomm::invalid_argument_error& e) {
    std::fprintf(stderr, "distcomm-sim: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "distcomm-sim: %s\n", e.what());
    return 1;
  }
}
