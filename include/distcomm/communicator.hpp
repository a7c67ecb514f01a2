// communicator<Backend, Strategy, Fusion>: the one entry point an application uses. It validates
// every call, gives it a deadline (DISTCOMM_TIMEOUT), and runs it through the strategy (which
// algorithm) over the backend (which transport); grouped allreduces go through the fusion policy.
// Before a collective moves data, the ranks agree on a fingerprint of the call (check/agree.hpp):
// ranks that disagree (another collective, dtype, count, op, root or order) all get a
// mismatch_error instead of wrong data or a hang. After a collective fails, the communicator
// aborts the backend (so the other ranks fail fast too) and refuses further calls with an error
// of the first failure's kind.
#pragma once

#include <cstdint>
#include <exception>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "distcomm/backend.hpp"
#include "distcomm/check/agree.hpp"
#include "distcomm/config.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/core/span.hpp"
#include "distcomm/core/tensor_view.hpp"
#include "distcomm/fusion/buffer.hpp"
#include "distcomm/log.hpp"
#include "distcomm/registry/strategies.hpp"
#include "distcomm/strategy/automatic.hpp"

namespace distcomm {

namespace detail {
// A Fusion policy declaring `static constexpr bool takes_backend = true` (cuda::fusion) is called
// as allreduce(backend, tensors, op, deadline, run), to work on the backend's stream and wait for
// it; the others as allreduce(tensors, op, run).
template <class F, class = void>
struct fusion_takes_backend : std::false_type {};
template <class F>
struct fusion_takes_backend<F, std::enable_if_t<F::takes_backend>> : std::true_type {};

// The strategy's `name`, part of the settings every rank must share.
template <class S, class = void>
struct strategy_name {
  static constexpr const char* value = "(unnamed strategy)";
};
template <class S>
struct strategy_name<S, std::void_t<decltype(S::name)>> {
  static constexpr const char* value = S::name;
};

}  // namespace detail

template <class Backend, class Strategy = strategy::automatic, class Fusion = fusion::buffer>
class communicator {
  static_assert(check_backend<Backend>());  // names the member of the contract a backend lacks

 public:
  using backend_type = Backend;
  using strategy_type = Strategy;
  using fusion_type = Fusion;

  explicit communicator(Backend backend, config cfg = config::from_env())
      : backend_(std::move(backend)),
        config_(with_backend_defaults(detail::with_runtime_defaults(backend_, std::move(cfg)))),
        strategy_(config_),
        fusion_(config_),
        check_(config_.mismatch_check && !moves_device,
               check::settings_of(config_, detail::strategy_name<Strategy>::value)) {
    set_log_level(config_.log);  // DISTCOMM_LOG is read with the rest of the configuration
  }

  communicator(communicator&&) noexcept = default;
  communicator& operator=(communicator&&) noexcept = default;
  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;

  // Ranks that still call collectives on this communicator learn that this one left (a
  // mismatch_error naming it and how many collectives it made) instead of waiting for it.
  ~communicator() {
    if (!first_failure_) check_.leave(backend_);
  }

  // The settings in use: the configuration given, with what it left to the backend filled in
  // (segment_bytes_for and fusion_cutoff_for, backend.hpp).
  static config with_backend_defaults(config c) {
    if (!c.fusion_cutoff) c.fusion_cutoff = fusion_cutoff_for<Backend>;
    if (!c.segment_bytes) c.segment_bytes = segment_bytes_for<Backend>;
    return c;
  }

  int rank() const { return backend_.rank(); }
  int size() const { return backend_.size(); }
  // The names programs print and accept: "gloo", "ring" (registry/strategies.hpp).
  const char* backend_name() const noexcept { return detail::backend_name_of(backend_); }
  static const char* strategy_name() {
    const char* n = registered_name<Strategy>();
    return n ? n : detail::strategy_name<Strategy>::value;
  }
  Backend& backend() noexcept { return backend_; }
  const config& settings() const noexcept { return config_; }
  Strategy& strategy() noexcept { return strategy_; }
  Fusion& fusion() noexcept { return fusion_; }

