// plugin_backend: a backend of DistComm's contract (backend.hpp) over a loaded plugin
// (distcomm_backend_v1.h), so that communicator<plugin_backend, Strategy> works for every
// strategy. It always has the native collectives: those the plugin lacks, and those it has when
// DISTCOMM_DETERMINISTIC asks for a rank-ordered reduction the plugin's does not give, run the
// ring strategy over the plugin's point-to-point instead. The traits the plugin declares (its
// automatic table, segment, fusion cutoff, unreceived messages) reach the communicator at run
// time through fill_defaults() and unreceived_messages_ok_now().
//
//   auto b = distcomm::plugin_backend::open("tcp");    // DISTCOMM_PLUGIN_PATH, ...
//   distcomm::communicator<distcomm::plugin_backend> comm(std::move(b));
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "distcomm/backend.hpp"
#include "distcomm/config.hpp"
#include "distcomm/plugin/loader.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"
#include "distcomm/rendezvous/store.hpp"

namespace distcomm {

namespace detail {
struct plugin_state;
}  // namespace detail

// A pending send or receive of a plugin. Move-only; destroying it while pending cancels it.
class [[nodiscard]] plugin_request {
 public:
  plugin_request() = default;  // an empty request is complete
  plugin_request(plugin_request&& other) noexcept;
  plugin_request& operator=(plugin_request&& other) noexcept;
  plugin_request(const plugin_request&) = delete;
  plugin_request& operator=(const plugin_request&) = delete;
  ~plugin_request();

  // True once the transfer finished; throws if it failed.
  bool test();
  // Returns once the transfer finished; throws timeout_error past `until`, or its failure.
  void wait(deadline until);

 private:
  friend class plugin_backend;
  plugin_request(std::shared_ptr<detail::plugin_state> s, distcomm_request_v1* r) noexcept
      : state_(std::move(s)), req_(r) {}
  void release() noexcept;

  std::shared_ptr<detail::plugin_state> state_;  // keeps the plugin's context alive
  distcomm_request_v1* req_ = nullptr;
};

class plugin_backend {
 public:
  using request = plugin_request;
  // Messages name the plugin itself (instance_name()); this is the type's name.
  static constexpr const char* name = "plugin";
  // The native_* members reduce in rank order whenever the configuration asks for it (they fall
  // back to the point-to-point ring when the plugin's own collectives do not).
  static constexpr bool native_is_deterministic = true;

  // Where a plugin's store comes from: called at most once, when the plugin first touches the
  // store (an MPI plugin never does); may return null (a world of one).
  using store_source = std::function<std::shared_ptr<store>()>;

  // What a plugin is initialised with besides the configuration.
  struct args {
    int rank = -1;        // as the launcher said it; -1: unknown
    int size = -1;        // likewise
    int local_rank = -1;  // rank among the ranks on this node; -1: unknown
    int local_size = -1;  // ranks on this node; -1: unknown
    store_source kv;      // null: the plugin is offered no store
    std::string options;  // free-form, for the plugin (DISTCOMM_PLUGIN_OPTIONS)
  };

  // Loads plugin `name` (loader.hpp: DISTCOMM_PLUGIN_PATH, then the installation's plugin
  // folder; a name with a '/' is a file) and starts this rank's backend on it: the world as
  // detect_world() reads it, the job's store from distcomm::shared_bootstrap(cfg) (one per process)
  // when a plugin first touches it, cfg.plugin_options (DISTCOMM_PLUGIN_OPTIONS), cfg.timeout,
  // and the plugin's log lines in DistComm's log. Collective, like every backend's constructor.
  // Errors: invalid_argument_error when the plugin is missing or unusable (naming the file, the
  // symbol and what to do), the plugin's own error when its init fails.
  // A program that bootstraps itself passes its job instead (bootstrapping twice in one process
  // would host a second store on the master port).
  static plugin_backend open(const std::string& name, const config& cfg = config::from_env());
  // On the world and store of `j` (from distcomm::bootstrap()), DISTCOMM_PLUGIN_OPTIONS.
  static plugin_backend open(const std::string& name, const job& j, const config& cfg);
  // With everything given (tests, embedding).
  static plugin_backend open(const std::string& name, const args& a, const config& cfg);

  plugin_backend(plugin_backend&&) noexcept = default;
  plugin_backend& operator=(plugin_backend&&) noexcept = default;
  plugin_backend(const plugin_backend&) = delete;
  plugin_backend& operator=(const plugin_backend&) = delete;
  ~plugin_backend() = default;

  // The plugin's own name ("tcp", "gloo"), used in messages; and the file it came from.
  const std::string& instance_name() const noexcept;
  const std::string& path() const noexcept;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }

  [[nodiscard]] plugin_request isend(const void* data, std::size_t bytes, int peer, tag_t tag);
  [[nodiscard]] plugin_request irecv(void* data, std::size_t bytes, int peer, tag_t tag);
  // The plugin's send_detached, else an isend waited for at most 200 ms (then dropped, as it is
  // when its peer is gone).
  void send_detached(const void* data, std::size_t bytes, int peer, tag_t tag);
  void abort(const std::string& reason) noexcept;

  void native_allreduce(const void* in, void* out, std::size_t count, dtype t, reduce_op op,
                        deadline until);
  void native_reduce_scatter(const void* in, void* out, std::size_t recv_count, dtype t,
                             reduce_op op, deadline until);
  void native_allgather(const void* in, void* out, std::size_t send_count, dtype t, deadline until);
  void native_broadcast(void* data, std::size_t count, dtype t, int root, deadline until);
  void native_barrier(deadline until);

  // Run-time traits (backend.hpp). False when the plugin says a message nobody receives is harmful.
  bool unreceived_messages_ok_now() const noexcept;
  // Fills what `c` leaves to the backend from the plugin's declarations (automatic table,
  // segment, fusion cutoff), and keeps the settings its fallback collectives follow.
  void fill_defaults(config& c);
  // Which native collectives the plugin itself offers (the others fall back), for tests and logs.
  bool plugin_has(const char* collective) const noexcept;

 private:
  explicit plugin_backend(std::shared_ptr<detail::plugin_state> s);
  std::shared_ptr<detail::plugin_state> state_;
  int rank_ = 0;
  int size_ = 1;
};

class any_communicator;
// make_communicator() (any_communicator.hpp) over this backend: every strategy's
// communicator compiled once, in DistComm::init, not in each program that calls it.
any_communicator make_communicator(plugin_backend backend, const std::string& strategy,
                                   config cfg = config::from_env());

}  // namespace distcomm
