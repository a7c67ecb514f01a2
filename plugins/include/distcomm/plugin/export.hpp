// The export side of the plugin ABI: turns a C++ backend of DistComm's contract (backend.hpp) into
// a distcomm_backend_v1 table. A plugin's one source file says
//
//   DISTCOMM_EXPORT_BACKEND_V1(distcomm::gloo_backend, [](const distcomm::plugin::host& h) {
//     return distcomm::gloo_backend(h.kv(), h.rank, h.size);
//   })
//
// and is built as a shared object exporting only distcomm_backend_plugin_v1 and its declaration.
// Every exception is caught at the boundary and becomes a status code plus text; native
// collectives, send_detached and the traits are taken from the backend type when it has them.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "distcomm/backend.hpp"
#include "distcomm/distcomm_backend_traits_v1.h"
#include "distcomm/fusion/buffer.hpp"
#include "distcomm/log.hpp"
#include "distcomm/plugin/abi.hpp"
#include "distcomm/plugin/store_abi.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"
#include "distcomm/rendezvous/store.hpp"
#include "distcomm/strategy/automatic.hpp"

namespace distcomm::plugin {

// What a plugin's factory gets from the host: the init arguments, in C++ terms.
struct host {
  int rank = -1;        // as the launcher said it, -1 when unknown
  int size = -1;        // likewise
  int local_rank = -1;  // rank among the ranks on this node, -1 when unknown
  int local_size = -1;  // ranks on this node, -1 when unknown
  std::chrono::duration<double> timeout{300.0};
  std::string options;                     // DISTCOMM_PLUGIN_OPTIONS
  std::shared_ptr<distcomm::store> store;  // the job's store; null when the host offers none

  // The store, or invalid_argument_error when the host offers none.
  std::shared_ptr<distcomm::store> kv() const {
    if (!store) {
      throw invalid_argument_error(
          "the program that loaded this plugin offers no store (a "
          "world of " +
          std::to_string(size) + " ranks without rendezvous)");
    }
    return store;
  }
  // The arguments as bootstrap() would have given them, for backends built from a job.
  job as_job() const {
    job j;
    j.world.rank = rank < 0 ? 0 : rank;
    j.world.size = size < 1 ? 1 : size;
    j.world.local_rank = local_rank < 0 ? j.world.rank : local_rank;
    j.world.local_size = local_size < 1 ? j.world.size : local_size;
    j.kv = store;
    return j;
  }
};

namespace detail {

// The host's log callback, the same for every context: set by the first init that has one.
struct log_target {
  void (*log)(void* user, int level, const char* message) = nullptr;
  void* user = nullptr;
};

inline void forward_log(void* target, log_level l, const char* message) {
  const auto* t = static_cast<const log_target*>(target);
  t->log(t->user, static_cast<int>(l), message);
}

// This plugin's own copy of DistComm logs through the host, at the host's level.
inline void log_through_host(const distcomm_init_args_v1& args) {
  static log_target target;
  static std::once_flag once;
  if (args.log == nullptr) return;
  std::call_once(once, [&] {
    target.log = args.log;
    target.user = args.log_user;
    set_log_level(static_cast<log_level>(args.log_level));
    set_log_sink(&forward_log, &target);
  });
}

}  // namespace detail

// The table for backend B, whose instances the factory makes from the host's arguments.
template <class B>
class exported {
 public:
  using factory = B (*)(const host&);

  static const distcomm_backend_v1* table(factory f) noexcept {
    factory_ = f;
    static const distcomm_backend_v1 t = make_table();
    return &t;
  }

  // What the backend declares (distcomm_backend_traits_v1.h): B::traits, less what a backend behind
  // the ABI cannot offer (sub-communicators, and with them shrink); a backend without traits runs
  // processes meeting through the job's store.
  static const distcomm_backend_traits_v1* declaration() noexcept {
    static const distcomm_backend_traits_v1 d = make_declaration();
    return &d;
  }

 private:
  struct context {
    std::shared_ptr<host_store> kv;  // declared first: outlives the backend, which may use it
    std::optional<B> backend;
  };
  struct request_box {
    std::optional<typename B::request> r;
  };

