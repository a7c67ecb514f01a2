// hierarchical_communicator (hierarchical.hpp): the whole job's communicator whose large
// allreduces go the hierarchical way; everything else is forwarded to a flat communicator, in
// order, through this communicator's own progress.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "distcomm/core/error.hpp"
#include "distcomm/hierarchical.hpp"
#include "distcomm/registry/backends.hpp"
#include "distcomm/strategy/table.hpp"

namespace distcomm {

std::optional<std::size_t> hierarchical_threshold(const world_info& w, const config& cfg,
                                                  const init_options& options) {
  const char* env = std::getenv("DISTCOMM_HIERARCHICAL");
  const std::string setting = env != nullptr && *env != '\0' ? env : "auto";
  if (setting == "off") return std::nullopt;
  // A size is parsed (and refused with a message) whatever the job: a typo shows on one host too.
  const std::size_t from = setting == "auto" ? hierarchical_threshold_default
                                             : parse_bytes(setting, "DISTCOMM_HIERARCHICAL");
  if (!options.backend.empty() || !cfg.backend.empty() || !options.strategy.empty() ||
      !cfg.strategy.empty() || cfg.deterministic) {
    return std::nullopt;
  }
  if (w.size <= 1 || w.single_node() || started_by_mpi(w.launcher) || w.local_size <= 1 ||
      w.size % w.local_size != 0 || intra_host_backend().empty()) {
    return std::nullopt;
  }
  return from;
}

any_communicator hierarchical_communicator::connect(const init_options& intra,
                                                    const init_options& inter, const job* given,
                                                    std::size_t threshold) {
  const config cfg = inter.settings ? *inter.settings : config::from_env();
  const job j = given ? *given : shared_bootstrap(cfg);
  hierarchical h = hierarchical::connect(intra, inter, &j);
  any_communicator flat = init(j, inter);
  return any_communicator(std::in_place_type<hierarchical_communicator>, std::move(flat),
                          std::move(h), threshold);
}

hierarchical_communicator::hierarchical_communicator(any_communicator flat, hierarchical h,
                                                     std::size_t threshold)
    : flat_(std::move(flat)),
      h_(std::move(h)),
      threshold_(threshold),
      name_(std::string(h_.intra().backend_name()) + "+" + h_.inter().backend_name()) {}

tuning hierarchical_communicator::current_tuning() {
  tuning t = flat_.current_tuning();
  progress_.run("current_tuning", [&] { t.hierarchical_threshold = threshold_; });
  return t;
}

void hierarchical_communicator::retune(const tuning& t) {
  progress_.run("retune", [&] {
    if (!started_) started_.emplace(flat_.current_tuning(), h_.inter().current_tuning());
    const tuning& flat_start = started_->first;
    const tuning& own = started_->second;
    flat_.retune(t);
    // A setting left where flat started keeps the level's own value; one moved goes to both.
    const auto follow = [](std::size_t to, std::size_t flat_was, std::size_t own_value) {
      return to == flat_was ? own_value : to;
    };
    tuning across = own;  // its table included
    across.fusion_threshold =
        follow(t.fusion_threshold, flat_start.fusion_threshold, own.fusion_threshold);
    across.fusion_cutoff = follow(t.fusion_cutoff, flat_start.fusion_cutoff, own.fusion_cutoff);
    across.segment_bytes = follow(t.segment_bytes, flat_start.segment_bytes, own.segment_bytes);
    if (!(across == h_.inter().current_tuning())) h_.inter().retune(across);
    // Which allreduces go the hierarchical way must be the same on every rank: the largest and
    // the smallest threshold asked for, agreed before any rank uses its own.
    const std::size_t asked = t.hierarchical_threshold != 0 ? t.hierarchical_threshold : threshold_;
    std::int64_t range[2] = {static_cast<std::int64_t>(asked), -static_cast<std::int64_t>(asked)};
    flat_.allreduce(tensor_view{range, 2, dtype::i64}, reduce_op::max);
    if (range[0] != -range[1]) {
      throw mismatch_error("retune: the ranks asked for different hierarchical thresholds (" +
                           format_bytes(static_cast<std::size_t>(-range[1])) + " to " +
                           format_bytes(static_cast<std::size_t>(range[0])) +
                           "); every rank must retune to the same settings");
    }
    threshold_ = asked;
  });
}

// ---- ordering ---------------------------------------------------------------------------------

template <class F>
void hierarchical_communicator::run(const char* what, F&& f) {
  progress_.run(what, [&] {
    ++calls_;
    f();
  });
}

template <class F>
work hierarchical_communicator::post(F&& f) {
  return progress_.post([this, f = std::forward<F>(f)]() mutable {
    ++calls_;
    f();
  });
}

// A send or receive: started in order, then completes in the background (progress.hpp).
template <class Start>
work hierarchical_communicator::post_p2p(Start&& start) {
  return progress_.post_in_flight(
      [start = std::forward<Start>(start)]() mutable -> detail::poll_fn {
        work w = start();
        return [w] {
          if (!w.test()) return false;
          w.wait();  // its error, if any
          return true;
        };
      });
}

// ---- allreduce --------------------------------------------------------------------------------

void hierarchical_communicator::reduce_in_place(tensor_view data, reduce_op op) {
  if (data.count * dtype_size(data.type) >= threshold_) {
    h_.allreduce(data, op);
  } else {
    flat_.allreduce(data, op);
  }
}

void hierarchical_communicator::reduce_grouped(const std::vector<tensor_view>& tensors,
                                               reduce_op op) {
  std::size_t bytes = 0;
  bool one_type = true;
  for (const tensor_view& t : tensors) {
    bytes += t.count * dtype_size(t.type);
    one_type = one_type && t.type == tensors.front().type;
  }
  if (tensors.empty() || !one_type || bytes < threshold_) {
    flat_.allreduce(span<const tensor_view>(tensors.data(), tensors.size()), op);
    return;
  }
  // Side by side in one buffer (Tensor Fusion's effect): one hierarchical allreduce.
  packed_.resize(bytes);
  std::size_t at = 0;
  for (const tensor_view& t : tensors) {
    const std::size_t n = t.count * dtype_size(t.type);
    if (n != 0) std::memcpy(packed_.data() + at, t.data, n);
    at += n;
  }
  h_.allreduce(
      tensor_view{packed_.data(), bytes / dtype_size(tensors.front().type), tensors.front().type},
      op);
  at = 0;
  for (const tensor_view& t : tensors) {
    const std::size_t n = t.count * dtype_size(t.type);
    if (n != 0) std::memcpy(t.data, packed_.data() + at, n);
    at += n;
  }
}

namespace {

// An allreduce out of place works in place on `out`, `in` copied there first (in order with
// the calls before it).
void check_pair(tensor_view in, tensor_view out) {
  if (in.count != out.count || in.type != out.type) {
    throw invalid_argument_error("allreduce: input (" + std::to_string(in.count) + " x " +
                                 to_string(in.type) + ") and output (" + std::to_string(out.count) +
                                 " x " + to_string(out.type) +
                                 ") differ; they must have the same count and dtype");
  }
}
void copy_in(tensor_view in, tensor_view out) {
  if (in.data != out.data && in.count != 0) {
    std::memmove(out.data, in.data, in.count * dtype_size(in.type));
  }
}

}  // namespace

void hierarchical_communicator::allreduce(tensor_view in, tensor_view out, reduce_op op) {
  check_pair(in, out);
  run("allreduce", [&] {
    copy_in(in, out);
    reduce_in_place(out, op);
  });
}

void hierarchical_communicator::allreduce(span<const tensor_view> tensors, reduce_op op) {
  const std::vector<tensor_view> list(tensors.begin(), tensors.end());
  run("allreduce", [&] { reduce_grouped(list, op); });
}

work hierarchical_communicator::iallreduce(tensor_view in, tensor_view out, reduce_op op) {
  check_pair(in, out);
  return post([this, in, out, op] {
    copy_in(in, out);
    reduce_in_place(out, op);
  });
}

work hierarchical_communicator::iallreduce(span<const tensor_view> tensors, reduce_op op) {
  return post([this, list = std::vector<tensor_view>(tensors.begin(), tensors.end()), op] {
    reduce_grouped(list, op);
  });
}

// ---- everything else: the flat communicator's --------------------------------------------------

void hierarchical_communicator::reduce_scatter(tensor_view in, tensor_view out, reduce_op op) {
  run("reduce_scatter", [&] { flat_.reduce_scatter(in, out, op); });
}
work hierarchical_communicator::ireduce_scatter(tensor_view in, tensor_view out, reduce_op op) {
  return post([this, in, out, op] { flat_.reduce_scatter(in, out, op); });
}
void hierarchical_communicator::allgather(tensor_view in, tensor_view out) {
  run("allgather", [&] { flat_.allgather(in, out); });
}
work hierarchical_communicator::iallgather(tensor_view in, tensor_view out) {
  return post([this, in, out] { flat_.allgather(in, out); });
}
void hierarchical_communicator::broadcast(tensor_view data, int root) {
  run("broadcast", [&] { flat_.broadcast(data, root); });
}
work hierarchical_communicator::ibroadcast(tensor_view data, int root) {
  return post([this, data, root] { flat_.broadcast(data, root); });
}
void hierarchical_communicator::barrier() {
  run("barrier", [&] { flat_.barrier(); });
}
work hierarchical_communicator::ibarrier() {
  return post([this] { flat_.barrier(); });
}
void hierarchical_communicator::reduce(tensor_view in, tensor_view out, reduce_op op, int root) {
  run("reduce", [&] { flat_.reduce(in, out, op, root); });
}
work hierarchical_communicator::ireduce(tensor_view in, tensor_view out, reduce_op op, int root) {
  return post([this, in, out, op, root] { flat_.reduce(in, out, op, root); });
}
void hierarchical_communicator::gather(tensor_view in, tensor_view out, int root) {
  run("gather", [&] { flat_.gather(in, out, root); });
}
work hierarchical_communicator::igather(tensor_view in, tensor_view out, int root) {
  return post([this, in, out, root] { flat_.gather(in, out, root); });
}
void hierarchical_communicator::scatter(tensor_view in, tensor_view out, int root) {
  run("scatter", [&] { flat_.scatter(in, out, root); });
}
work hierarchical_communicator::iscatter(tensor_view in, tensor_view out, int root) {
  return post([this, in, out, root] { flat_.scatter(in, out, root); });
}
void hierarchical_communicator::alltoall(tensor_view in, tensor_view out) {
  run("alltoall", [&] { flat_.alltoall(in, out); });
}
work hierarchical_communicator::ialltoall(tensor_view in, tensor_view out) {
  return post([this, in, out] { flat_.alltoall(in, out); });
}

namespace {
using sizes = std::vector<std::size_t>;
sizes copy_of(span<const std::size_t> s) { return sizes(s.begin(), s.end()); }
span<const std::size_t> view_of(const sizes& s) { return {s.data(), s.size()}; }
}  // namespace

void hierarchical_communicator::alltoallv(tensor_view in, span<const std::size_t> send_counts,
                                          tensor_view out, span<const std::size_t> recv_counts,
                                          span<const std::size_t> send_displs,
                                          span<const std::size_t> recv_displs) {
  run("alltoallv",
      [&] { flat_.alltoallv(in, send_counts, out, recv_counts, send_displs, recv_displs); });
}
work hierarchical_communicator::ialltoallv(tensor_view in, span<const std::size_t> send_counts,
                                           tensor_view out, span<const std::size_t> recv_counts,
                                           span<const std::size_t> send_displs,
                                           span<const std::size_t> recv_displs) {
  return post([this, in, out, sc = copy_of(send_counts), rc = copy_of(recv_counts),
               sd = copy_of(send_displs), rd = copy_of(recv_displs)] {
    flat_.alltoallv(in, view_of(sc), out, view_of(rc), view_of(sd), view_of(rd));
  });
}
void hierarchical_communicator::allgatherv(tensor_view in, tensor_view out,
                                           span<const std::size_t> counts,
                                           span<const std::size_t> displs) {
  run("allgatherv", [&] { flat_.allgatherv(in, out, counts, displs); });
}
work hierarchical_communicator::iallgatherv(tensor_view in, tensor_view out,
                                            span<const std::size_t> counts,
                                            span<const std::size_t> displs) {
  return post([this, in, out, c = copy_of(counts), d = copy_of(displs)] {
    flat_.allgatherv(in, out, view_of(c), view_of(d));
  });
}

void hierarchical_communicator::send(tensor_view data, int peer, int tag) {
  progress_.run("send", [&] { flat_.send(data, peer, tag); });
}
void hierarchical_communicator::recv(tensor_view data, int peer, int tag) {
  progress_.run("recv", [&] { flat_.recv(data, peer, tag); });
}
void hierarchical_communicator::sendrecv(tensor_view out, int dest, tensor_view in, int source,
                                         int tag) {
  progress_.run("sendrecv", [&] { flat_.sendrecv(out, dest, in, source, tag); });
}
work hierarchical_communicator::isend(tensor_view data, int peer, int tag) {
  return post_p2p([this, data, peer, tag] { return flat_.isend(data, peer, tag); });
}
work hierarchical_communicator::irecv(tensor_view data, int peer, int tag) {
  return post_p2p([this, data, peer, tag] { return flat_.irecv(data, peer, tag); });
}
work hierarchical_communicator::isendrecv(tensor_view out, int dest, tensor_view in, int source,
                                          int tag) {
  return post_p2p(
      [this, out, dest, in, source, tag] { return flat_.isendrecv(out, dest, in, source, tag); });
}

std::optional<any_communicator> hierarchical_communicator::split(int color, int key) {
  std::optional<any_communicator> part;
  progress_.run("split", [&] { part = flat_.split(color, key); });
  return part;
}
std::optional<any_communicator> hierarchical_communicator::subset(span<const int> ranks) {
  std::optional<any_communicator> part;
  progress_.run("subset", [&] { part = flat_.subset(ranks); });
  return part;
}
any_communicator hierarchical_communicator::shrink() {
  progress_.drain();
  return flat_.shrink();
}
any_communicator hierarchical_communicator::shrink(std::chrono::duration<double> window) {
  progress_.drain();
  return flat_.shrink(window);
}
any_communicator hierarchical_communicator::split_by_node() {
  std::optional<any_communicator> part;
  progress_.run("split_by_node", [&] { part = flat_.split_by_node(); });
  return std::move(*part);
}

}  // namespace distcomm
