// communicator<Backend, Strategy, Fusion>: the one entry point an application uses. It validates
// every call, gives it a deadline (DISTCOMM_TIMEOUT), and runs it through the strategy (which
// algorithm) over the backend (which transport); grouped allreduces go through the fusion policy.
// Before a collective moves data, the ranks agree on a fingerprint of the call (check/agree.hpp):
// ranks that disagree (another collective, dtype, count, op, root or order) all get a
// mismatch_error instead of wrong data or a hang. After a collective fails, the communicator
// aborts the backend (so the other ranks fail fast too) and refuses further calls with an error
// of the first failure's kind. Every collective also comes non-blocking (iallreduce, ...),
// returning a work; both forms run the same code, in the order they were started
// (async/progress.hpp). A flight recorder keeps the last collectives for distcomm-trace
// (trace/flight_recorder.hpp).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "distcomm/async/progress.hpp"
#include "distcomm/async/work.hpp"
#include "distcomm/backend.hpp"
#include "distcomm/check/agree.hpp"
#include "distcomm/config.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/core/span.hpp"
#include "distcomm/core/tensor_view.hpp"
#include "distcomm/fusion/buffer.hpp"
#include "distcomm/group/members.hpp"
#include "distcomm/log.hpp"
#include "distcomm/rendezvous/survivors.hpp"
#include "distcomm/strategy/automatic.hpp"
#include "distcomm/strategy/identity.hpp"
#include "distcomm/trace/flight_recorder.hpp"
#include "distcomm/trace/timeline.hpp"

namespace distcomm {

namespace detail {
// A Fusion policy declaring `static constexpr bool takes_backend = true` (cuda::fusion) is called
// as allreduce(backend, tensors, op, deadline, run), to work on the backend's stream and wait for
// it; the others as allreduce(tensors, op, run).
template <class F, class = void>
struct fusion_takes_backend : std::false_type {};
template <class F>
struct fusion_takes_backend<F, std::enable_if_t<F::takes_backend>> : std::true_type {};

// A Fusion policy with trace_to(timeline, track) draws its packing on the timeline.
template <class F, class = void>
struct fusion_traces : std::false_type {};
template <class F>
struct fusion_traces<
    F, std::void_t<decltype(std::declval<F&>().trace_to(std::shared_ptr<trace::timeline>(), 0))>>
    : std::true_type {};

// The strategy's `name`, part of the settings every rank must share.
template <class S, class = void>
struct strategy_name {
  static constexpr const char* value = "(unnamed strategy)";
};
template <class S>
struct strategy_name<S, std::void_t<decltype(S::name)>> {
  static constexpr const char* value = S::name;
};

// A strategy with state of its own besides the settings (strategy::hierarchical: the levels it
// runs large allreduces over, and their threshold) says what else the ranks must share,
// `std::string identity() const`, and is retuned rather than made anew:
// `S retuned(const config& c, const tuning& t) const`, and `void describe(tuning&) const` adds its
// settings to current_tuning().
template <class S, class = void>
struct has_identity : std::false_type {};
template <class S>
struct has_identity<S, std::void_t<decltype(std::declval<const S&>().identity())>>
    : std::true_type {};
template <class S>
std::string strategy_identity(const S& s) {
  if constexpr (has_identity<S>::value) {
    return s.identity();
  } else {
    return strategy_name<S>::value;
  }
}
template <class S, class = void>
struct has_backend_name : std::false_type {};
template <class S>
struct has_backend_name<S, std::void_t<decltype(std::declval<const S&>().backend_name())>>
    : std::true_type {};
template <class S, class = void>
struct has_retuned : std::false_type {};
template <class S>
struct has_retuned<S, std::void_t<decltype(std::declval<const S&>().retuned(
                          std::declval<const config&>(), std::declval<const tuning&>()))>>
    : std::true_type {};

}  // namespace detail

template <class Backend, class Strategy = strategy::automatic, class Fusion = fusion::buffer>
class communicator {
  static_assert(check_backend<Backend>());  // names the member of the contract a backend lacks
  struct state;

 public:
  using backend_type = Backend;
  using strategy_type = Strategy;
  using fusion_type = Fusion;

  explicit communicator(Backend backend, config cfg = config::from_env())
      : communicator(std::move(backend), std::move(cfg), std::nullopt) {}
  // With the strategy `make(settings)` returns, for one that holds more than settings
  // (strategy::hierarchical); `settings` are cfg with the backend's defaults filled in.
  // Sub-communicators make theirs from the settings alone.
  communicator(Backend backend, config cfg, const std::function<Strategy(const config&)>& make)
      : s_(std::make_unique<state>(std::move(backend), std::move(cfg), std::nullopt, &make)) {
    set_log_level(s_->cfg.log);
  }

  // A move hands over the whole state (and collectives still running keep running on it).
  communicator(communicator&&) noexcept = default;
  communicator& operator=(communicator&& o) noexcept {
    if (this != &o) {
      close();
      s_ = std::move(o.s_);
    }
    return *this;
  }
  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;

  // Waits for the collectives still running (each has its deadline). Ranks that still call
  // collectives on this communicator learn that this one left (a mismatch_error naming it and how
  // many collectives it made) instead of waiting for it.
  ~communicator() { close(); }

  // The settings in use: the configuration given, with what it left to the backend filled in
  // (segment_bytes_for and fusion_cutoff_for, backend.hpp).
  static config with_backend_defaults(config c) {
    if (!c.fusion_cutoff) c.fusion_cutoff = fusion_cutoff_for<Backend>;
    if (!c.segment_bytes) c.segment_bytes = segment_bytes_for<Backend>;
    return c;
  }

  int rank() const { return get().backend.rank(); }
  int size() const { return get().backend.size(); }
  // The names programs print and accept: "gloo", "ring" (backend_traits.hpp,
  // strategy/identity.hpp). A strategy over levels of other backends names them
  // (strategy::hierarchical: "shm+gloo").
  const char* backend_name() const noexcept {
    if constexpr (detail::has_backend_name<Strategy>::value) {
      if (const char* n = s_->strategy.backend_name()) return n;
    }
    return detail::backend_name_of(s_->backend);
  }
  static const char* strategy_name() {
    if constexpr (detail::has_algorithm_id<Strategy>::value) {
      return name_of(Strategy::id);
    } else {
      return detail::strategy_name<Strategy>::value;
    }
  }
  Backend& backend() noexcept { return s_->backend; }
  const config& settings() const noexcept { return s_->cfg; }
  Strategy& strategy() noexcept { return s_->strategy; }
  Fusion& fusion() noexcept { return s_->fusion; }

