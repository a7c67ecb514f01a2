#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <sstream>

#include "distcomm/core/error.hpp"
#include "distcomm/strategy/table.hpp"

namespace distcomm {
namespace {

constexpr std::size_t unbounded = std::numeric_limits<std::size_t>::max();

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The power of two a size suffix (lower case) stands for, or -1 for none.
int shift_of(const std::string& suffix) {
  if (suffix.empty() || suffix == "b") return 0;
  if (suffix == "k" || suffix == "kb" || suffix == "kib") return 10;
  if (suffix == "m" || suffix == "mb" || suffix == "mib") return 20;
  if (suffix == "g" || suffix == "gb" || suffix == "gib") return 30;
  return -1;
}

// What to write instead of a fraction such as "1.5m": the same bytes in whole units (1536K)
// when they are a whole number, else the advice.
std::string whole_units_of(const std::string& fraction) {
  const std::string advice = "write a whole number of bytes, K, M or G";
  char* end = nullptr;
  const double d = std::strtod(fraction.c_str(), &end);
  const int shift = shift_of(end);
  if (shift < 0 || !std::isfinite(d)) return advice;
  const double bytes = std::ldexp(d, shift);
  if (bytes != std::floor(bytes) || bytes >= std::ldexp(1.0, 63)) return advice;
  return "write " + format_bytes(static_cast<std::size_t>(bytes)) + " instead";
}

}  // namespace

const char* to_string(algorithm a) noexcept { return name_of(a); }

bool in_tables(algorithm a) noexcept {
  return a != algorithm::automatic && a != algorithm::hierarchical;
}

std::string format_bytes(std::size_t b) {
  if (b == unbounded) return "max";
  const char* suffix[] = {"", "K", "M", "G"};
  int i = 0;
  while (i < 3 && b != 0 && b % 1024 == 0) {
    b /= 1024;
    ++i;
  }
  return std::to_string(b) + suffix[i];
}

std::size_t parse_bytes(const std::string& text, const std::string& source) {
  const std::string t = lower(trim(text));
  const auto fail = [&](const std::string& why) {
    return invalid_argument_error(source + ": '" + text + "' is not a byte size (" + why +
                                  "; expected e.g. 4096, 64K, 1M, 2G or max)");
  };
  if (t == "max") return unbounded;
  if (t.empty() || !std::isdigit(static_cast<unsigned char>(t[0]))) throw fail("no number");
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(t.c_str(), &end, 10);
  if (errno == ERANGE) throw fail("too large");
  const std::string suffix(end);
  if (suffix.size() > 1 && suffix[0] == '.' &&
      std::isdigit(static_cast<unsigned char>(suffix[1]))) {
    throw fail("fractions are not accepted: " + whole_units_of(t));
  }
  const int shift = shift_of(suffix);
  if (shift < 0) throw fail("unknown suffix");
  if (v > (static_cast<unsigned long long>(unbounded) >> shift)) throw fail("too large");
  return static_cast<std::size_t>(v << shift);
}

algo_table::algo_table(std::vector<algo_range> ranges) : ranges_(std::move(ranges)) {
  std::sort(ranges_.begin(), ranges_.end(),
            [](const algo_range& a, const algo_range& b) { return a.lo < b.lo; });
  for (std::size_t i = 0; i < ranges_.size(); ++i) {
    if (ranges_[i].lo >= ranges_[i].hi) {
      throw invalid_argument_error("algorithm table: empty range " + format_bytes(ranges_[i].lo) +
                                   "-" + format_bytes(ranges_[i].hi) + " for " +
                                   distcomm::to_string(ranges_[i].algo));
    }
    if (i > 0 && ranges_[i].lo < ranges_[i - 1].hi) {
      throw invalid_argument_error(
          std::string("algorithm table: ranges overlap: ") +
          distcomm::to_string(ranges_[i - 1].algo) + ":" + format_bytes(ranges_[i - 1].lo) + "-" +
          format_bytes(ranges_[i - 1].hi) + " and " + distcomm::to_string(ranges_[i].algo) + ":" +
          format_bytes(ranges_[i].lo) + "-" + format_bytes(ranges_[i].hi));
    }
  }
}

algo_table algo_table::parse(const std::string& text, const std::string& source) {
  std::vector<algo_range> ranges;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ';')) {
    item = trim(item);
    if (item.empty()) continue;
    const auto fail = [&](const std::string& why) {
      return invalid_argument_error(source + "='" + text + "': entry '" + item + "' " + why +
                                    " (expected name:lo-hi;..., e.g. tree:0-64K;ring:64K-max)");
    };
    const auto colon = item.find(':');
    if (colon == std::string::npos) throw fail("has no ':'");
    const std::string name = lower(trim(item.substr(0, colon)));
    algo_range r;
    const std::optional<algorithm> named = algorithm_named(name);
    if (!named || !in_tables(*named)) {
      std::string known;
      for (const algorithm_info& i : algorithm_infos) {
        if (in_tables(i.id)) known += (known.empty() ? "" : ", ") + std::string(i.name);
      }
      throw fail("names unknown algorithm '" + name + "' (known: " + known + ")");
    }
    r.algo = *named;
    const std::string range = item.substr(colon + 1);
    const auto dash = range.find('-');
    if (dash == std::string::npos) throw fail("has no lo-hi range");
    r.lo = parse_bytes(range.substr(0, dash), source);
    r.hi = parse_bytes(range.substr(dash + 1), source);
    if (r.lo >= r.hi) throw fail("has an empty range");
    ranges.push_back(r);
  }
  if (ranges.empty()) {
    throw invalid_argument_error(source + "='" + text +
                                 "' has no entries (expected e.g. tree:0-64K;ring:64K-max)");
  }
  try {
    return algo_table(std::move(ranges));
  } catch (const invalid_argument_error& e) {
    throw invalid_argument_error(source + "='" + text + "': " + e.what());
  }
}

algorithm algo_table::pick(std::size_t bytes, algorithm fallback) const noexcept {
  for (const algo_range& r : ranges_) {
    if (bytes >= r.lo && bytes < r.hi) return r.algo;
  }
  return fallback;
}

bool algo_table::uses(algorithm a) const noexcept {
  return std::any_of(ranges_.begin(), ranges_.end(),
                     [a](const algo_range& r) { return r.algo == a; });
}

std::string algo_table::to_string() const {
  std::string out;
  for (const algo_range& r : ranges_) {
    if (!out.empty()) out += ';';
    out += std::string(distcomm::to_string(r.algo)) + ":" + format_bytes(r.lo) + "-" +
           format_bytes(r.hi);
  }
  return out;
}

}  // namespace distcomm
