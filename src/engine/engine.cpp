// distcomm::engine: see include/distcomm/engine/engine.hpp and docs/ENGINE.md.
//
// One thread per engine runs cycles. A cycle starts DISTCOMM_CYCLE_TIME after the previous one
// while this rank has tensors pending (or has joined); with nothing pending it starts at the next
// submission, or after idle_wake, so the ranks still waiting hear from an idle rank. Each cycle
// is one allreduce (min) of a byte per response-cache entry plus two flags: "no rank needs a full
// exchange" and "every rank is blocked". A full exchange (two allgathers: the sizes, then the
// reports) runs when a flag says so; negotiate() then makes the plan every rank shares. The
// works' then() callbacks run on a pool of the engine's (async/pool.hpp), never on its thread: a
// callback may submit tensors and wait for them, or destroy the engine.
#include "distcomm/engine/engine.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "distcomm/autotune/tuner.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/core/half.hpp"
#include "distcomm/core/reduce.hpp"
#include "distcomm/engine/negotiation.hpp"
#include "distcomm/log.hpp"
#include "distcomm/trace/timeline.hpp"

namespace distcomm {

using engine_detail::failure;
using engine_detail::negotiation_settings;
using engine_detail::pending_request;
using engine_detail::plan;
using engine_detail::rank_report;
using engine_detail::response_cache;
using engine_detail::tensor_kind;
using engine_detail::tensor_request;

namespace {

using steady = std::chrono::steady_clock;

// How often a rank with nothing pending still takes part in a cycle: the longest a rank with
// tensors pending waits inside a cycle for an idle one (to learn of a join, a departure or a
// mismatch). Small against a step, large against a cycle.
constexpr auto idle_wake = std::chrono::milliseconds(50);
// A rank counts as blocked when its program has waited on the engine, without submitting
// anything, this long: long enough that a program still producing gradients on another thread
// is not taken for a stuck one, short enough that a mismatch is named well within 2 s.
constexpr auto blocked_after = std::chrono::milliseconds(250);

struct entry {
  tensor_request req;
  tensor_view data;  // allreduce and broadcast: the tensor; allgather: the input
  tensor_view out;   // allgather: the output
  std::shared_ptr<detail::work_state> state;
  steady::time_point submitted;
  trace::timeline::time_point submitted_wall;
  std::uint64_t id = 0;
};

// Fills `count` elements of `t` with the identity of `op`: what a joined rank contributes.
void fill_identity(void* data, std::size_t count, dtype t, reduce_op op) {
  const auto fill = [&](auto v) {
    auto* p = static_cast<decltype(v)*>(data);
    std::fill(p, p + count, v);
  };
  const bool lo = op == reduce_op::max;  // max: the lowest value; min: the highest
  switch (op) {
    case reduce_op::sum:
    case reduce_op::avg:
      std::memset(data, 0, count * dtype_size(t));
      return;
    case reduce_op::prod:
      switch (t) {
        case dtype::f16:
          return fill(f16(1.0f));
        case dtype::bf16:
          return fill(bf16(1.0f));
        case dtype::f32:
          return fill(1.0f);
        case dtype::f64:
          return fill(1.0);
        case dtype::i8:
          return fill(std::int8_t{1});
        case dtype::u8:
          return fill(std::uint8_t{1});
        case dtype::i32:
          return fill(std::int32_t{1});
        case dtype::i64:
          return fill(std::int64_t{1});
      }
      return;
    case reduce_op::min:
    case reduce_op::max: {
      const float inf = std::numeric_limits<float>::infinity();
      switch (t) {
        case dtype::f16:
          return fill(f16(lo ? -inf : inf));
        case dtype::bf16:
          return fill(bf16(lo ? -inf : inf));
        case dtype::f32:
          return fill(lo ? -inf : inf);
        case dtype::f64:
          return fill(lo ? -std::numeric_limits<double>::infinity()
                         : std::numeric_limits<double>::infinity());
        case dtype::i8:
          return fill(lo ? INT8_MIN : INT8_MAX);
        case dtype::u8:
          return fill(lo ? std::uint8_t{0} : std::uint8_t{UINT8_MAX});
        case dtype::i32:
          return fill(lo ? INT32_MIN : INT32_MAX);
        case dtype::i64:
          return fill(lo ? INT64_MIN : INT64_MAX);
      }
      return;
    }
  }
}

std::exception_ptr as_exception(const failure& f) {
  switch (f.what) {
    case failure::kind::timeout:
      return std::make_exception_ptr(timeout_error(f.message));
    case failure::kind::mismatch:
    case failure::kind::shutdown:
      break;
  }
  return std::make_exception_ptr(mismatch_error(f.message));
}

std::string what_of(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown error";
  }
}

}  // namespace