  // Every collective has a blocking form and a non-blocking one (i...), which returns a work at
  // once (async/work.hpp). Both validate their arguments on the caller's thread (a bad argument
  // throws from the call itself) and run the same code, one collective at a time in the order
  // they were started (async/progress.hpp). The memory of a non-blocking call must stay alive
  // until its work completes.

  // In place: every rank's `data` becomes the reduction of all ranks' `data`.
  void allreduce(tensor_view data, reduce_op op = reduce_op::sum) { allreduce(data, data, op); }
  work iallreduce(tensor_view data, reduce_op op = reduce_op::sum) {
    return iallreduce(data, data, op);
  }

  // Out of place: `out` becomes the reduction of every rank's `in`. `in` is only read.
  void allreduce(tensor_view in, tensor_view out, reduce_op op = reduce_op::sum) {
    run(allreduce_call(in, out, op));
  }
  work iallreduce(tensor_view in, tensor_view out, reduce_op op = reduce_op::sum) {
    return post(allreduce_call(in, out, op));
  }

  // Grouped allreduce of a whole gradient set, in place, fused by the Fusion policy.
  void allreduce(span<const tensor_view> tensors, reduce_op op = reduce_op::sum) {
    run(grouped_call(tensors, op));
  }
  work iallreduce(span<const tensor_view> tensors, reduce_op op = reduce_op::sum) {
    // The views are copied: the caller's list may go before the collective runs.
    auto views = std::make_shared<std::vector<tensor_view>>(tensors.begin(), tensors.end());
    return post(grouped_call(span<const tensor_view>(views->data(), views->size()), op), views);
  }

  // `in` holds size() blocks of out.count elements; rank r receives the reduction of block r.
  void reduce_scatter(tensor_view in, tensor_view out, reduce_op op = reduce_op::sum) {
    run(reduce_scatter_call(in, out, op));
  }
  work ireduce_scatter(tensor_view in, tensor_view out, reduce_op op = reduce_op::sum) {
    return post(reduce_scatter_call(in, out, op));
  }

  // `out` holds size() blocks of in.count elements, block r from rank r.
  void allgather(tensor_view in, tensor_view out) { run(allgather_call(in, out)); }
  work iallgather(tensor_view in, tensor_view out) { return post(allgather_call(in, out)); }

  // Every rank's `data` becomes root's `data`.
  void broadcast(tensor_view data, int root) { run(broadcast_call(data, root)); }
  work ibroadcast(tensor_view data, int root) { return post(broadcast_call(data, root)); }

  // `in` and `out` hold size() blocks of the same count: block q of `in` goes to rank q, block q
  // of `out` comes from rank q.
  void alltoall(tensor_view in, tensor_view out) { run(alltoall_call(in, out)); }
  work ialltoall(tensor_view in, tensor_view out) { return post(alltoall_call(in, out)); }

  // Ragged alltoall: send_counts[q] elements of `in` go to rank q, recv_counts[q] elements of
  // `out` come from it; zeros allowed. Displacements (elements) say where each block starts;
  // without them the blocks are packed in rank order. Each pair of ranks checks that what one
  // sends is what the other expects (a mismatch_error naming both otherwise).
  void alltoallv(tensor_view in, span<const std::size_t> send_counts, tensor_view out,
                 span<const std::size_t> recv_counts, span<const std::size_t> send_displs = {},
                 span<const std::size_t> recv_displs = {}) {
    run(alltoallv_call(in, send_counts, out, recv_counts, send_displs, recv_displs));
  }
  work ialltoallv(tensor_view in, span<const std::size_t> send_counts, tensor_view out,
                  span<const std::size_t> recv_counts, span<const std::size_t> send_displs = {},
                  span<const std::size_t> recv_displs = {}) {
    return post(alltoallv_call(in, send_counts, out, recv_counts, send_displs, recv_displs));
  }

  // Ragged allgather: rank q's `in` (counts[q] elements, zero allowed) lands in `out` at
  // displs[q] (packed in rank order without displs). Every rank passes the same counts.
  void allgatherv(tensor_view in, tensor_view out, span<const std::size_t> counts,
                  span<const std::size_t> displs = {}) {
    run(allgatherv_call(in, out, counts, displs));
  }
  work iallgatherv(tensor_view in, tensor_view out, span<const std::size_t> counts,
                   span<const std::size_t> displs = {}) {
    return post(allgatherv_call(in, out, counts, displs));
  }

  // The root's `out` becomes the reduction of every rank's `in` (in place: in == out). `out`
  // is not touched on the other ranks (pass an empty view).
  void reduce(tensor_view in, tensor_view out, reduce_op op, int root) {
    run(reduce_call(in, out, op, root));
  }
  work ireduce(tensor_view in, tensor_view out, reduce_op op, int root) {
    return post(reduce_call(in, out, op, root));
  }

  // The root's `out` holds size() blocks of in.count elements, block q from rank q; `out` is not
  // touched on the other ranks.
  void gather(tensor_view in, tensor_view out, int root) { run(gather_call(in, out, root)); }
  work igather(tensor_view in, tensor_view out, int root) {
    return post(gather_call(in, out, root));
  }

  // Every rank's `out` becomes block rank() of the root's `in` (size() blocks of out.count
  // elements); `in` is not read on the other ranks.
  void scatter(tensor_view in, tensor_view out, int root) { run(scatter_call(in, out, root)); }
  work iscatter(tensor_view in, tensor_view out, int root) {
    return post(scatter_call(in, out, root));
  }

