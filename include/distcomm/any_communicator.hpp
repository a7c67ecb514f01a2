// any_communicator: a communicator<Backend, Strategy, Fusion> whose backend and strategy were
// chosen at run time. Same collectives, same validation, deadlines and errors: every call is
// forwarded, through one virtual call, to the typed communicator it holds. distcomm::init()
// returns one; make_communicator() wraps a backend you made yourself.
//   auto comm = distcomm::init();              // DISTCOMM_BACKEND, DISTCOMM_STRATEGY, ...
//   comm.allreduce(distcomm::view(grads), distcomm::reduce_op::avg);
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "distcomm/async/work.hpp"
#include "distcomm/communicator.hpp"
#include "distcomm/communicator/list.hpp"
#include "distcomm/config.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/core/reduce_op.hpp"
#include "distcomm/core/span.hpp"
#include "distcomm/core/tensor_view.hpp"
#include "distcomm/registry/strategies.hpp"

namespace distcomm {

class any_communicator {
 public:
  // Takes over a typed communicator (and with it the backend's connections).
  template <class Backend, class Strategy, class Fusion>
  explicit any_communicator(communicator<Backend, Strategy, Fusion>&& c)
      : impl_(std::make_unique<model<communicator<Backend, Strategy, Fusion>>>(std::move(c))) {}

  // Makes the communicator Comm from `args` in place (for one that cannot be moved, e.g. with
  // cuda::fusion): any_communicator(std::in_place_type<communicator<B, S>>, make(), cfg).
  template <class Comm, class... Args>
  explicit any_communicator(std::in_place_type_t<Comm>, Args&&... args)
      : impl_(std::make_unique<model<Comm>>(std::forward<Args>(args)...)) {}

  any_communicator(any_communicator&&) noexcept = default;
  any_communicator& operator=(any_communicator&&) noexcept = default;

  int rank() const { return get().rank(); }
  int size() const { return get().size(); }
  // The backend's and the strategy's names ("gloo", "ring"), as the registries spell them.
  const char* backend_name() const { return get().backend_name(); }
  const char* strategy_name() const { return get().strategy_name(); }
  const config& settings() const { return get().settings(); }
  std::uint64_t calls() const { return get().calls(); }
  // As communicator::agreements(), overlapped_agreements() and next_call_agreed().
  std::uint64_t agreements() const { return get().agreements(); }
  std::uint64_t overlapped_agreements() const { return get().overlapped_agreements(); }
  void next_call_agreed(deadline until = deadline::max()) { get().next_call_agreed(until); }
  // The memory its backend moves: host, or cuda (nccl).
  memory_kind memory() const { return get().memory(); }

  // The collectives and point-to-point messages, each blocking and non-blocking (i...):
  // communicator/list.hpp says what each does.
#define DISTCOMM_ANY_CALL(name, parameters, arguments) \
  void name parameters { get().name arguments; }       \
  work i##name parameters { return get().i##name arguments; }
  DISTCOMM_COLLECTIVES(DISTCOMM_ANY_CALL, DISTCOMM_DEFAULT)
  DISTCOMM_COLLECTIVE_FORMS(DISTCOMM_ANY_CALL, DISTCOMM_DEFAULT)
#undef DISTCOMM_ANY_CALL

  // Sub-communicators (communicator.hpp): the same backend, strategy and settings.
  std::optional<any_communicator> split(int color, int key = 0) { return get().split(color, key); }
  std::optional<any_communicator> subset(span<const int> ranks) { return get().subset(ranks); }
  any_communicator split_by_node() { return get().split_by_node(); }
  // The survivors of a lost rank, as communicator::shrink.
  any_communicator shrink() { return get().shrink(); }
  any_communicator shrink(std::chrono::duration<double> window) { return get().shrink(window); }
  // Waits until every collective started so far has completed.
  void synchronize() { get().synchronize(); }

  // Changing the fusion and strategy settings between collectives (communicator::retune; the
  // engine's autotuner). Not every communicator can: cuda::fusion's cannot, and retune() then
  // throws invalid_argument_error.
  bool retunable() const { return get().retunable(); }
  tuning current_tuning() { return get().current_tuning(); }
  void retune(const tuning& t) { get().retune(t); }

  // The typed communicator inside, when it is a Comm (as std::function::target); else nullptr.
  template <class Comm>
  Comm* target() noexcept {
    auto* m = impl_ ? dynamic_cast<model<Comm>*>(impl_.get()) : nullptr;
    return m ? &m->comm : nullptr;
  }