  // In place: every rank's `data` becomes the reduction of all ranks' `data`.
  void allreduce(tensor_view data, reduce_op op = reduce_op::sum) { allreduce(data, data, op); }

  // Out of place: `out` becomes the reduction of every rank's `in`. `in` is only read.
  void allreduce(tensor_view in, tensor_view out, reduce_op op = reduce_op::sum) {
    check_tensor("allreduce input", in);
    check_tensor("allreduce output", out);
    check_op(op);
    check_pair("allreduce", in, out, in.count, in.count);
    const auto fp = fingerprint(check::call_kind::allreduce, in.count, in.type, op);
    guarded("allreduce", fp, [&](deadline until) {
      if (in.count == 0) return;
      strategy_.allreduce(backend_, in.data, out.data, in.count, in.type, op, until);
    });
  }

  // Grouped allreduce of a whole gradient set, in place, fused by the Fusion policy.
  void allreduce(span<const tensor_view> tensors, reduce_op op = reduce_op::sum) {
    for (const tensor_view& t : tensors) check_tensor("grouped allreduce tensor", t);
    check_op(op);
    if constexpr (moves_device && std::is_same_v<Fusion, fusion::buffer>) {
      // fusion::buffer packs with host copies; device tensors need a device-side packer.
      throw invalid_argument_error(std::string("grouped allreduce: backend '") + Backend::name +
                                   "' moves device memory, which fusion::buffer cannot pack; "
                                   "use communicator<..., cuda::fusion> (from "
                                   "<distcomm/cuda/fusion.hpp>) or fusion::none");
    }
    const auto fp = check::grouped_fingerprint(tensors, static_cast<int>(op), check_.settings());
    guarded("grouped allreduce", fp, [&](deadline until) {
      const auto run = [&](const void* in, void* out, std::size_t count, dtype t, reduce_op o) {
        strategy_.allreduce(backend_, in, out, count, t, o, until);
      };
      if constexpr (detail::fusion_takes_backend<Fusion>::value) {
        fusion_.allreduce(backend_, tensors, op, until, run);  // e.g. on the backend's stream
      } else {
        fusion_.allreduce(tensors, op, run);
      }
    });
  }

  // `in` holds size() blocks of out.count elements; rank r receives the reduction of block r.
  void reduce_scatter(tensor_view in, tensor_view out, reduce_op op = reduce_op::sum) {
    check_tensor("reduce_scatter input", in);
    check_tensor("reduce_scatter output", out);
    check_op(op);
    check_pair("reduce_scatter", in, out, checked_mul(out.count, "reduce_scatter"), out.count);
    const auto fp = fingerprint(check::call_kind::reduce_scatter, out.count, in.type, op);
    guarded("reduce_scatter", fp, [&](deadline until) {
      if (out.count == 0) return;
      strategy_.reduce_scatter(backend_, in.data, out.data, out.count, in.type, op, until);
    });
  }

  // `out` holds size() blocks of in.count elements, block r from rank r.
  void allgather(tensor_view in, tensor_view out) {
    check_tensor("allgather input", in);
    check_tensor("allgather output", out);
    check_pair("allgather", in, out, in.count, checked_mul(in.count, "allgather"));
    const auto fp = fingerprint(check::call_kind::allgather, in.count, in.type);
    guarded("allgather", fp, [&](deadline until) {
      if (in.count == 0) return;
      strategy_.allgather(backend_, in.data, out.data, in.count, in.type, until);
    });
  }

  // Every rank's `data` becomes root's `data`.
  void broadcast(tensor_view data, int root) {
    check_tensor("broadcast buffer", data);
    if (root < 0 || root >= size()) {
      throw invalid_argument_error("broadcast: root " + std::to_string(root) +
                                   " is not a rank (world size " + std::to_string(size()) + ")");
    }
    const auto fp = fingerprint(check::call_kind::broadcast, data.count, data.type, {}, root);
    guarded("broadcast", fp, [&](deadline until) {
      if (data.count == 0) return;
      strategy_.broadcast(backend_, data.data, data.count, data.type, root, until);
    });
  }

