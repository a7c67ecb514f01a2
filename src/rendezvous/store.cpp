// store_barrier and the helpers every store shares (store_detail.hpp).
#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "distcomm/core/error.hpp"
#include "distcomm/rendezvous/store.hpp"
#include "store_detail.hpp"

namespace distcomm {
namespace detail {

store_clock::time_point deadline_after(std::chrono::duration<double> t) {
  const auto now = store_clock::now();
  // Ten years is "never" for a rendezvous and still far from the clock's range.
  constexpr double max_seconds = 10.0 * 365 * 24 * 3600;
  const double s = std::isnan(t.count()) ? 0.0 : std::min(std::max(t.count(), 0.0), max_seconds);
  return now + std::chrono::duration_cast<store_clock::duration>(std::chrono::duration<double>(s));
}

void check_key(const char* who, const std::string& key) {
  if (key.size() > store_max_key_bytes) {
    throw invalid_argument_error(std::string(who) + ": key " + quote_key(key) + " has " +
                                 std::to_string(key.size()) + " bytes, above the limit of " +
                                 std::to_string(store_max_key_bytes) + " bytes");
  }
}

void check_value(const char* who, const std::string& key, std::size_t value_size) {
  if (value_size > store_max_value_bytes) {
    throw invalid_argument_error(std::string(who) + ": the value for key " + quote_key(key) +
                                 " has " + std::to_string(value_size) +
                                 " bytes, above the limit of " +
                                 std::to_string(store_max_value_bytes) + " bytes (16 MiB)");
  }
}

std::string quote_key(const std::string& key) {
  constexpr std::size_t max_shown = 80;
  std::string out = "'";
  for (std::size_t i = 0; i < key.size() && i < max_shown; ++i) {
    const auto c = static_cast<unsigned char>(key[i]);
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (key.size() > max_shown) out += "...(" + std::to_string(key.size()) + " bytes)";
  return out + "'";
}

std::string quote_keys(const std::vector<std::string>& keys) {
  constexpr std::size_t max_listed = 10;
  std::string out;
  for (std::size_t i = 0; i < keys.size() && i < max_listed; ++i) {
    if (i) out += ", ";
    out += quote_key(keys[i]);
  }
  if (keys.size() > max_listed) out += " and " + std::to_string(keys.size() - max_listed) + " more";
  return out;
}

std::string format_seconds(std::chrono::duration<double> t) {
  char buf[32];
  const double s = t.count();
  if (s == std::floor(s) && std::fabs(s) < 1e9) {
    std::snprintf(buf, sizeof buf, "%.0f s", s);
  } else {
    std::snprintf(buf, sizeof buf, "%.3g s", s);
  }
  return buf;
}

std::string missing_keys_message(const char* who, const std::vector<std::string>& missing,
                                 std::chrono::duration<double> timeout) {
  return std::string(who) + (missing.size() == 1 ? ": key " : ": keys ") + quote_keys(missing) +
         " still missing after " + format_seconds(timeout) + " (DISTCOMM_TIMEOUT)";
}

std::string whole_seconds(std::chrono::duration<double> t) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f s", std::max(t.count(), 0.0));
  return buf;
}

void throw_missing_keys(const char* who, const std::vector<std::string>& missing,
                        std::chrono::duration<double> timeout) {
  throw missing_keys_error(missing_keys_message(who, missing, timeout), missing);
}

std::string job_text(const job_identity& j) { return std::to_string(j.world_size) + " " + j.id; }

std::optional<job_identity> job_from_text(const std::string& text) {
  job_identity j;
  const auto space = text.find(' ');
  try {
    j.world_size = std::stoi(text.substr(0, space));
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (space != std::string::npos) j.id = text.substr(space + 1);
  return j;
}

bytes encode_counter(std::int64_t v) {
  const std::string s = std::to_string(v);
  return bytes(s.begin(), s.end());
}

std::optional<std::int64_t> parse_counter(const bytes& value) {
  // At most 20 characters: "-9223372036854775808".
  if (value.empty() || value.size() > 20) return std::nullopt;
  const std::string s(value.begin(), value.end());
  for (std::size_t i = 0; i < s.size(); ++i) {
    const bool digit = s[i] >= '0' && s[i] <= '9';
    if (!digit && !(i == 0 && s[i] == '-' && s.size() > 1)) return std::nullopt;
  }
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno == ERANGE || end != s.c_str() + s.size()) return std::nullopt;
  return static_cast<std::int64_t>(v);
}

std::int64_t add_to_counter(const char* who, const std::string& key, const bytes* current,
                            std::int64_t delta) {
  std::int64_t base = 0;
  if (current) {
    const auto parsed = parse_counter(*current);
    if (!parsed) {
      throw invalid_argument_error(std::string(who) + ": add(" + quote_key(key) +
                                   ") on a value that is not a decimal integer (" +
                                   std::to_string(current->size()) + " bytes)");
    }
    base = *parsed;
  }
  std::int64_t result = 0;
  if (__builtin_add_overflow(base, delta, &result)) {
    throw invalid_argument_error(std::string(who) + ": add(" + quote_key(key) + ", " +
                                 std::to_string(delta) + ") overflows the 64-bit counter (" +
                                 std::to_string(base) + ")");
  }
  return result;
}

bool compare_set_applies(const bytes* current, const bytes& expected) {
  return current ? *current == expected : expected.empty();
}

std::string arrive(store& s, const std::string& name, int rank, int size) {
  s.set(name + "/" + std::to_string(rank), encode_counter(1));
  const std::string done = name + "/done";
  if (s.add(name + "/arrived", 1) == size) s.set(done, encode_counter(1));
  return done;
}

}  // namespace detail

void store_barrier(store& s, const std::string& name, int rank, int size) {
  if (size <= 0 || rank < 0 || rank >= size) {
    throw invalid_argument_error("store barrier '" + name + "': rank " + std::to_string(rank) +
                                 " is not in [0, " + std::to_string(size) + ")");
  }
  const auto key_of = [&](int r) { return name + "/" + std::to_string(r); };
  // Three requests per rank, whatever the size: a store serves thousands of ranks' barrier in
  // time linear in their number.
  const std::string done = detail::arrive(s, name, rank, size);
  try {
    s.wait({done});
  } catch (const timeout_error&) {
    // The wait's message names keys; the barrier's names ranks, which is what a user can act on.
    // check() never waits; should the store itself be unreachable, its first error propagates
    // (it says more than a rank list could).
    std::vector<int> missing;
    for (int r = 0; r < size; ++r) {
      if (!s.check({key_of(r)})) missing.push_back(r);
    }
    std::string ranks;
    constexpr std::size_t max_listed = 20;
    for (std::size_t i = 0; i < missing.size() && i < max_listed; ++i) {
      ranks += (i ? ", " : "") + std::to_string(missing[i]);
    }
    if (missing.size() > max_listed) {
      ranks += " and " + std::to_string(missing.size() - max_listed) + " more";
    }
    // Everyone arrived just after the deadline: the barrier is complete after all.
    if (missing.empty()) return;
    throw timeout_error("store barrier '" + name +
                        "': " + (missing.size() == 1 ? "rank " : "ranks ") + ranks + " (of " +
                        std::to_string(size) + ") never arrived within " +
                        detail::format_seconds(s.timeout()) + " (DISTCOMM_TIMEOUT)");
  }
}

void store_wait(store& s, const std::vector<std::string>& keys,
                std::chrono::duration<double> timeout) {
  if (timeout >= s.timeout()) {
    s.wait(keys);
    return;
  }
  // The store's own wait cannot be shortened (others may share the store): poll instead, a
  // check() per pause, the pause growing to 0.1 s.
  const auto until = detail::deadline_after(timeout);
  std::chrono::microseconds pause{500};
  while (!s.check(keys)) {
    const auto now = detail::store_clock::now();
    if (now >= until) {
      std::vector<std::string> missing;
      for (const std::string& k : keys) {
        if (!s.check({k})) missing.push_back(k);
      }
      if (missing.empty()) return;
      detail::throw_missing_keys("store wait", missing, timeout);
    }
    std::this_thread::sleep_for(std::min<detail::store_clock::duration>(pause, until - now));
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(100));
  }
}

}  // namespace distcomm