  static B& of(void* ctx) { return *static_cast<context*>(ctx)->backend; }
  static request_box& box(distcomm_request_v1* req) { return *reinterpret_cast<request_box*>(req); }
  static distcomm_request_v1* handle(typename B::request&& r) {
    auto* b = new request_box{std::move(r)};
    return reinterpret_cast<distcomm_request_v1*>(b);
  }

 private:
  static distcomm_backend_traits_v1 make_declaration() noexcept {
    distcomm_backend_traits_v1 d{};
    d.version = DISTCOMM_BACKEND_TRAITS_V1_VERSION;
    d.struct_size = sizeof(distcomm_backend_traits_v1);
    constexpr capability behind_abi = capability::processes | capability::store |
                                      capability::mpi_world | capability::single_host |
                                      capability::grow;
    if constexpr (distcomm::detail::has_traits<B>::value) {
      d.capabilities = static_cast<std::uint32_t>(B::traits.capabilities() & behind_abi);
      d.summary = B::traits.summary();
    } else {
      d.capabilities = static_cast<std::uint32_t>(capability::processes | capability::store);
    }
    return d;
  }

  static distcomm_backend_v1 make_table() noexcept {
    distcomm_backend_v1 t{};
    t.version = DISTCOMM_BACKEND_V1_VERSION;
    t.struct_size = sizeof(distcomm_backend_v1);
    t.name = B::name;
    t.flags =
        (distcomm::detail::native_is_deterministic<B>::value ? DISTCOMM_V1_NATIVE_DETERMINISTIC
                                                             : 0u) |
        (distcomm::detail::unreceived_messages_ok<B>::value ? DISTCOMM_V1_UNRECEIVED_MESSAGES_OK
                                                            : 0u) |
        (distcomm::detail::moves_device_memory<B>::value ? DISTCOMM_V1_DEVICE_MEMORY : 0u);
    t.default_algo = default_algo_of<B>();
    t.default_segment_bytes = segment_bytes_for<B>;
    t.default_fusion_cutoff = fusion_cutoff_for<B>;
    t.init = &init;
    t.finalize = [](void* ctx) { delete static_cast<context*>(ctx); };
    t.rank = [](void* ctx) { return of(ctx).rank(); };
    t.size = [](void* ctx) { return of(ctx).size(); };
    t.isend = [](void* ctx, const void* data, std::size_t bytes, int peer, std::uint32_t tag,
                 distcomm_request_v1** req, distcomm_error_v1* err) {
      return guarded(err, [&] { *req = handle(of(ctx).isend(data, bytes, peer, tag)); });
    };
    t.irecv = [](void* ctx, void* data, std::size_t bytes, int peer, std::uint32_t tag,
                 distcomm_request_v1** req, distcomm_error_v1* err) {
      return guarded(err, [&] { *req = handle(of(ctx).irecv(data, bytes, peer, tag)); });
    };
    t.test = [](void*, distcomm_request_v1* req, distcomm_error_v1* err) {
      bool done = false;
      const int s = guarded(err, [&] { done = !box(req).r || box(req).r->test(); });
      return s != DISTCOMM_V1_OK ? s : done ? DISTCOMM_V1_OK : DISTCOMM_V1_PENDING;
    };
    t.wait = [](void*, distcomm_request_v1* req, std::int64_t until, distcomm_error_v1* err) {
      return guarded(err, [&] {
        if (box(req).r) box(req).r->wait(from_ns(until));
      });
    };
    // Destroying an incomplete request cancels it (the contract).
    t.cancel = [](void*, distcomm_request_v1* req) { box(req).r.reset(); };
    t.free_request = [](void*, distcomm_request_v1* req) { delete &box(req); };
    t.abort = [](void* ctx, const char* reason) {
      of(ctx).abort(reason != nullptr ? reason : "aborted");
    };
    if constexpr (distcomm::detail::has_send_detached<B>::value) {
      t.send_detached = [](void* ctx, const void* data, std::size_t bytes, int peer,
                           std::uint32_t tag, distcomm_error_v1* err) {
        return guarded(err, [&] { of(ctx).send_detached(data, bytes, peer, tag); });
      };
    }
    add_collectives(t);
    return t;
  }

