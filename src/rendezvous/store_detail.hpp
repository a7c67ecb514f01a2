// Private helpers shared by the store implementations: limit checks, the integer encoding of
// add(), and the wording of timeout errors, so every store fails with the same messages.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "distcomm/core/error.hpp"
#include "distcomm/rendezvous/store.hpp"
#include "distcomm/rendezvous/tcp_store.hpp"

namespace distcomm::detail {

using store_clock = std::chrono::steady_clock;

// now + t, saturating (a timeout of years must not overflow the clock).
store_clock::time_point deadline_after(std::chrono::duration<double> t);

// `'key'`, non-printable bytes escaped as \xNN and long keys cut to 80 characters.
std::string quote_key(const std::string& key);
// `'a', 'b', 'c'` (at most 10, then "and N more").
std::string quote_keys(const std::vector<std::string>& keys);
// "10 s", "0.5 s".
std::string format_seconds(std::chrono::duration<double> t);
// "4 s": rounded to whole seconds, for progress lines.
std::string whole_seconds(std::chrono::duration<double> t);

// How often a wait that may take long (connecting to a store that is not up yet, ranks that
// have not arrived) says at warn level what it is waiting for and how long it still waits:
// often enough that a hang is visibly not one, rarely enough for a 300 s DISTCOMM_TIMEOUT.
inline constexpr std::chrono::seconds progress_interval{5};

// The timeout_error of a wait, with the keys still missing (every store throws it through
// throw_missing_keys), so a caller can say more than the keys (store barriers name ranks).
class missing_keys_error : public timeout_error {
 public:
  missing_keys_error(const std::string& what, std::vector<std::string> missing)
      : timeout_error(what), missing_(std::move(missing)) {}
  const std::vector<std::string>& missing() const noexcept { return missing_; }

 private:
  std::vector<std::string> missing_;
};

[[noreturn]] void throw_missing_keys(const char* who, const std::vector<std::string>& missing,
                                     std::chrono::duration<double> timeout);

// A job's identity as a store keeps it for its clients to compare (etcd's <prefix>/job, a
// plugin store's distcomm/job): "<world size> <id>". job_from_text: nullopt for other text.
std::string job_text(const job_identity& j);
std::optional<job_identity> job_from_text(const std::string& text);

// add(): the stored integer as decimal text; parse_counter returns nullopt for anything else.
bytes encode_counter(std::int64_t v);
std::optional<std::int64_t> parse_counter(const bytes& value);

// compare_set() on an in-memory value: applies the rule of store::compare_set to `current`
// (nullptr = absent) and returns true when `desired` must be written.
bool compare_set_applies(const bytes* current, const bytes& expected);

// A rank's arrival at the meeting `name` of `size` ranks (store_barrier, the bootstrap's meeting):
// its own key name/<rank>, so that a wait that ends early can name the ranks missing; a count,
// name/arrived; and name/done, which the last to arrive sets. Three requests per rank whatever the
// size. Returns the key to wait for.
std::string arrive(store& s, const std::string& name, int rank, int size);

}  // namespace distcomm::detail