 private:
  struct interface {
    virtual ~interface() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual const char* backend_name() const = 0;
    virtual const char* strategy_name() const = 0;
    virtual const config& settings() const = 0;
    virtual std::uint64_t calls() const = 0;
    virtual std::uint64_t agreements() const = 0;
    virtual std::uint64_t overlapped_agreements() const = 0;
    virtual void next_call_agreed(deadline until) = 0;
    virtual memory_kind memory() const = 0;
#define DISTCOMM_ANY_VIRTUAL(name, parameters, arguments) \
  virtual void name parameters = 0;                       \
  virtual work i##name parameters = 0;
    DISTCOMM_COLLECTIVES(DISTCOMM_ANY_VIRTUAL, DISTCOMM_NO_DEFAULT)
#undef DISTCOMM_ANY_VIRTUAL
    virtual std::optional<any_communicator> split(int color, int key) = 0;
    virtual std::optional<any_communicator> subset(span<const int> ranks) = 0;
    virtual any_communicator split_by_node() = 0;
    virtual any_communicator shrink() = 0;
    virtual any_communicator shrink(std::chrono::duration<double> window) = 0;
    virtual void synchronize() = 0;
    virtual bool retunable() const = 0;
    virtual tuning current_tuning() = 0;
    virtual void retune(const tuning& t) = 0;
  };

  // Whether Comm can retune() (communicator<> and hierarchical_communicator declare it).
  template <class C, class = void>
  struct has_retune : std::false_type {};
  template <class C>
  struct has_retune<C, std::void_t<decltype(C::retunable)>>
      : std::integral_constant<bool, C::retunable> {};

  template <class Comm>
  struct model final : interface {
    template <class... Args>
    explicit model(Args&&... args) : comm(std::forward<Args>(args)...) {}
    int rank() const override { return comm.rank(); }
    int size() const override { return comm.size(); }
    const char* backend_name() const override { return comm.backend_name(); }
    const char* strategy_name() const override { return comm.strategy_name(); }
    const config& settings() const override { return comm.settings(); }
    std::uint64_t calls() const override { return comm.calls(); }
    std::uint64_t agreements() const override { return comm.agreements(); }
    std::uint64_t overlapped_agreements() const override { return comm.overlapped_agreements(); }
    void next_call_agreed(deadline until) override { comm.next_call_agreed(until); }
    memory_kind memory() const override {
      return detail::moves_device_memory<typename Comm::backend_type>::value ? memory_kind::cuda
                                                                             : memory_kind::host;
    }
#define DISTCOMM_ANY_OVERRIDE(name, parameters, arguments) \
  void name parameters override { comm.name arguments; }   \
  work i##name parameters override { return comm.i##name arguments; }
    DISTCOMM_COLLECTIVES(DISTCOMM_ANY_OVERRIDE, DISTCOMM_NO_DEFAULT)
#undef DISTCOMM_ANY_OVERRIDE
    std::optional<any_communicator> split(int color, int key) override {
      return wrap(comm.split(color, key));
    }
    std::optional<any_communicator> subset(span<const int> ranks) override {
      return wrap(comm.subset(ranks));
    }
    any_communicator split_by_node() override { return *wrap(comm.split_by_node()); }
    any_communicator shrink() override { return *wrap(comm.shrink()); }
    any_communicator shrink(std::chrono::duration<double> window) override {
      return *wrap(comm.shrink(window));
    }
    static std::optional<any_communicator> wrap(std::optional<Comm> c) {
      if (!c) return std::nullopt;
      return any_communicator(std::in_place_type<Comm>, std::move(*c));
    }
    // A Comm whose sub-communicators are of another type (hierarchical_communicator's are its
    // flat communicator's) returns them type-erased already.
    static std::optional<any_communicator> wrap(std::optional<any_communicator> c) { return c; }
    static std::optional<any_communicator> wrap(any_communicator c) {
      return std::optional<any_communicator>(std::move(c));
    }
    bool retunable() const override { return has_retune<Comm>::value; }
    tuning current_tuning() override {
      if constexpr (has_retune<Comm>::value) {
        return comm.current_tuning();
      } else {
        const config& c = comm.settings();
        return {c.fusion_threshold, c.fusion_cutoff.value_or(0), c.segment_bytes.value_or(0),
                c.algo};
      }
    }
    void retune(const tuning& t) override {
      if constexpr (has_retune<Comm>::value) {
        comm.retune(t);
      } else {
        (void)t;
        throw invalid_argument_error(std::string("retune: a '") + comm.backend_name() + "' " +
                                     comm.strategy_name() + " communicator cannot be retuned");
      }
    }
    void synchronize() override { comm.synchronize(); }
    Comm comm;
  };

  interface& get() const {
    if (!impl_) throw error("any_communicator: used after it was moved from");
    return *impl_;
  }

  std::unique_ptr<interface> impl_;
};

// A communicator over `backend` with the strategy named `strategy` (a name or alias of
// registry/strategies.hpp), behind one type. invalid_argument_error, before anything is sent,
// when the strategy is unknown or does not run on the backend.
// Every strategy's communicator is compiled where this is: the built backends and
// plugin_backend declare an overload of their own (their headers), which calls resolve to,
// defined once with make_communicator<B>() in their library (plugin_backend's in DistComm::init).
template <class Backend, class Fusion = fusion::buffer>
any_communicator make_communicator(Backend backend, const std::string& strategy,
                                   config cfg = config::from_env()) {
  return visit_strategy<Backend>(strategy, [&](auto tag) {
    using S = typename decltype(tag)::type;
    return any_communicator(std::in_place_type<communicator<Backend, S, Fusion>>,
                            std::move(backend), std::move(cfg));
  });
}

}  // namespace distcomm
