// The key-value store every backend bootstraps through (exchanging NCCL unique ids, UCX worker
// addresses, gloo pair addresses). Keys are strings, values bytes. Every call that waits has a
// deadline (the store's timeout) and fails with timeout_error naming the keys still missing.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace distcomm {

using bytes = std::vector<std::uint8_t>;

// Limits every store enforces (the tcp_store server refuses larger messages), so code tested on
// hash_store fails in the same place on tcp_store. Larger keys or values: invalid_argument_error.
inline constexpr std::size_t store_max_key_bytes = 4096;
inline constexpr std::size_t store_max_value_bytes = std::size_t{16} << 20;

class store {
 public:
  virtual ~store() = default;

  // Sets key to value (overwrites).
  virtual void set(const std::string& key, const bytes& value) = 0;
  // The value of key, waiting until it is set or the timeout passes.
  virtual bytes get(const std::string& key) = 0;
  // Atomically adds delta to the integer stored at key (absent = 0) and returns the new value.
  // The integer is stored as decimal ASCII text, so get() of a counter reads e.g. "42".
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
  // True when every key is set; never waits.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Waits until every key is set, or throws timeout_error naming the keys still missing.
  virtual void wait(const std::vector<std::string>& keys) = 0;
  // Sets key to desired if its current value equals expected (absent counts as equal to an empty
  // expected value); returns the value after the call (empty when the key stays absent).
  virtual bytes compare_set(const std::string& key, const bytes& expected,
                            const bytes& desired) = 0;

  // Sets key to value for as long as this client lives, where the store can tell when a client
  // is gone: tcp_store removes the key when this client's holding connection closes (its
  // process ended), and returns true. Elsewhere the key is set like any other and stays (false). A
  // rank says with it that it is alive (survivors.hpp, hold_membership), so the others stop waiting
  // for a process that died.
  virtual bool hold(const std::string& key, const bytes& value) {
    set(key, value);
    return false;
  }

  // Says that the job this store serves has failed (a collective failed, a peer was lost, the
  // backend aborted). A store that hosts the job's server then stops serving as soon as it is
  // destroyed, instead of waiting for the other ranks to disconnect: after a failure some rank
  // may be stopped or hung and never would. Backends call it from abort(); stores without a
  // server ignore it. Never throws; calling it again changes nothing.
  virtual void mark_job_failed() noexcept {}

  std::chrono::duration<double> timeout() const noexcept { return timeout_; }
  void set_timeout(std::chrono::duration<double> t) noexcept { timeout_ = t; }

 protected:
  std::chrono::duration<double> timeout_{300.0};
};

// Every rank of `size` calls it with its rank: returns when all have, or throws timeout_error
// naming the ranks that never arrived. Keys live under `name/` and are never removed, so each
// barrier needs a name of its own (e.g. "init", "epoch/3").
void store_barrier(store& s, const std::string& name, int rank, int size);

// s.wait(keys), but for at most `timeout` when that is shorter than the store's own: a backend's
// timeout (DISTCOMM_TIMEOUT unless given) bounds its rendezvous on any store. Throws
// timeout_error naming the keys still missing.
void store_wait(store& s, const std::vector<std::string>& keys,
                std::chrono::duration<double> timeout);

namespace detail {
// "<who>: key 'a' still missing after 2 s (DISTCOMM_TIMEOUT)" / "keys 'a', 'b' still ...": what
// every store's timed-out wait says.
std::string missing_keys_message(const char* who, const std::vector<std::string>& missing,
                                 std::chrono::duration<double> timeout);
// invalid_argument_error when key or value exceed store_max_key_bytes / store_max_value_bytes.
void check_key(const char* who, const std::string& key);
void check_value(const char* who, const std::string& key, std::size_t value_size);
// current + delta for add() (current null: the key is absent); invalid_argument_error naming
// `who` and the key on a value that is not a decimal integer, or on overflow. Every store's add()
// applies it; the c10d adapter applies it before asking c10d's server, which drops the
// connection instead.
std::int64_t add_to_counter(const char* who, const std::string& key, const bytes* current,
                            std::int64_t delta);
}  // namespace detail

}  // namespace distcomm