struct engine::impl {
  impl(any_communicator& c, any_communicator& ctl, const config& s)
      : comm(c), control(ctl), cfg(s), tl(trace::timeline::open(s.timeline, c.rank())) {
    if (control.memory() != memory_kind::host) {
      throw invalid_argument_error(
          std::string("engine: the ranks agree through host memory, and backend '") +
          control.backend_name() +
          "' moves device memory; give the engine a second communicator over the same ranks "
          "for that (engine(data, control, settings), e.g. nccl for the tensors and gloo or mpi "
          "for the agreement)");
    }
    if (control.size() != comm.size() || control.rank() != comm.rank()) {
      throw invalid_argument_error(
          "engine: the control communicator is rank " + std::to_string(control.rank()) + " of " +
          std::to_string(control.size()) + ", the data communicator rank " +
          std::to_string(comm.rank()) + " of " + std::to_string(comm.size()) + ": they must match");
    }
    if (tl) {
      track =
          tl->track(std::string("engine (") + c.backend_name() + ", " + c.strategy_name() + ")");
    }
    if (s.autotune || !s.autotune_file.empty()) {
      tuner = std::make_unique<autotune::tuner>(comm, control, s);
      cfg.cycle_time = tuner->cycle_time();
    }
    thread = std::thread([this] { run(); });
  }

  any_communicator& comm;     // the tensors' collectives
  any_communicator& control;  // the agreement's (the same as comm on a host backend)
  config cfg;
  std::shared_ptr<trace::timeline> tl;
  int track = 0;

  // Shared with the program's threads, under mutex.
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<entry> pending;  // submitted, not yet run or failed; submission order
  std::unordered_set<std::string> pending_names;
  std::vector<std::shared_ptr<detail::work_state>> unsynchronized;  // for synchronize()
  std::vector<std::shared_ptr<detail::work_state>> join_works;
  bool joined = false;
  bool stop_requested = false;
  bool closed = false;
  std::exception_ptr closed_because;  // what submissions after closing fail with
  steady::time_point last_submit = steady::now();
  std::uint64_t next_id = 1;
  std::shared_ptr<std::atomic<int>> waiters = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<detail::pool> callbacks = std::make_shared<detail::pool>();  // works' then()
  statistics stats;

  // The engine thread's own.
  response_cache cache;
  std::vector<int> joined_ranks;  // as of the last full exchange
  bool announced_joined = false;  // this rank's join state as the others last heard it
  steady::time_point last_stall_warning = steady::now();
  std::vector<unsigned char> bits;
  std::unique_ptr<autotune::tuner> tuner;  // DISTCOMM_AUTOTUNE, DISTCOMM_AUTOTUNE_FILE
  std::vector<autotune::batch> batches;    // this cycle's allreduces, when the tuner asks
  std::thread thread;