  // Point-to-point messages for users (pipeline parallelism): `data` to or from rank `peer`,
  // with a tag of the user's (0 <= tag < 2^30) on a tag space no collective uses. Messages of one
  // sender, receiver and tag match in the order they were sent; a receive whose size differs from
  // the send is a mismatch_error (no truncation), and each has the communicator's deadline. They
  // are posted in order with this communicator's collectives, as on a stream. The blocking forms
  // also complete there: two ranks that both send() before they recv() wait for each other (until
  // the deadline) unless the messages are small. The non-blocking forms complete in the
  // background, the calls after them starting meanwhile (async/progress.hpp): both ranks may
  // isend, then irecv, and wait for both; sendrecv is the blocking form of that exchange.
  void send(tensor_view data, int peer, int tag = 0) {
    run(waited(p2p_call(true, data, peer, tag)));
  }
  work isend(tensor_view data, int peer, int tag = 0) {
    return post_in_flight(p2p_call(true, data, peer, tag));
  }
  void recv(tensor_view data, int peer, int tag = 0) {
    run(waited(p2p_call(false, data, peer, tag)));
  }
  work irecv(tensor_view data, int peer, int tag = 0) {
    return post_in_flight(p2p_call(false, data, peer, tag));
  }
  void sendrecv(tensor_view out, int dest, tensor_view in, int source, int tag = 0) {
    run(waited(sendrecv_call(out, dest, in, source, tag)));
  }
  work isendrecv(tensor_view out, int dest, tensor_view in, int source, int tag = 0) {
    return post_in_flight(sendrecv_call(out, dest, in, source, tag));
  }

  // The first tag of users' messages; below it, the collectives' own (backend.hpp).
  static constexpr tag_t user_tag_base = distcomm::user_tag_base;

  // With the mismatch check on, the agreement that precedes every collective is a barrier by
  // itself (no rank leaves it before every rank entered it): nothing more is sent.
  void barrier() { run(barrier_call()); }
  work ibarrier() { return post(barrier_call()); }

  // Sub-communicators, for groups of ranks (Horovod's process sets, torch's new_group,
  // MPI_Comm_split). Each is a communicator of the same backend, strategy and settings with a
  // transport context of its own: usable at the same time as this one and its siblings, and
  // destroyed independently. All are collective over this communicator (every rank calls them,
  // in the same order with its other collectives); the backend needs split() (backend.hpp).
  //
  // The ranks passing the same color form one communicator, ranked by key, then by rank here
  // (MPI_Comm_split); a negative color joins none and gets nothing.
  std::optional<communicator> split(int color, int key = 0) {
    std::int64_t mine[2] = {color < 0 ? -1 : color, key};
    std::vector<std::int64_t> all(2 * static_cast<std::size_t>(size()));
    allgather(tensor_view{mine, 2, dtype::i64}, tensor_view{all.data(), all.size(), dtype::i64});
    std::vector<std::int64_t> colors, keys;
    for (std::size_t r = 0; r < all.size(); r += 2) {
      colors.push_back(all[r]);
      keys.push_back(all[r + 1]);
    }
    return make_group(detail::split_members(colors, keys, rank()));
  }

  // The ranks listed (distinct, every rank passing the same list) form one communicator, rank
  // ranks[i] becoming its rank i; the others get nothing. A list that differs across ranks is a
  // mismatch_error on every rank.
  std::optional<communicator> subset(span<const int> ranks) {
    std::vector<int> members(ranks.begin(), ranks.end());
    for (std::size_t i = 0; i < members.size(); ++i) {
      const int r = members[i];
      if (r < 0 || r >= size() ||
          std::find(members.begin(), members.begin() + static_cast<std::ptrdiff_t>(i), r) !=
              members.begin() + static_cast<std::ptrdiff_t>(i)) {
        throw invalid_argument_error("subset: rank " + std::to_string(r) + " is " +
                                     (r < 0 || r >= size()
                                          ? "not a rank (world size " + std::to_string(size()) + ")"
                                          : std::string("listed twice")));
      }
    }
    const std::uint64_t h = check::hash_bytes(members.data(), members.size() * sizeof(int));
    const std::vector<std::uint64_t> all = allgather_word(h);
    for (std::size_t r = 0; r < all.size(); ++r) {
      if (all[r] != h) {
        throw mismatch_error("subset: rank " + std::to_string(r) + " lists other ranks than rank " +
                             std::to_string(rank()) + " does");
      }
    }
    if (std::find(members.begin(), members.end(), rank()) == members.end()) members.clear();
    return make_group(std::move(members));
  }

  // The ranks on this host (same host name), ranked as here.
  communicator split_by_node() {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    const std::vector<std::uint64_t> all =
        allgather_word(check::hash_bytes(host, std::strlen(host)));
    const std::uint64_t h = all[static_cast<std::size_t>(rank())];
    const auto first = std::find(all.begin(), all.end(), h) - all.begin();
    return std::move(*split(static_cast<int>(first), rank()));
  }

  // After a lost rank (peer_lost_error) or a deadline (timeout_error), the ranks still alive
  // make a communicator of themselves and go on: they agree through the job's store on who they
  // are (agree_survivors, rendezvous/survivors.hpp: each waits up to `window` for the others),
  // then connect anew, ranked in their old order, with the same strategy and settings. Every
  // survivor calls it once per failure; this communicator stays unusable. A rank that arrives
  // after the survivors decided without it (stopped, then continued) gets excluded_error. Works
  // at any time (with every rank alive it makes the same group anew); needs a backend whose
  // sub-communicators meet through a store (gloo, ucx, shm; local): others throw
  // invalid_argument_error saying so.
  communicator shrink(std::chrono::duration<double> window) {
    state& s = get("shrink");
    if constexpr (!detail::has_split<Backend>::value || !detail::has_group_store<Backend>::value) {
      (void)window;
      throw invalid_argument_error(std::string("shrink: backend '") + backend_name() +
                                   "' cannot make a communicator of the survivors (it needs one "
                                   "that meets through a store: gloo, ucx, shm or local)");
    } else {
      s.progress.drain();  // what is queued fails at once on a failed communicator
      const std::string epoch = std::to_string(s.shrinks++);
      std::shared_ptr<store> kv = s.backend.group_store();
      const std::vector<int> alive =
          agree_survivors(*kv, "shrink/" + epoch, rank(), size(), window);
      std::optional<Backend> child = s.backend.split(alive, "shrink" + epoch);
      return communicator(std::move(*child), s.cfg, child_identity(s, "s" + epoch, alive));
    }
  }
  // The same with the default window: DISTCOMM_TIMEOUT, at most 5 s.
  communicator shrink() {
    return shrink(std::min(get("shrink").cfg.timeout, std::chrono::duration<double>(5.0)));
  }

  // Waits until every collective started so far has completed (their errors stay with their
  // works).
  void synchronize() { get().progress.drain(); }

  // Collectives started on this communicator so far (the sequence number of the next one).
  std::uint64_t calls() const noexcept { return s_ ? s_->check.calls() : 0; }

