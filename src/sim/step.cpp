#include "distcomm/sim/step.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "distcomm/core/error.hpp"

namespace distcomm::sim {

namespace {

// ps_whole_tensors: the servers' links and every rank's link as queues (step_options).
double whole_tensors_done(const machine& m, const std::vector<layer>& layers, const step_options& o,
                          double backward_end, step_result& r) {
  const int p = o.ranks;
  const int k = std::max(1, std::min(o.ps_servers, p));
  const link& l = p <= m.ranks_per_node ? m.intra : m.inter;
  std::vector<double> server_free(static_cast<std::size_t>(k), 0.0);
  double rank_free = 0;
  double ready = o.forward_seconds;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const layer& t = layers[i];
    ready += t.backward_seconds;
    const auto n = static_cast<double>(t.bytes);
    // The model's order is the reverse of backward's: tensor i is the (size - 1 - i)-th.
    const std::size_t server = (layers.size() - 1 - i) % static_cast<std::size_t>(k);
    const double at = o.overlap ? ready : backward_end;
    // The server takes p pushes and gives p pulls; it sums p copies.
    double& s = server_free[server];
    const double served =
        2.0 * p * (l.alpha + n * l.beta * m.ps_oversubscription) + p * n * m.gamma;
    s = std::max(s, at) + served;
    // Each rank sends and receives the tensor once.
    rank_free = std::max(rank_free, at) + 2.0 * (l.alpha + n * l.beta);
    r.comm_seconds += served;
    ++r.buckets;
  }
  double done = rank_free;
  for (double s : server_free) done = std::max(done, s);
  return done;
}

}  // namespace

step_result simulate_step(const machine& m, const std::vector<layer>& layers,
                          const step_options& o) {
  step_result r;
  double backward = 0;
  for (const layer& l : layers) backward += l.backward_seconds;
  r.compute_seconds = o.forward_seconds + backward + o.optimizer_seconds;
  const double backward_end = o.forward_seconds + backward;

  if (o.algo == algorithm::parameter_server && o.ps_whole_tensors && o.ranks > 1) {
    const double done = std::max(backward_end, whole_tensors_done(m, layers, o, backward_end, r));
    r.exposed_seconds = done - backward_end;
    r.step_seconds = done + o.optimizer_seconds;
    r.efficiency = r.step_seconds > 0 ? r.compute_seconds / r.step_seconds : 1;
    return r;
  }
  // When each tensor reaches the engine: as backward produces it, or all at backward's end.
  std::vector<double> ready;
  double produced = o.forward_seconds;
  for (const layer& l : layers) {
    produced += l.backward_seconds;
    ready.push_back(o.overlap ? produced : backward_end);
  }
  // The engine's loop (engine.cpp's run() and cycle()): a cycle starts `cycle` after the last one
  // started and once its collectives ended, or, idle, when the next tensor arrives; it agrees on
  // what is ready, fuses every tensor ready by then into buckets of at most the threshold and runs
  // them one after another.
  double free_at = 0;  // when the last collective ends
  double cycle_start = ready.empty() ? 0 : ready.front();
  // Each cycle first agrees on what is ready: one small allreduce over the job.
  const double agree =
      !o.negotiation || o.ranks < 2
          ? 0
          : allreduce_seconds(algorithm::recursive_doubling, m, layers.size() + 2, o.ranks);
  std::size_t next = 0;
  while (next < layers.size()) {
    cycle_start = std::max(cycle_start, ready[next]);
    free_at = std::max(free_at, cycle_start) + agree;
    r.negotiation_seconds += agree;
    ++r.cycles;
    std::size_t bucket_bytes = 0;
    const auto send = [&] {
      const double t = allreduce_seconds(o.algo, m, bucket_bytes, o.ranks, o.ps_servers);
      bucket_bytes = 0;
      if (t == 0) return;  // one rank: nothing to average
      free_at += t;        // after the agreement and the buckets before it
      r.comm_seconds += t;
      ++r.buckets;
    };
    for (; next < layers.size() && ready[next] <= cycle_start; ++next) {
      const std::size_t bytes = layers[next].bytes;
      if (bucket_bytes != 0 && bucket_bytes + bytes > o.fusion_threshold) send();
      bucket_bytes += bytes;
    }
    if (bucket_bytes != 0) send();
    cycle_start = std::max(cycle_start + o.cycle_seconds, free_at);
  }
  const double done = std::max(backward_end, free_at);
  r.exposed_seconds = done - backward_end;
  r.step_seconds = done + o.optimizer_seconds;
  r.efficiency = r.step_seconds > 0 ? r.compute_seconds / r.step_seconds : 1;
  return r;
}

std::vector<layer> layers_of(const std::vector<std::size_t>& counts, std::size_t element_bytes,
                             double backward_seconds) {
  std::size_t total = 0;
  for (std::size_t c : counts) total += c;
  std::vector<layer> out;
  for (auto it = counts.rbegin(); it != counts.rend(); ++it) {
    layer l;
    l.bytes = *it * element_bytes;
    l.backward_seconds =
        total == 0 ? 0 : backward_seconds * static_cast<double>(*it) / static_cast<double>(total);
    out.push_back(l);
  }
  return out;
}

std::vector<std::size_t> read_profile(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw invalid_argument_error("profile " + file + ": cannot be read");
  std::vector<std::size_t> counts;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    const auto last = line.find_last_not_of(" \t\r");
    const std::string text = line.substr(first, last - first + 1);
    std::size_t used = 0;
    unsigned long long v = 0;
    try {
      v = std::stoull(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != text.size() || text[0] == '-') {
      throw invalid_argument_error("profile " + file + ":" + std::to_string(number) + ": '" + text +
                                   "' is not an element count");
    }
    counts.push_back(static_cast<std::size_t>(v));
  }
  if (counts.empty()) throw invalid_argument_error("profile " + file + ": no tensors");
  return counts;
}

}  // namespace distcomm::sim