  work submit(entry e) {
    e.state = std::make_shared<detail::work_state>();
    e.state->count_waiters_in(waiters);
    e.state->callbacks_on(callbacks);
    work w(e.state);
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (closed) return work::failed(closed_because);
      // A rank that joined may still submit: negotiate() then names it on every rank.
      if (!pending_names.insert(e.req.name).second) {
        throw invalid_argument_error("engine: tensor '" + e.req.name +
                                     "' is already pending on this rank; wait for its work "
                                     "before submitting it again");
      }
      e.submitted = steady::now();
      e.submitted_wall = trace::timeline::now();
      e.id = next_id++;
      last_submit = e.submitted;
      unsynchronized.push_back(e.state);
      pending.push_back(std::move(e));
    }
    cv.notify_all();
    return w;
  }

  void run() {
    steady::time_point last_start = steady::now() - std::chrono::hours(1);
    for (;;) {
      bool stopping = false;
      {
        std::unique_lock<std::mutex> lock(mutex);
        for (;;) {
          stopping = stop_requested;
          if (stopping) break;
          const bool busy = !pending.empty() || joined;
          const auto due =
              busy ? last_start + std::chrono::duration_cast<steady::duration>(cfg.cycle_time)
                   : last_start + idle_wake;
          if (steady::now() >= due) break;
          cv.wait_until(lock, due);
        }
      }
      last_start = steady::now();
      if (!cycle(stopping)) break;
    }
  }

  // One negotiation and what it decides. False once the engine is closed.
  bool cycle(bool stopping) {
    const auto t0 = trace::timeline::now();
    const steady::time_point now = steady::now();
    // This rank's flags and cache bytes; its list of names only if a full exchange needs it.
    rank_report mine;
    bool need_full = stopping;
    bool local_work = false;
    {
      std::lock_guard<std::mutex> lock(mutex);
      mine.joined = joined;
      mine.shutdown = stopping;
      local_work = !pending.empty() || joined;
      mine.blocked = waiters->load() > 0 && local_work && now - last_submit >= blocked_after;
      bits.assign(cache.size() + 2, mine.joined ? 1 : 0);
      bool stalled = false;
      for (const entry& e : pending) {
        const double age = std::chrono::duration<double>(now - e.submitted).count();
        const int i = cache.find(e.req);
        if (i < 0 || joined) need_full = true;
        if (i >= 0) bits[static_cast<std::size_t>(i)] = 1;
        if (age >= cfg.timeout.count()) need_full = true;
        if (cfg.stall_warning.count() > 0 && age >= cfg.stall_warning.count()) stalled = true;
      }
      if (stalled && now - last_stall_warning >= cfg.stall_warning) {
        need_full = true;
        last_stall_warning = now;
      }
    }
    if (mine.joined != announced_joined) need_full = true;
    const std::size_t c = cache.size();
    bits[c] = need_full ? 0 : 1;
    bits[c + 1] = mine.blocked ? 1 : 0;

    plan pl;
    bool full = false;
    try {
      control.allreduce(tensor_view{bits.data(), bits.size(), dtype::u8}, reduce_op::min);
      full = bits[c] == 0;
      if (!full) {
        for (std::size_t i = 0; i < c; ++i) {
          if (bits[i] != 0) pl.ready.push_back(static_cast<int>(i));
        }
        pl.joined = joined_ranks;
        // Every rank blocked and nothing ready: a full exchange says who lacks what.
        if (pl.ready.empty() && bits[c + 1] == 1) full = true;
      }
      if (full) {
        mine.pending = pending_now();
        pl = exchange(mine);
        joined_ranks = pl.joined;
        announced_joined = mine.joined;
      }
    } catch (...) {
      close(std::current_exception());
      return false;
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++stats.cycles;
      if (full) ++stats.full_cycles;
    }
    if (tl && (local_work || full)) {
      tl->span(track, "negotiate", "engine", t0, trace::timeline::now(),
               "\"full\": " + std::string(full ? "true" : "false") +
                   ", \"ready\": " + std::to_string(pl.ready.size()));
    }

    for (const failure& f : pl.failures) fail(f);
    report_stalls(pl);
    if (!pl.ready.empty() && !execute(pl)) return false;
    if (pl.all_joined) {
      std::vector<std::shared_ptr<detail::work_state>> done;
      {
        std::lock_guard<std::mutex> lock(mutex);
        done.swap(join_works);
        joined = false;
      }
      joined_ranks.clear();
      announced_joined = false;
      for (auto& s : done) s->complete();
    }
    if (pl.shutdown_rank >= 0) {
      close(std::make_exception_ptr(mismatch_error("engine: closed, rank " +
                                                   std::to_string(pl.shutdown_rank) +
                                                   " shut its engine down (destroyed it)")));
      return false;
    }
    return true;
  }

  // What is pending here now, with ages: this rank's part of a full exchange.
  std::vector<pending_request> pending_now() {
    std::vector<pending_request> out;
    std::lock_guard<std::mutex> lock(mutex);
    const steady::time_point now = steady::now();
    for (const entry& e : pending) {
      out.push_back({e.req, std::chrono::duration<double>(now - e.submitted).count()});
    }
    return out;
  }

  plan exchange(const rank_report& mine) {
    const std::vector<unsigned char> blob = engine_detail::serialize(mine);
    const int p = comm.size();
    const auto pp = static_cast<std::size_t>(p);
    std::uint64_t n = blob.size();
    std::vector<std::uint64_t> sizes(pp);
    control.allgather(tensor_view{&n, sizeof n, dtype::u8},
                      tensor_view{sizes.data(), pp * sizeof n, dtype::u8});
    const std::uint64_t longest = *std::max_element(sizes.begin(), sizes.end());
    std::vector<unsigned char> padded(longest, 0), all(longest * pp);
    std::memcpy(padded.data(), blob.data(), blob.size());
    control.allgather(tensor_view{padded.data(), longest, dtype::u8},
                      tensor_view{all.data(), all.size(), dtype::u8});
    std::vector<rank_report> reports;
    for (int r = 0; r < p; ++r) {
      const auto ur = static_cast<std::size_t>(r);
      reports.push_back(engine_detail::deserialize(all.data() + ur * longest, sizes[ur], r));
    }
    negotiation_settings s;
    s.stall_s = cfg.stall_warning.count();
    s.timeout_s = cfg.timeout.count();
    return engine_detail::negotiate(reports, cache, s);
  }

  // Takes the entries `pick` selects out of `pending`.
  template <class Pick>
  std::vector<entry> take(Pick&& pick) {
    std::vector<entry> out;
    std::lock_guard<std::mutex> lock(mutex);
    auto keep = pending.begin();
    for (auto it = pending.begin(); it != pending.end(); ++it) {
      if (pick(*it)) {
        pending_names.erase(it->req.name);
        out.push_back(std::move(*it));
      } else {
        if (keep != it) *keep = std::move(*it);
        ++keep;
      }
    }
    pending.erase(keep, pending.end());
    return out;
  }

  void fail(const failure& f) {
    const std::unordered_set<std::string> names(f.names.begin(), f.names.end());
    const auto err = as_exception(f);
    for (entry& e : take([&](const entry& x) { return f.everything || names.count(x.req.name); })) {
      e.state->complete(err);
    }
    if (f.everything) {
      std::vector<std::shared_ptr<detail::work_state>> joins;
      {
        std::lock_guard<std::mutex> lock(mutex);
        joins.swap(join_works);
        joined = false;
      }
      for (auto& s : joins) s->complete(err);
    }
  }

  void report_stalls(const plan& pl) {
    std::ostringstream os;
    const int me = comm.rank();
    for (const auto& st : pl.stalls) {
      if (std::find(st.holders.begin(), st.holders.end(), me) == st.holders.end()) continue;
      os << (os.tellp() > 0 ? "; " : "") << "'" << st.name << "' (pending "
         << static_cast<long long>(st.age_s) << " s, not yet submitted by "
         << engine_detail::describe_ranks(st.missing) << ")";
    }
    if (os.tellp() > 0) {
      log(log_level::warn, "stall: rank " + std::to_string(me) +
                               " waits in the engine for tensors other ranks have not submitted: " +
                               os.str() + " (DISTCOMM_STALL_WARNING)");
    }
  }

  // Runs the ready entries, in plan order, as few collectives as the order allows.
  bool execute(const plan& pl) {
    const bool am_joined = !pl.joined.empty() && std::find(pl.joined.begin(), pl.joined.end(),
                                                           comm.rank()) != pl.joined.end();
    std::unordered_set<std::string> ready_names;
    for (int i : pl.ready) ready_names.insert(cache.at(i).name);
    std::vector<entry> mine = take([&](const entry& e) {
      const int i = cache.find(e.req);
      return i >= 0 && ready_names.count(e.req.name) != 0;
    });
    const auto active = static_cast<std::size_t>(comm.size()) - pl.joined.size();
    const auto begin_wall = trace::timeline::now();

    // Every ready call, with this rank's tensor (a joined rank: the op's identity, thrown away).
    struct item {
      tensor_request req;
      entry* own = nullptr;
      std::vector<unsigned char> identity;
      tensor_view data;
    };
    std::vector<item> items;
    items.reserve(pl.ready.size());
    for (int i : pl.ready) {
      item it;
      it.req = cache.at(i);
      for (entry& e : mine) {
        if (e.req.name == it.req.name) it.own = &e;
      }
      if (it.own != nullptr) {
        it.data = it.own->data;
      } else {
        if (!am_joined) continue;  // cannot happen: an active rank holds every ready name
        it.identity.resize(it.req.count * dtype_size(it.req.type));
        fill_identity(it.identity.data(), it.req.count, it.req.type,
                      static_cast<reduce_op>(it.req.op));
        it.data = tensor_view{it.identity.data(), it.req.count, it.req.type};
      }
      items.push_back(std::move(it));
    }

    std::size_t k = 0;
    while (k < items.size()) {
      const tensor_request& first = items[k].req;
      std::size_t end = k + 1;
      if (first.kind == tensor_kind::allreduce) {
        while (end < items.size() && items[end].req.kind == tensor_kind::allreduce &&
               items[end].req.op == first.op) {
          ++end;
        }
      }
      if (!run_batch(items, k, end, pl, active, begin_wall)) return false;
      k = end;
    }
    return !tuner || !tuner->searching() || tune(pl, mine);
  }

  // Tells the autotuner what ran; it may change the settings (the same on every rank, here).
  bool tune(const plan& pl, const std::vector<entry>& ran) {
    std::vector<int> allreduces;
    for (int i : pl.ready) {
      if (cache.at(i).kind == tensor_kind::allreduce) allreduces.push_back(i);
    }
    std::vector<autotune::handed> handed;
    if (tuner->wants_detail()) {
      for (const entry& e : ran) {
        if (e.req.kind == tensor_kind::allreduce) handed.push_back({e.data.bytes(), e.submitted});
      }
    }
    try {
      cfg.cycle_time = tuner->after_cycle(allreduces, batches, handed);
    } catch (...) {
      close(std::current_exception());
      return false;
    }
    batches.clear();
    return true;
  }

  // The batch's collective was agreed by this cycle's negotiation: every rank runs it from the
  // same plan, over tensors whose name, dtype, count, op and root the negotiation matched (the
  // response cache), and the negotiation's own agreement covered the communicator's settings
  // when it ran over the same communicator. Over a control communicator of its own, the data
  // communicator's settings were not part of it: its collectives keep their agreement.
  void agreed_by_negotiation() {
    if (&comm == &control) comm.next_call_agreed();
  }

  template <class Items>
  bool run_batch(Items& items, std::size_t k, std::size_t end, const plan& pl, std::size_t active,
                 trace::timeline::time_point queued_until) {
    const tensor_request& first = items[k].req;
    const auto t0 = trace::timeline::now();
    std::exception_ptr err;
    std::size_t bytes = 0;
    try {
      if (first.kind != tensor_kind::allreduce && !pl.joined.empty()) {
        throw mismatch_error("engine: " + std::string(to_string(first.kind)) + " of '" +
                             first.name + "' while " + engine_detail::describe_ranks(pl.joined) +
                             " joined; only allreduce goes on without the ranks that joined");
      }
      switch (first.kind) {
        case tensor_kind::allreduce: {
          auto op = static_cast<reduce_op>(first.op);
          // avg over the ranks that contributed: sum, then divide by them.
          const bool divide_here = op == reduce_op::avg && !pl.joined.empty();
          if (divide_here) op = reduce_op::sum;
          std::vector<tensor_view> views;
          for (std::size_t i = k; i < end; ++i) {
            views.push_back(items[i].data);
            bytes += items[i].data.bytes();
          }
          agreed_by_negotiation();
          comm.allreduce(span<const tensor_view>(views.data(), views.size()), op);
          if (divide_here) {
            for (std::size_t i = k; i < end; ++i) {
              const tensor_view& v = items[i].data;
              if (items[i].own != nullptr) divide(v.data, v.data, v.count, v.type, active);
            }
          }
          break;
        }
        case tensor_kind::broadcast:
          bytes = items[k].data.bytes();
          agreed_by_negotiation();
          comm.broadcast(items[k].data, first.root);
          break;
        case tensor_kind::allgather:
          bytes = items[k].data.bytes();
          agreed_by_negotiation();
          comm.allgather(items[k].data, items[k].own->out);
          break;
      }
    } catch (const mismatch_error&) {
      err = std::current_exception();  // this batch fails; the communicator is still usable
    } catch (...) {
      err = std::current_exception();
    }
    const auto t1 = trace::timeline::now();
    if (tuner && tuner->wants_detail() && first.kind == tensor_kind::allreduce && !err) {
      batches.push_back({bytes, std::chrono::duration<double>(t1 - t0).count()});
    }
    if (tl) {
      std::string names;
      for (std::size_t i = k; i < end; ++i) {
        names += (names.empty() ? "" : ", ") + trace::timeline::quote(items[i].req.name);
      }
      tl->span(track, to_string(first.kind), "collective", t0, t1,
               "\"tensors\": [" + names + "], \"bytes\": " + std::to_string(bytes) +
                   ", \"backend\": \"" + comm.backend_name() + "\", \"strategy\": \"" +
                   comm.strategy_name() + "\"");
      for (std::size_t i = k; i < end; ++i) {
        if (entry* e = items[i].own) {
          tl->async_span(e->req.name, "queue", e->id, e->submitted_wall, queued_until,
                         "\"phase\": \"queue\"");
        }
      }
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++stats.collectives;
      for (std::size_t i = k; i < end; ++i) stats.tensors += items[i].own != nullptr ? 1 : 0;
    }
    for (std::size_t i = k; i < end; ++i) {
      if (entry* e = items[i].own) e->state->complete(err);
    }
    if (err && !is_mismatch(err)) {
      close(err);
      return false;
    }
    return true;
  }

  static bool is_mismatch(std::exception_ptr e) {
    try {
      std::rethrow_exception(e);
    } catch (const mismatch_error&) {
      return true;
    } catch (...) {
      return false;
    }
  }

  // Stops the thread (telling the other ranks this one leaves) and fails what is pending.
  void stop(const char* why) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop_requested = true;
    }
    cv.notify_all();
    if (thread.joinable()) thread.join();
    close(std::make_exception_ptr(error(why)));
    callbacks->stop();  // the callbacks running finish (from one of them: it is let go)
  }

  // No more cycles: everything pending (and everything submitted later) fails with `why`.
  void close(std::exception_ptr why) {
    std::vector<entry> left;
    std::vector<std::shared_ptr<detail::work_state>> joins;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (!closed) {
        closed = true;
        closed_because = std::make_exception_ptr(
            error("engine: closed after an earlier failure: " + what_of(why)));
      }
      left.swap(pending);
      pending_names.clear();
      joins.swap(join_works);
    }
    for (entry& e : left) e.state->complete(why);
    for (auto& s : joins) s->complete(why);
  }
};