  // Whether retune() can change this communicator's settings: its strategy and fusion policy can
  // be made anew (cuda::fusion, which holds device memory, cannot).
  static constexpr bool retunable =
      std::is_move_assignable_v<Strategy> && std::is_constructible_v<Strategy, const config&> &&
      std::is_move_assignable_v<Fusion> && std::is_constructible_v<Fusion, const config&>;

  // The settings retune() changes, as they stand: the fusion threshold and cut-off, the segment
  // size and strategy::automatic's table as it resolves on this backend (another strategy: the
  // configured table).
  tuning current_tuning() {
    state& s = get("current_tuning");
    tuning t;
    s.progress.run("current_tuning", [&] {
      t.fusion_threshold = s.cfg.fusion_threshold;
      t.fusion_cutoff = s.cfg.fusion_cutoff.value_or(0);
      t.segment_bytes = s.cfg.segment_bytes.value_or(0);
      if constexpr (std::is_base_of_v<strategy::automatic, Strategy>) {
        t.algo = s.strategy.template table<Backend>();
      } else {
        t.algo = s.cfg.algo;
      }
      if constexpr (detail::has_retuned<Strategy>::value) s.strategy.describe(t);
    });
    return t;
  }

  // The collectives started after this call use `t`: the strategy and the fusion policy are made
  // anew from the settings with t's values (settings() shows them). Every rank must call it with
  // the same `t` between the same two collectives: the mismatch check names a rank that did not
  // at the next collective (without the check, ranks pipelining in different segments fail or
  // hang). The engine's autotuner does so (autotune/tuner.hpp).
  void retune(const tuning& t) {
    if constexpr (!retunable) {
      throw invalid_argument_error(std::string("retune: the strategy or fusion policy of this '") +
                                   backend_name() + "' communicator cannot be made anew");
    } else {
      if (!valid_segment_bytes(t.segment_bytes)) {
        throw invalid_argument_error("retune: segment size " + std::to_string(t.segment_bytes) +
                                     " is outside 64 bytes .. 1G");
      }
      state& s = get("retune");
      s.progress.run("retune", [&] {
        config c = s.cfg;
        c.fusion_threshold = t.fusion_threshold;
        c.fusion_cutoff = t.fusion_cutoff;
        c.segment_bytes = t.segment_bytes;
        c.algo = t.algo;
        if constexpr (detail::has_retuned<Strategy>::value) {
          s.strategy = s.strategy.retuned(c, t);
        } else {
          s.strategy = Strategy(c);
        }
        s.fusion = Fusion(c);
        if constexpr (detail::fusion_traces<Fusion>::value) {
          if (s.timeline) s.fusion.trace_to(s.timeline, s.track);
        }
        s.check.retune(check::settings_of(c, detail::strategy_identity(s.strategy).c_str()));
        s.cfg = std::move(c);
      });
    }
  }

 private:
  // `id` names a sub-communicator's recorder after its parent's; a communicator made from a
  // backend gets the process's next name (trace::next_recorder_name()).
  communicator(Backend backend, config cfg, std::optional<trace::flight_recorder::identity> id)
      : s_(std::make_unique<state>(std::move(backend), std::move(cfg), std::move(id))) {
    set_log_level(s_->cfg.log);  // DISTCOMM_LOG is read with the rest of the configuration
  }

  static constexpr bool moves_device = detail::moves_device_memory<Backend>::value;

  // The recorder identity of a sub-communicator of `members` (ranks here, in their new order),
  // named `<parent>/<suffix>`; none without a recorder here.
  std::optional<trace::flight_recorder::identity> child_identity(
      const state& s, const std::string& suffix, const std::vector<int>& members) const {
    if (!s.recorder) return std::nullopt;
    const trace::flight_recorder::identity& parent = s.recorder->who();
    trace::flight_recorder::identity id;
    id.name = parent.name + "/" + suffix;
    id.rank = static_cast<int>(std::find(members.begin(), members.end(), rank()) - members.begin());
    for (int m : members) id.ranks.push_back(parent.ranks[static_cast<std::size_t>(m)]);
    return id;
  }

  // Every rank's `word`, in rank order (group agreement: lists, host names).
  std::vector<std::uint64_t> allgather_word(std::uint64_t word) {
    std::vector<std::uint64_t> all(static_cast<std::size_t>(size()));
    allgather(tensor_view{&word, 1, dtype::i64}, tensor_view{all.data(), all.size(), dtype::i64});
    return all;
  }

  struct state {
    state(Backend b, config c, std::optional<trace::flight_recorder::identity> id,
          const std::function<Strategy(const config&)>* make = nullptr)
        : backend(std::move(b)),
          cfg(with_backend_defaults(detail::with_runtime_defaults(backend, std::move(c)))),
          strategy(make != nullptr ? (*make)(cfg) : Strategy(cfg)),
          fusion(cfg),
          check(cfg.mismatch_check && !moves_device,
                check::settings_of(cfg, detail::strategy_identity(strategy).c_str())),
          timeline(trace::timeline::open(cfg.timeline, backend.rank())) {
      check.watch_stalls(backend.rank(), cfg.stall_warning);
      if (cfg.flight_recorder != 0) {
        if (!id) {
          id.emplace();
          id->name = trace::next_recorder_name();
          id->rank = backend.rank();
          for (int r = 0; r < backend.size(); ++r) id->ranks.push_back(r);
        }
        id->backend = detail::backend_name_of(backend);
        id->strategy = strategy_name();
        recorder = trace::flight_recorder::make(cfg.flight_recorder, std::move(*id));
      }
      if (timeline) {
        track = timeline->track(std::string("collectives (") + detail::backend_name_of(backend) +
                                ", " + strategy_name() + ")");
        if constexpr (detail::fusion_traces<Fusion>::value) fusion.trace_to(timeline, track);
      }
    }
    Backend backend;
    config cfg;
    Strategy strategy;
    Fusion fusion;
    check::call_check<Backend> check;
    std::string failure;                        // "<collective>: <what()>" of the first failure
    std::exception_ptr first_failure;           // set with failure; its type is rethrown
    std::shared_ptr<trace::timeline> timeline;  // DISTCOMM_TIMELINE, else null
    std::shared_ptr<trace::flight_recorder> recorder;  // DISTCOMM_FLIGHT_RECORDER, else null
    int track = 0;
    std::uint64_t splits = 0;   // sub-communicators made so far: their names
    std::uint64_t shrinks = 0;  // shrink() calls so far: their keys in the store
    detail::progress progress;  // last: stopped (queue run) before the rest goes
  };

