// Slurm's compressed lists: host lists (`node[01-04,07],gpu-[1-2]`) and tasks-per-node lists
// (`2(x3),1`). Both are parsed completely and strictly before anything is used, and a host list
// is counted before it is expanded, so a hostile list cannot exhaust memory.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "distcomm/core/error.hpp"
#include "distcomm/rendezvous/world.hpp"
#include "world_detail.hpp"

namespace distcomm {
namespace detail {
namespace {

// 18 digits always fit an unsigned long long; longer numbers are refused, not wrapped.
constexpr std::size_t max_digits = 18;

struct range {
  unsigned long long lo = 0;
  unsigned long long hi = 0;
  std::size_t width = 0;  // digits of `lo` as written: `01-04` keeps two
};

// A literal piece of a name, or a bracket group (ranges non-empty).
struct segment {
  std::string literal;
  std::vector<range> ranges;
};

using pattern = std::vector<segment>;

[[noreturn]] void malformed(const std::string& what, const std::string& why) {
  throw rendezvous_error("rendezvous: " + what + " is not a valid host list: " + why);
}

[[noreturn]] void malformed_tasks(const std::string& what, const std::string& why) {
  throw rendezvous_error("rendezvous: " + what + " is not a Slurm tasks-per-node list: " + why);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// The value of a run of at most max_digits digits.
unsigned long long digits_value(const std::string& digits) {
  unsigned long long n = 0;
  for (const char c : digits) n = n * 10 + static_cast<unsigned long long>(c - '0');
  return n;
}

std::string at(std::size_t pos) { return " at position " + std::to_string(pos); }

// Reads the digits at list[pos..], advancing pos.
std::string read_number(const std::string& list, std::size_t& pos, const std::string& what) {
  const std::size_t start = pos;
  while (pos < list.size() && is_digit(list[pos])) ++pos;
  if (pos == start) malformed(what, "expected a number" + at(start));
  if (pos - start > max_digits) malformed(what, "number too long" + at(start));
  return list.substr(start, pos - start);
}

// list[pos] is just after '['; reads up to and including ']'.
std::vector<range> read_group(const std::string& list, std::size_t& pos, const std::string& what) {
  const std::size_t open = pos - 1;
  std::vector<range> ranges;
  for (;;) {
    if (pos >= list.size()) malformed(what, "'['" + at(open) + " is never closed");
    range r;
    const std::string lo = read_number(list, pos, what);
    r.lo = digits_value(lo);
    r.hi = r.lo;
    r.width = lo.size();
    if (pos < list.size() && list[pos] == '-') {
      ++pos;
      if (pos >= list.size()) malformed(what, "'['" + at(open) + " is never closed");
      const std::size_t hi_at = pos;
      const std::string hi = read_number(list, pos, what);
      r.hi = digits_value(hi);
      if (r.hi < r.lo) malformed(what, "range " + lo + "-" + hi + at(hi_at) + " runs backwards");
    }
    ranges.push_back(r);
    if (pos >= list.size()) malformed(what, "'['" + at(open) + " is never closed");
    if (list[pos] == ']') {
      ++pos;
      return ranges;
    }
    if (list[pos] != ',') {
      malformed(what, "unexpected '" + std::string(1, list[pos]) + "'" + at(pos) +
                          " inside brackets (only digits, '-' and ',')");
    }
    ++pos;
  }
}

std::vector<pattern> parse_hostlist(const std::string& list, const std::string& what) {
  if (list.empty()) malformed(what, "it is empty");
  std::vector<pattern> names;
  std::size_t pos = 0;
  for (;;) {
    const std::size_t start = pos;
    pattern p;
    while (pos < list.size() && list[pos] != ',') {
      const char c = list[pos];
      const auto u = static_cast<unsigned char>(c);
      if (c == '[') {
        ++pos;
        p.push_back(segment{{}, read_group(list, pos, what)});
      } else if (c == ']') {
        malformed(what, "']'" + at(pos) + " without '['");
      } else if (u <= 0x20 || u == 0x7f) {
        malformed(what, "space or control character" + at(pos));
      } else {
        if (p.empty() || !p.back().ranges.empty()) p.emplace_back();
        p.back().literal += c;
        ++pos;
      }
    }
    if (p.empty()) malformed(what, "empty host name" + at(start));
    names.push_back(std::move(p));
    if (pos == list.size()) return names;
    ++pos;  // the ',' between names
  }
}

std::string padded(unsigned long long n, std::size_t width) {
  std::string s = std::to_string(n);
  if (s.size() < width) s.insert(0, width - s.size(), '0');
  return s;
}

// How many names p stands for, or nullopt when more than cap.
std::optional<std::size_t> count(const pattern& p, std::size_t cap) {
  std::size_t total = 1;
  for (const segment& s : p) {
    if (s.ranges.empty()) continue;
    std::size_t n = 0;
    for (const range& r : s.ranges) {
      const unsigned long long span = r.hi - r.lo;  // names in r, minus one
      if (span >= cap) return std::nullopt;
      const auto k = static_cast<std::size_t>(span) + 1;
      if (n > cap - k) return std::nullopt;
      n += k;
    }
    if (total > cap / n) return std::nullopt;
    total *= n;
  }
  if (total > cap) return std::nullopt;
  return total;
}

// Appends every name of p, the last bracket group varying fastest (`a[1-2]b[1-2]`: a1b1, a1b2,
// a2b1, a2b2), as Slurm does. An odometer, not recursion: a name may hold many groups.
void expand(const pattern& p, std::vector<std::string>& out) {
  std::vector<std::size_t> which(p.size(), 0);  // range of each group
  std::vector<unsigned long long> value(p.size(), 0);
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (!p[i].ranges.empty()) value[i] = p[i].ranges.front().lo;
  }
  for (;;) {
    std::string name;
    for (std::size_t i = 0; i < p.size(); ++i) {
      name += p[i].ranges.empty() ? p[i].literal : padded(value[i], p[i].ranges[which[i]].width);
    }
    out.push_back(std::move(name));
    std::size_t i = p.size();
    for (;;) {
      if (i == 0) return;
      --i;
      const std::vector<range>& ranges = p[i].ranges;
      if (ranges.empty()) continue;
      if (value[i] < ranges[which[i]].hi) {
        ++value[i];
        break;
      }
      if (which[i] + 1 < ranges.size()) {
        value[i] = ranges[++which[i]].lo;
        break;
      }
      which[i] = 0;  // carry into the group before
      value[i] = ranges.front().lo;
    }
  }
}

}  // namespace

std::string first_host(const std::string& list, const std::string& what) {
  const std::vector<pattern> names = parse_hostlist(list, what);
  std::string first;
  for (const segment& s : names.front()) {
    first += s.ranges.empty() ? s.literal : padded(s.ranges.front().lo, s.ranges.front().width);
  }
  return first;
}

std::optional<int> tasks_on_node(const std::string& list, long long node, const std::string& what) {
  if (list.empty()) malformed_tasks(what, "it is empty");
  std::optional<int> found;
  long long first_node = 0;  // of the current item
  std::size_t pos = 0;
  // Reads a run of 1..max digits at pos; `name` says what the number is, for messages.
  const auto number = [&](std::size_t max, const char* name) {
    const std::size_t start = pos;
    while (pos < list.size() && is_digit(list[pos])) ++pos;
    if (pos == start) malformed_tasks(what, std::string("expected ") + name + at(start));
    if (pos - start > max) malformed_tasks(what, std::string(name) + " too large" + at(start));
    const unsigned long long n = digits_value(list.substr(start, pos - start));
    if (n == 0) malformed_tasks(what, std::string(name) + " is zero" + at(start));
    return static_cast<long long>(n);
  };
  for (;;) {
    const auto tasks = static_cast<int>(number(6, "a task count"));
    long long repeat = 1;
    if (pos < list.size() && list[pos] == '(') {
      if (list.compare(pos, 2, "(x") != 0) malformed_tasks(what, "expected '(x'" + at(pos));
      pos += 2;
      repeat = number(9, "a repeat count");
      if (pos >= list.size() || list[pos] != ')') malformed_tasks(what, "expected ')'" + at(pos));
      ++pos;
    }
    if (!found && node >= first_node && node < first_node + repeat) found = tasks;
    first_node += repeat;
    if (pos == list.size()) return found;
    if (list[pos] != ',') {
      malformed_tasks(what, "unexpected '" + std::string(1, list[pos]) + "'" + at(pos));
    }
    ++pos;
  }
}

}  // namespace detail

std::vector<std::string> expand_hostlist(const std::string& list, std::size_t max_hosts) {
  const std::string what = "host list " + detail::quote(list);
  const std::vector<detail::pattern> names = detail::parse_hostlist(list, what);
  std::size_t total = 0;
  for (const detail::pattern& p : names) {
    const std::optional<std::size_t> n = detail::count(p, max_hosts);
    if (!n || total > max_hosts - *n) {
      throw rendezvous_error("rendezvous: " + what + " names more than " +
                             std::to_string(max_hosts) + " hosts");
    }
    total += *n;
  }
  std::vector<std::string> hosts;
  hosts.reserve(total);
  for (const detail::pattern& p : names) detail::expand(p, hosts);
  return hosts;
}

std::string first_host(const std::string& list) {
  return detail::first_host(list, "host list " + detail::quote(list));
}

}  // namespace distcomm