  static void add_collectives(distcomm_backend_v1& t) noexcept {
    if constexpr (distcomm::detail::has_native_allreduce<B>::value) {
      t.allreduce = [](void* ctx, const void* in, void* out, std::size_t count, int type, int op,
                       std::int64_t until, distcomm_error_v1* err) {
        return guarded(err, [&] {
          of(ctx).native_allreduce(in, out, count, checked_dtype(type), checked_op(op),
                                   from_ns(until));
        });
      };
    }
    if constexpr (distcomm::detail::has_native_reduce_scatter<B>::value) {
      t.reduce_scatter = [](void* ctx, const void* in, void* out, std::size_t count, int type,
                            int op, std::int64_t until, distcomm_error_v1* err) {
        return guarded(err, [&] {
          of(ctx).native_reduce_scatter(in, out, count, checked_dtype(type), checked_op(op),
                                        from_ns(until));
        });
      };
    }
    if constexpr (distcomm::detail::has_native_allgather<B>::value) {
      t.allgather = [](void* ctx, const void* in, void* out, std::size_t count, int type,
                       std::int64_t until, distcomm_error_v1* err) {
        return guarded(err, [&] {
          of(ctx).native_allgather(in, out, count, checked_dtype(type), from_ns(until));
        });
      };
    }
    if constexpr (distcomm::detail::has_native_broadcast<B>::value) {
      t.broadcast = [](void* ctx, void* data, std::size_t count, int type, int root,
                       std::int64_t until, distcomm_error_v1* err) {
        return guarded(err, [&] {
          of(ctx).native_broadcast(data, count, checked_dtype(type), root, from_ns(until));
        });
      };
    }
    if constexpr (distcomm::detail::has_native_barrier<B>::value) {
      t.barrier = [](void* ctx, std::int64_t until, distcomm_error_v1* err) {
        return guarded(err, [&] { of(ctx).native_barrier(from_ns(until)); });
      };
    }
  }

  static dtype checked_dtype(int v) {
    if (v < 0 || !is_valid(static_cast<dtype>(v))) {
      throw invalid_argument_error(std::string(B::name) + ": invalid dtype value " +
                                   std::to_string(v));
    }
    return static_cast<dtype>(v);
  }
  static reduce_op checked_op(int v) {
    if (v < 0 || !is_valid(static_cast<reduce_op>(v))) {
      throw invalid_argument_error(std::string(B::name) + ": invalid reduce_op value " +
                                   std::to_string(v));
    }
    return static_cast<reduce_op>(v);
  }

  static int init(void** out, const distcomm_init_args_v1* args, distcomm_error_v1* err) noexcept {
    return guarded(err, [&] {
      if (args == nullptr || args->struct_size < sizeof(distcomm_init_args_v1)) {
        throw invalid_argument_error(std::string(B::name) +
                                     ": init arguments are missing or older than this plugin's "
                                     "ABI version 1 header");
      }
      auto ctx = std::make_unique<context>();
      detail::log_through_host(*args);
      host h;
      h.rank = args->rank;
      h.size = args->size;
      h.local_rank = args->local_rank;
      h.local_size = args->local_size;
      h.timeout = std::chrono::duration<double>(args->timeout_s);
      if (args->options != nullptr) h.options = args->options;
      if (args->store != nullptr) {
        ctx->kv = std::make_shared<host_store>(*args->store, h.timeout);
        h.store = ctx->kv;
      }
      ctx->backend.emplace(factory_(h));
      *out = ctx.release();
    });
  }

  static inline factory factory_ = nullptr;
};

}  // namespace distcomm::plugin

// Defines this shared object's entry points, distcomm_backend_plugin_v1() and its declaration
// distcomm_backend_plugin_v1_traits(), for backend type
// `backend_type` made by the factory that follows it (anything convertible to
// backend_type (*)(const distcomm::plugin::host&), e.g. a lambda without captures).
#define DISTCOMM_EXPORT_BACKEND_V1(backend_type, ...)                                 \
  extern "C" __attribute__((visibility("default"))) const distcomm_backend_v1*        \
  distcomm_backend_plugin_v1(void) {                                                  \
    return ::distcomm::plugin::exported<backend_type>::table(__VA_ARGS__);            \
  }                                                                                   \
  extern "C" __attribute__((visibility("default"))) const distcomm_backend_traits_v1* \
  distcomm_backend_plugin_v1_traits(void) {                                           \
    return ::distcomm::plugin::exported<backend_type>::declaration();                 \
  }