  // One collective, validated: its name, its fingerprint and what it does, body(state, until).
  template <class Body>
  struct call {
    const char* what;
    check::call_fingerprint fp;
    Body body;
  };
  template <class Body>
  static call<Body> make_call(const char* what, const check::call_fingerprint& fp, Body body) {
    return {what, fp, std::move(body)};
  }

  template <class Body>
  void run(call<Body> c) {
    state& s = get(c.what);
    s.progress.run(c.what, [&] { guarded(s, c.what, c.fp, c.body, posted_now(s)); });
  }
  template <class Body, class... Keep>
  work post(call<Body> c, Keep... keep) {
    state& s = get(c.what);
    return s.progress.post([&s, c = std::move(c), posted = posted_now(s), keep...]() mutable {
      guarded(s, c.what, c.fp, c.body, posted);
    });
  }

  // Messages: a call whose body posts them and returns their requests.
  using requests = std::vector<typename Backend::request>;
  // ... waited for where it runs (the blocking forms),
  template <class Body>
  static auto waited(call<Body> c) {
    return make_call(c.what, c.fp, [body = std::move(c.body)](state& s, deadline until) mutable {
      for (auto& r : body(s, until)) r.wait(until);
    });
  }
  // ... or left in flight, for the progress thread to poll (the non-blocking forms). Past the
  // deadline, the request's wait() raises the transport's timeout, naming the peer; a failure
  // leaves the communicator unusable, as in a collective.
  template <class Body, class... Keep>
  work post_in_flight(call<Body> c, Keep... keep) {
    state& s = get(c.what);
    return s.progress.post_in_flight(
        [&s, c = std::move(c), posted_at = posted_now(s), keep...]() mutable -> detail::poll_fn {
          auto posted = std::make_shared<requests>();
          deadline until{};
          auto post = [&](state& st, deadline u) {
            until = u;
            *posted = c.body(st, u);
          };
          guarded(s, c.what, c.fp, post, posted_at);
          if (posted->empty()) return {};
          return [&s, what = c.what, posted, until, keep...]() -> bool {
            try {
              for (auto& r : *posted) {
                if (r.test()) continue;
                if (clock::now() < until) return false;
                r.wait(until);
              }
              return true;
            } catch (const std::exception& e) {
              fail(s, what, e);
              throw;
            }
          };
        });
  }

  auto allreduce_call(tensor_view in, tensor_view out, reduce_op op) const {
    check_tensor("allreduce input", in);
    check_tensor("allreduce output", out);
    check_op(op);
    check_pair("allreduce", in, out, in.count, in.count);
    return make_call("allreduce", fingerprint(check::call_kind::allreduce, in.count, in.type, op),
                     [in, out, op](state& s, deadline until) {
                       if (in.count == 0) return;
                       s.strategy.allreduce(s.backend, in.data, out.data, in.count, in.type, op,
                                            until);
                     });
  }

  auto grouped_call(span<const tensor_view> tensors, reduce_op op) const {
    for (const tensor_view& t : tensors) check_tensor("grouped allreduce tensor", t);
    check_op(op);
    if constexpr (moves_device && std::is_same_v<Fusion, fusion::buffer>) {
      // fusion::buffer packs with host copies; device tensors need a device-side packer.
      throw invalid_argument_error(std::string("grouped allreduce: backend '") + Backend::name +
                                   "' moves device memory, which fusion::buffer cannot pack; "
                                   "use communicator<..., cuda::fusion> (from "
                                   "<distcomm/cuda/fusion.hpp>) or fusion::none");
    }
    const auto fp =
        check::grouped_fingerprint(tensors, static_cast<int>(op), get().check.settings());
    return make_call("grouped allreduce", fp, [tensors, op](state& s, deadline until) {
      const auto one = [&](const void* in, void* out, std::size_t count, dtype t, reduce_op o) {
        s.strategy.allreduce(s.backend, in, out, count, t, o, until);
      };
      if constexpr (detail::fusion_takes_backend<Fusion>::value) {
        s.fusion.allreduce(s.backend, tensors, op, until, one);  // e.g. on the backend's stream
      } else {
        s.fusion.allreduce(tensors, op, one);
      }
    });
  }

  auto reduce_scatter_call(tensor_view in, tensor_view out, reduce_op op) const {
    check_tensor("reduce_scatter input", in);
    check_tensor("reduce_scatter output", out);
    check_op(op);
    check_pair("reduce_scatter", in, out, checked_mul(out.count, "reduce_scatter"), out.count);
    return make_call(
        "reduce_scatter", fingerprint(check::call_kind::reduce_scatter, out.count, in.type, op),
        [in, out, op](state& s, deadline until) {
          if (out.count == 0) return;
          s.strategy.reduce_scatter(s.backend, in.data, out.data, out.count, in.type, op, until);
        });
  }

  auto allgather_call(tensor_view in, tensor_view out) const {
    check_tensor("allgather input", in);
    check_tensor("allgather output", out);
    check_pair("allgather", in, out, in.count, checked_mul(in.count, "allgather"));
    return make_call("allgather", fingerprint(check::call_kind::allgather, in.count, in.type),
                     [in, out](state& s, deadline until) {
                       if (in.count == 0) return;
                       s.strategy.allgather(s.backend, in.data, out.data, in.count, in.type, until);
                     });
  }

  auto broadcast_call(tensor_view data, int root) const {
    check_tensor("broadcast buffer", data);
    check_root("broadcast", root);
    return make_call(
        "broadcast", fingerprint(check::call_kind::broadcast, data.count, data.type, {}, root),
        [data, root](state& s, deadline until) {
          if (data.count == 0) return;
          s.strategy.broadcast(s.backend, data.data, data.count, data.type, root, until);
        });
  }