engine::engine(any_communicator& comm) : engine(comm, comm.settings()) {}

engine::engine(any_communicator& comm, const config& settings)
    : impl_(std::make_unique<impl>(comm, comm, settings)) {}

engine::engine(any_communicator& data, any_communicator& control, const config& settings)
    : impl_(std::make_unique<impl>(data, control, settings)) {}

engine::~engine() { impl_->stop("engine: destroyed"); }

void engine::shrink() {
  any_communicator& comm = impl_->comm;
  if (&impl_->control != &comm) {
    throw invalid_argument_error(
        "engine: shrink: this engine agrees over a second communicator; shrink both (in the "
        "same order on every rank) and make a new engine over them");
  }
  const config cfg = impl_->cfg;
  impl_->stop("engine: shrunk after a lost rank");
  impl_.reset();
  // An engine runs over `comm` afterwards in any case: the survivors', or the failed one (whose
  // engine then fails every work with the communicator's first failure).
  try {
    comm = comm.shrink();
  } catch (...) {
    impl_ = std::make_unique<impl>(comm, comm, cfg);
    throw;
  }
  impl_ = std::make_unique<impl>(comm, comm, cfg);
}

work engine::allreduce_async(const std::string& name, tensor_view data, reduce_op op) {
  if (!is_valid(op)) throw invalid_argument_error("engine: invalid reduce_op for '" + name + "'");
  if (data.memory != impl_->comm.memory()) {
    throw invalid_argument_error("engine: tensor '" + name + "' is in " + to_string(data.memory) +
                                 " memory, but the communicator moves " +
                                 to_string(impl_->comm.memory()) + " memory");
  }
  entry e;
  e.req = {name, tensor_kind::allreduce, data.type, data.count, static_cast<std::int32_t>(op), -1};
  e.data = data;
  return impl_->submit(std::move(e));
}