  // With the mismatch check on, the agreement that precedes every collective is a barrier by
  // itself (no rank leaves it before every rank entered it): nothing more is sent.
  void barrier() {
    guarded("barrier", fingerprint(check::call_kind::barrier), [&](deadline until) {
      if (!check_.exchanges(size())) strategy_.barrier(backend_, until);
    });
  }

  // Collectives started on this communicator so far (the sequence number of the next one).
  std::uint64_t calls() const noexcept { return check_.calls(); }

 private:
  check::call_fingerprint fingerprint(check::call_kind kind, std::size_t count = 0,
                                      std::optional<dtype> t = {}, std::optional<reduce_op> op = {},
                                      int root = -1) const {
    return check::make_fingerprint(kind, check_.settings(), count, t ? static_cast<int>(*t) : -1,
                                   op ? static_cast<int>(*op) : -1, root);
  }

  // Runs one collective: agreement on `fp` first, then `body`, under one deadline. A mismatch the
  // agreement finds leaves the communicator usable: no data moved, and every rank raised the same
  // error after the same exchange, so the next call pairs up as usual. Any other failure (and a
  // peer that left) makes it unusable.
  template <class F>
  void guarded(const char* what, const check::call_fingerprint& fp, F&& body) {
    if (first_failure_) {
      rethrow_failure(std::string(what) +
                      ": this communicator is unusable since an earlier "
                      "collective failed: " +
                      failure_);
    }
    const deadline until = deadline_after(config_.timeout);
    try {
      check_.agree(backend_, fp, what, until);
    } catch (const mismatch_error& e) {
      // A departure: unusable from now on, but nothing to abort. The ranks still here learn it
      // from the same exchange, and an abort could close a connection before this rank's last
      // message of the exchange left.
      if (check_.peer_left()) fail(what, e, /*abort=*/false);
      throw;
    } catch (const std::exception& e) {
      fail(what, e);
      throw;
    }
    try {
      body(until);
    } catch (const invalid_argument_error&) {
      throw;  // a bad call on this rank leaves the transport untouched
    } catch (const std::exception& e) {
      fail(what, e);
      throw;
    }
  }

  // Called while `e` is being handled: remembers it as the first failure and aborts the backend,
  // so the other ranks' waits end at once.
  void fail(const char* what, const std::exception& e, bool abort = true) {
    const std::string prefix = std::string(what) + ": ";
    const std::string text = e.what();
    failure_ = text.compare(0, prefix.size(), prefix) == 0 ? text : prefix + text;
    first_failure_ = std::current_exception();
    if (abort) backend_.abort(failure_);
  }

  // Throws `message` as the kind of the first failure, so that code catching timeout_error or
  // peer_lost_error around every call also catches the calls after it.
  [[noreturn]] void rethrow_failure(const std::string& message) const {
    try {
      std::rethrow_exception(first_failure_);
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

  static constexpr bool moves_device = detail::moves_device_memory<Backend>::value;

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

  std::size_t checked_mul(std::size_t count, const char* what) const {
    const auto p = static_cast<std::size_t>(size());
    if (count > std::numeric_limits<std::size_t>::max() / p) {
      throw invalid_argument_error(std::string(what) + ": " + std::to_string(count) + " x " +
                                   std::to_string(p) + " ranks overflows size_t");
    }
    return count * p;
  }

  Backend backend_;
  config config_;
  Strategy strategy_;
  Fusion fusion_;
  check::call_check<Backend> check_;
  std::string failure_;               // "<collective>: <what()>" of the first failure
  std::exception_ptr first_failure_;  // set with failure_; its type is rethrown
};

}  // namespace distcomm