  auto alltoall_call(tensor_view in, tensor_view out) const {
    check_tensor("alltoall input", in);
    check_tensor("alltoall output", out);
    const std::size_t block = in.count / static_cast<std::size_t>(size());
    if (in.count % static_cast<std::size_t>(size()) != 0) {
      throw invalid_argument_error("alltoall: input has " + std::to_string(in.count) +
                                   " elements, not a multiple of the " + std::to_string(size()) +
                                   " ranks");
    }
    check_pair("alltoall", in, out, in.count, in.count);
    check_disjoint("alltoall", in, out);
    return make_call("alltoall", fingerprint(check::call_kind::alltoall, block, in.type),
                     [in, out, block](state& s, deadline until) {
                       if (block == 0) return;
                       s.strategy.alltoall(s.backend, in.data, out.data, block, in.type, until);
                     });
  }

  auto alltoallv_call(tensor_view in, span<const std::size_t> send_counts, tensor_view out,
                      span<const std::size_t> recv_counts, span<const std::size_t> send_displs,
                      span<const std::size_t> recv_displs) const {
    check_tensor("alltoallv input", in);
    check_tensor("alltoallv output", out);
    if (in.type != out.type) {
      throw invalid_argument_error(std::string("alltoallv: input is ") + to_string(in.type) +
                                   " but output is " + to_string(out.type));
    }
    check_disjoint("alltoallv", in, out);
    std::vector<std::size_t> sc(send_counts.begin(), send_counts.end());
    std::vector<std::size_t> rc(recv_counts.begin(), recv_counts.end());
    std::vector<std::size_t> sd = layout_of("alltoallv", "send", sc, send_displs, in.count);
    std::vector<std::size_t> rd = layout_of("alltoallv", "recv", rc, recv_displs, out.count);
    const auto me = static_cast<std::size_t>(rank());
    if (sc[me] != rc[me]) {
      throw invalid_argument_error("alltoallv: rank " + std::to_string(rank()) + " sends " +
                                   std::to_string(sc[me]) + " elements to itself but expects " +
                                   std::to_string(rc[me]));
    }
    return make_call("alltoallv", fingerprint(check::call_kind::alltoallv, 0, in.type),
                     [in, out, sc = std::move(sc), rc = std::move(rc), sd = std::move(sd),
                      rd = std::move(rd)](state& s, deadline until) {
                       s.strategy.alltoallv(s.backend, in.data, sc.data(), sd.data(), out.data,
                                            rc.data(), rd.data(), in.type, until);
                     });
  }

  auto allgatherv_call(tensor_view in, tensor_view out, span<const std::size_t> counts,
                       span<const std::size_t> displs) const {
    check_tensor("allgatherv input", in);
    check_tensor("allgatherv output", out);
    if (in.type != out.type) {
      throw invalid_argument_error(std::string("allgatherv: input is ") + to_string(in.type) +
                                   " but output is " + to_string(out.type));
    }
    std::vector<std::size_t> c(counts.begin(), counts.end());
    std::vector<std::size_t> d = layout_of("allgatherv", "", c, displs, out.count);
    const auto me = static_cast<std::size_t>(rank());
    if (in.count != c[me]) {
      throw invalid_argument_error("allgatherv: input has " + std::to_string(in.count) +
                                   " elements, but counts[" + std::to_string(rank()) + "] is " +
                                   std::to_string(c[me]));
    }
    const auto fp = check::counts_fingerprint(check::call_kind::allgatherv,
                                              span<const std::size_t>(c.data(), c.size()),
                                              static_cast<int>(in.type), get().check.settings());
    return make_call(
        "allgatherv", fp, [in, out, c = std::move(c), d = std::move(d)](state& s, deadline until) {
          s.strategy.allgatherv(s.backend, in.data, out.data, c.data(), d.data(), in.type, until);
        });
  }

  auto reduce_call(tensor_view in, tensor_view out, reduce_op op, int root) const {
    check_tensor("reduce input", in);
    check_op(op);
    check_root("reduce", root);
    if (rank() == root) {
      check_tensor("reduce output", out);
      check_pair("reduce", in, out, in.count, in.count);
    }
    return make_call("reduce", fingerprint(check::call_kind::reduce, in.count, in.type, op, root),
                     [in, out, op, root](state& s, deadline until) {
                       if (in.count == 0) return;
                       s.strategy.reduce(s.backend, in.data, out.data, in.count, in.type, op, root,
                                         until);
                     });
  }

  auto gather_call(tensor_view in, tensor_view out, int root) const {
    check_tensor("gather input", in);
    check_root("gather", root);
    if (rank() == root) {
      check_tensor("gather output", out);
      check_pair("gather", in, out, in.count, checked_mul(in.count, "gather"));
    }
    return make_call("gather", fingerprint(check::call_kind::gather, in.count, in.type, {}, root),
                     [in, out, root](state& s, deadline until) {
                       if (in.count == 0) return;
                       s.strategy.gather(s.backend, in.data, out.data, in.count, in.type, root,
                                         until);
                     });
  }

  auto scatter_call(tensor_view in, tensor_view out, int root) const {
    check_tensor("scatter output", out);
    check_root("scatter", root);
    if (rank() == root) {
      check_tensor("scatter input", in);
      check_pair("scatter", in, out, checked_mul(out.count, "scatter"), out.count);
    }
    return make_call(
        "scatter", fingerprint(check::call_kind::scatter, out.count, out.type, {}, root),
        [in, out, root](state& s, deadline until) {
          if (out.count == 0) return;
          s.strategy.scatter(s.backend, in.data, out.data, out.count, out.type, root, until);
        });
  }

  // send or recv, validated: a peer other than this rank, a user tag.
  auto p2p_call(bool sending, tensor_view data, int peer, int tag) const {
    const char* what = sending ? "send" : "recv";
    check_tensor(sending ? "send buffer" : "recv buffer", data);
    check_peer(what, peer, tag);
    const tag_t t = user_tag_base + static_cast<tag_t>(tag);
    auto fp = fingerprint(check::call_kind::point_to_point, data.count, data.type);
    return make_call(what, fp, [data, peer, t, sending](state& s, deadline) {
      requests posted;
      if (data.count == 0) return posted;
      if (sending) {
        posted.push_back(s.backend.isend(data.data, data.bytes(), peer, t));
      } else {
        posted.push_back(s.backend.irecv(data.data, data.bytes(), peer, t));
      }
      return posted;
    });
  }