work engine::broadcast_async(const std::string& name, tensor_view data, int root) {
  if (root < 0 || root >= size()) {
    throw invalid_argument_error("engine: broadcast of '" + name + "': root " +
                                 std::to_string(root) + " is not a rank");
  }
  entry e;
  e.req = {name, tensor_kind::broadcast, data.type, data.count, -1, root};
  e.data = data;
  return impl_->submit(std::move(e));
}

work engine::allgather_async(const std::string& name, tensor_view in, tensor_view out) {
  if (out.count != in.count * static_cast<std::size_t>(size()) || out.type != in.type) {
    throw invalid_argument_error("engine: allgather of '" + name + "': output must hold " +
                                 std::to_string(size()) + " blocks of the input's " +
                                 std::to_string(in.count) + " elements, same dtype");
  }
  entry e;
  e.req = {name, tensor_kind::allgather, in.type, in.count, -1, -1};
  e.data = in;
  e.out = out;
  return impl_->submit(std::move(e));
}

work engine::join() {
  if (impl_->comm.memory() != memory_kind::host) {
    throw invalid_argument_error(std::string("engine: join() needs a backend that moves host "
                                             "memory; '") +
                                 impl_->comm.backend_name() + "' moves device memory");
  }
  auto state = std::make_shared<detail::work_state>();
  state->count_waiters_in(impl_->waiters);
  state->callbacks_on(impl_->callbacks);
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (impl_->closed) return work::failed(impl_->closed_because);
    impl_->joined = true;
    impl_->join_works.push_back(state);
    impl_->last_submit = steady::now();
  }
  impl_->cv.notify_all();
  return work(std::move(state));
}

void engine::synchronize() {
  std::vector<std::shared_ptr<detail::work_state>> all;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    all.swap(impl_->unsynchronized);
  }
  std::exception_ptr first;
  for (auto& s : all) {
    s->wait();
    if (!first) first = s->error();
  }
  if (first) std::rethrow_exception(first);
}

int engine::rank() const { return impl_->comm.rank(); }
int engine::size() const { return impl_->comm.size(); }

autotune::status engine::autotune() const {
  return impl_->tuner ? impl_->tuner->state() : autotune::status{};
}

engine::statistics engine::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->stats;
}

}  // namespace distcomm