  auto sendrecv_call(tensor_view out, int dest, tensor_view in, int source, int tag) const {
    check_tensor("sendrecv send buffer", out);
    check_tensor("sendrecv recv buffer", in);
    check_peer("sendrecv", dest, tag);
    check_peer("sendrecv", source, tag);
    const tag_t t = user_tag_base + static_cast<tag_t>(tag);
    auto fp = fingerprint(check::call_kind::point_to_point, out.count, out.type);
    return make_call("sendrecv", fp, [out, dest, in, source, t](state& s, deadline) {
      requests posted;
      if (in.count != 0) posted.push_back(s.backend.irecv(in.data, in.bytes(), source, t));
      if (out.count != 0) posted.push_back(s.backend.isend(out.data, out.bytes(), dest, t));
      return posted;
    });
  }

  void check_peer(const char* what, int peer, int tag) const {
    if (peer < 0 || peer >= size() || peer == rank()) {
      throw invalid_argument_error(
          std::string(what) + ": peer " + std::to_string(peer) +
          (peer == rank() ? " is this rank (copy the data instead)"
                          : " is not a rank (world size " + std::to_string(size()) + ")"));
    }
    if (tag < 0 || static_cast<tag_t>(tag) >= user_tag_base) {
      throw invalid_argument_error(std::string(what) + ": tag " + std::to_string(tag) +
                                   " is outside the users' tags, 0 to 2^30 - 1");
    }
  }

  auto barrier_call() const {
    return make_call("barrier", fingerprint(check::call_kind::barrier),
                     [](state& s, deadline until) {
                       if (!s.check.exchanges(s.backend.size()))
                         s.strategy.barrier(s.backend, until);
                     });
  }

  // The sub-communicator of `members` (empty: none for this rank), made by the backend in order
  // with this communicator's collectives.
  std::optional<communicator> make_group(std::vector<int> members) {
    state& s = get("split");
    if constexpr (!detail::has_split<Backend>::value) {
      throw invalid_argument_error(std::string("split: backend '") + backend_name() +
                                   "' cannot make sub-communicators (it has no split())");
    } else {
      const std::string name = std::to_string(s.splits++) + "." +
                               (members.empty() ? std::string("none") : std::to_string(members[0]));
      std::optional<Backend> child;
      s.progress.run("split", [&] {
        if (s.first_failure) {
          rethrow_failure(s,
                          "split: this communicator is unusable since an earlier collective "
                          "failed: " +
                              s.failure);
        }
        child = s.backend.split(members, name);
      });
      if (!child) return std::nullopt;
      return communicator(std::move(*child), s.cfg,
                          child_identity(s, std::to_string(s.splits - 1), members));
    }
  }

  state& get(const char* what = "communicator") const {
    if (!s_) throw error(std::string(what) + ": this communicator was moved from");
    return *s_;
  }

  // Runs what is still queued, then says goodbye (see ~communicator).
  void close() noexcept {
    if (!s_) return;
    s_->progress.stop();
    if (!s_->first_failure) s_->check.leave(s_->backend);
  }

  check::call_fingerprint fingerprint(check::call_kind kind, std::size_t count = 0,
                                      std::optional<dtype> t = {}, std::optional<reduce_op> op = {},
                                      int root = -1) const {
    return check::make_fingerprint(kind, get().check.settings(), count,
                                   t ? static_cast<int>(*t) : -1, op ? static_cast<int>(*op) : -1,
                                   root);
  }

  // Runs one collective: agreement on `fp` first, then `body`, under one deadline. A mismatch the
  // agreement finds leaves the communicator usable: no data moved, and every rank raised the same
  // error after the same exchange, so the next call pairs up as usual. Any other failure (and a
  // peer that left) makes it unusable.
  template <class Body>
  static void guarded(state& s, const char* what, const check::call_fingerprint& fp, Body& body,
                      trace::flight_recorder::time_point posted) {
    if (s.first_failure) {
      rethrow_failure(s, std::string(what) +
                             ": this communicator is unusable since an earlier "
                             "collective failed: " +
                             s.failure);
    }
    const deadline until = deadline_after(s.cfg.timeout);
    const span_on_exit traced{s, what, fp};
    // Through one function that is not a template (the recorder's), so that each collective's
    // code is compiled once.
    auto run = [&] { checked(s, what, fp, body, until); };
    const bool collective = fp.kind != static_cast<std::uint32_t>(check::call_kind::point_to_point);
    trace::flight_recorder::record(
        collective ? s.recorder.get() : nullptr, s.check.calls(), what, fp, posted, s.cfg.dump_dir,
        [](void* f) { (*static_cast<decltype(run)*>(f))(); }, &run);
  }

  // When a collective was posted, for the flight recorder (not read without one).
  static trace::flight_recorder::time_point posted_now(const state& s) {
    return s.recorder ? trace::flight_recorder::now() : trace::flight_recorder::time_point{};
  }

  // guarded()'s agreement and body.
  template <class Body>
  static void checked(state& s, const char* what, const check::call_fingerprint& fp, Body& body,
                      deadline until) {
    try {
      if (fp.kind != static_cast<std::uint32_t>(check::call_kind::point_to_point)) {
        s.check.agree(s.backend, fp, what, until);
      }
    } catch (const mismatch_error& e) {
      // A departure: unusable from now on, but nothing to abort. The ranks still here learn it
      // from the same exchange, and an abort could close a connection before this rank's last
      // message of the exchange left.
      if (s.check.peer_left()) fail(s, what, e, /*abort=*/false);
      throw;
    } catch (const std::exception& e) {
      fail(s, what, e);
      throw;
    }
    try {
      body(s, until);
    } catch (const invalid_argument_error&) {
      throw;  // a bad call on this rank leaves the transport untouched
    } catch (const strategy::detail::agreed_mismatch_error&) {
      throw;  // every rank raised it after the same exchange, nothing moved (alltoallv's counts)
    } catch (const std::exception& e) {
      fail(s, what, e);
      throw;
    }
  }

  // With DISTCOMM_TIMELINE set, each collective is one span of the communicator's track.
  struct span_on_exit {
    state& s;
    const char* what;
    const check::call_fingerprint& fp;
    trace::timeline::time_point begin =
        s.timeline ? trace::timeline::now() : trace::timeline::time_point{};
    ~span_on_exit() {
      if (!s.timeline) return;
      std::string args = "\"seq\": " + std::to_string(s.check.calls() - 1) +
                         ", \"count\": " + std::to_string(fp.count);
      if (fp.type >= 0) args += std::string(", \"dtype\": \"") + to_string(dtype(fp.type)) + "\"";
      if (fp.op >= 0) args += std::string(", \"op\": \"") + to_string(reduce_op(fp.op)) + "\"";
      if (fp.root >= 0) args += ", \"root\": " + std::to_string(fp.root);
      if (fp.tensors > 0) args += ", \"tensors\": " + std::to_string(fp.tensors);
      s.timeline->span(s.track, what, "collective", begin, trace::timeline::now(), args);
    }
  };

  // Called while `e` is being handled: remembers it as the first failure and aborts the backend,
  // so the other ranks' waits end at once.
  static void fail(state& s, const char* what, const std::exception& e, bool abort = true) {
    const std::string prefix = std::string(what) + ": ";
    const std::string text = e.what();
    s.failure = text.compare(0, prefix.size(), prefix) == 0 ? text : prefix + text;
    s.first_failure = std::current_exception();
    if (abort) s.backend.abort(s.failure);
  }

  // Throws `message` as the kind of the first failure, so that code catching timeout_error or
  // peer_lost_error around every call also catches the calls after it.
  [[noreturn]] static void rethrow_failure(const state& s, const std::string& message) {
    try {
      std::rethrow_exception(s.first_failure);
    } catch (const timeout_error&) {
      throw timeout_error(message);
    } catch (const peer_lost_error&) {
      throw peer_lost_error(message);
    } catch (const mismatch_error&) {
      throw mismatch_error(message);
    } catch (const backend_error& e) {
      throw backend_error(e.backend(), e.routine(), e.code(), message);
    } catch (...) {
      throw error(message);
    }
  }

  void check_tensor(const char* what, const tensor_view& t) const {
    if (!is_valid(t.type)) {
      throw invalid_argument_error(std::string(what) + ": invalid dtype value " +
                                   std::to_string(static_cast<int>(t.type)));
    }
    if (t.data == nullptr && t.count != 0) {
      throw invalid_argument_error(std::string(what) + ": data is null but count is " +
                                   std::to_string(t.count));
    }
    if (t.count > std::numeric_limits<std::size_t>::max() / dtype_size(t.type)) {
      throw invalid_argument_error(std::string(what) + ": " + std::to_string(t.count) +
                                   " elements of " + to_string(t.type) +
                                   " overflow the address space");
    }
    // A backend moves either host memory or (moves_device_memory, e.g. NCCL) CUDA memory.
    const memory_kind moved = moves_device ? memory_kind::cuda : memory_kind::host;
    if (t.memory != moved) {
      throw invalid_argument_error(std::string(what) + ": tensor in " + to_string(t.memory) +
                                   " memory, but backend '" + backend_name() + "' moves " +
                                   to_string(moved) + " memory only");
    }
  }

  static void check_op(reduce_op op) {
    if (!is_valid(op)) {
      throw invalid_argument_error("invalid reduce_op value " +
                                   std::to_string(static_cast<int>(op)));
    }
  }

  // `in` and `out` must share a dtype and have the expected element counts.
  static void check_pair(const char* what, const tensor_view& in, const tensor_view& out,
                         std::size_t in_count, std::size_t out_count) {
    if (in.type != out.type) {
      throw invalid_argument_error(std::string(what) + ": input is " + to_string(in.type) +
                                   " but output is " + to_string(out.type));
    }
    if (in.count != in_count) {
      throw invalid_argument_error(std::string(what) + ": input has " + std::to_string(in.count) +
                                   " elements, expected " + std::to_string(in_count));
    }
    if (out.count != out_count) {
      throw invalid_argument_error(std::string(what) + ": output has " + std::to_string(out.count) +
                                   " elements, expected " + std::to_string(out_count));
    }
  }

  // alltoall(v) reads blocks of `in` while others already land in `out`: no in-place form.
  static void check_disjoint(const char* what, const tensor_view& in, const tensor_view& out) {
    const auto a = reinterpret_cast<std::uintptr_t>(in.data);
    const auto b = reinterpret_cast<std::uintptr_t>(out.data);
    if (a != 0 && b != 0 && in.bytes() != 0 && out.bytes() != 0 && a < b + out.bytes() &&
        b < a + in.bytes()) {
      throw invalid_argument_error(std::string(what) +
                                   ": input and output overlap; it has no in-place form, use "
                                   "another output buffer");
    }
  }

  void check_root(const char* what, int root) const {
    if (root < 0 || root >= size()) {
      throw invalid_argument_error(std::string(what) + ": root " + std::to_string(root) +
                                   " is not a rank (world size " + std::to_string(size()) + ")");
    }
  }

  // The displacements of `counts` (one per rank) in a buffer of `capacity` elements: `displs`
  // as given, or the blocks packed in rank order without them. Each block must fit.
  std::vector<std::size_t> layout_of(const char* what, const char* side,
                                     const std::vector<std::size_t>& counts,
                                     span<const std::size_t> displs, std::size_t capacity) const {
    const std::string name = std::string(what) + ": " + side + (*side ? "_" : "");
    const auto p = static_cast<std::size_t>(size());
    if (counts.size() != p) {
      throw invalid_argument_error(name + "counts has " + std::to_string(counts.size()) +
                                   " entries, expected one per rank (" + std::to_string(p) + ")");
    }
    if (!displs.empty() && displs.size() != p) {
      throw invalid_argument_error(name + "displs has " + std::to_string(displs.size()) +
                                   " entries, expected none or one per rank (" + std::to_string(p) +
                                   ")");
    }
    std::vector<std::size_t> d(p);
    std::size_t next = 0;
    for (std::size_t q = 0; q < p; ++q) {
      d[q] = displs.empty() ? next : displs[q];
      if (counts[q] > capacity || d[q] > capacity - counts[q]) {
        throw invalid_argument_error(name + "counts[" + std::to_string(q) +
                                     "] = " + std::to_string(counts[q]) + " elements at " +
                                     std::to_string(d[q]) + " do not fit in the buffer of " +
                                     std::to_string(capacity) + " elements");
      }
      next = d[q] + counts[q];
    }
    return d;
  }

  std::size_t checked_mul(std::size_t count, const char* what) const {
    const auto p = static_cast<std::size_t>(size());
    if (count > std::numeric_limits<std::size_t>::max() / p) {
      throw invalid_argument_error(std::string(what) + ": " + std::to_string(count) + " x " +
                                   std::to_string(p) + " ranks overflows size_t");
    }
    return count * p;
  }

  std::unique_ptr<state> s_;
};

}  // namespace distcomm
