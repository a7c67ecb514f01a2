#include "distcomm/check/fingerprint.hpp"

#include <algorithm>
#include <cstdio>
#include <tuple>
#include <vector>

#include "distcomm/core/dtype.hpp"
#include "distcomm/core/reduce_op.hpp"

namespace distcomm::check {
namespace {

// FNV-1a: cheap, and the same on every rank of one build.
constexpr std::uint64_t fnv_basis = 0xcbf29ce484222325ull;
std::uint64_t fnv(std::uint64_t h, const void* data, std::size_t n) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

auto key(const call_fingerprint& f) noexcept {
  return std::tie(f.kind, f.seq, f.type, f.count, f.op, f.root, f.tensors, f.tensors_hash,
                  f.algo_hash, f.segment_bytes, f.deterministic, f.ps_servers, f.fusion_threshold,
                  f.fusion_cutoff);
}

std::string dtype_name(std::int32_t t) {
  if (t < 0) return "none";
  const auto d = static_cast<dtype>(t);
  return is_valid(d) ? to_string(d) : "dtype " + std::to_string(t);
}

std::string op_name(std::int32_t o) {
  if (o < 0) return "none";
  const auto r = static_cast<reduce_op>(o);
  return is_valid(r) ? to_string(r) : "op " + std::to_string(o);
}

std::string rank_name(const call_fingerprint& f) { return "rank " + std::to_string(f.rank); }

// "<field> differs: rank A has X, rank B has Y".
std::string differs(const char* field, const call_fingerprint& lo, const std::string& a,
                    const call_fingerprint& hi, const std::string& b) {
  return std::string(field) + " differs: " + rank_name(lo) + " has " + a + ", " + rank_name(hi) +
         " has " + b;
}

}  // namespace

const char* to_string(call_kind k) noexcept {
  switch (k) {
    case call_kind::allreduce:
      return "allreduce";
    case call_kind::grouped_allreduce:
      return "grouped allreduce";
    case call_kind::reduce_scatter:
      return "reduce_scatter";
    case call_kind::allgather:
      return "allgather";
    case call_kind::broadcast:
      return "broadcast";
    case call_kind::barrier:
      return "barrier";
    case call_kind::alltoall:
      return "alltoall";
    case call_kind::alltoallv:
      return "alltoallv";
    case call_kind::allgatherv:
      return "allgatherv";
    case call_kind::reduce:
      return "reduce";
    case call_kind::gather:
      return "gather";
    case call_kind::scatter:
      return "scatter";
    case call_kind::point_to_point:
      return "send/recv";
    case call_kind::left:
      return "(left the job)";
  }
  return "(unknown collective)";
}

call_settings settings_of(const config& c, const char* strategy_name) {
  call_settings s;
  s.segment_bytes = c.segment_bytes.value_or(0);
  s.fusion_threshold = c.fusion_threshold;
  s.fusion_cutoff = c.fusion_cutoff.value_or(0);
  const std::string algo = std::string(strategy_name) + "|" + c.algo.to_string();
  s.algo_hash = fnv(fnv_basis, algo.data(), algo.size());
  s.deterministic = c.deterministic ? 1 : 0;
  s.ps_servers = c.ps_servers;
  return s;
}

call_fingerprint make_fingerprint(call_kind kind, const call_settings& s, std::size_t count,
                                  int type, int op, int root) {
  call_fingerprint f;
  f.kind = static_cast<std::uint32_t>(kind);
  f.count = count;
  f.type = type;
  f.op = op;
  f.root = root;
  f.segment_bytes = s.segment_bytes;
  f.algo_hash = s.algo_hash;
  f.deterministic = s.deterministic;
  f.ps_servers = s.ps_servers;
  return f;
}

call_fingerprint grouped_fingerprint(span<const tensor_view> tensors, int op,
                                     const call_settings& s) {
  call_fingerprint f = make_fingerprint(call_kind::grouped_allreduce, s, 0, -1, op);
  std::uint64_t h = fnv_basis;
  for (const tensor_view& t : tensors) {
    const std::uint64_t count = t.count;
    const auto type = static_cast<std::uint8_t>(t.type);
    h = fnv(fnv(h, &count, sizeof count), &type, sizeof type);
    f.count += count;
  }
  f.tensors = static_cast<std::uint32_t>(tensors.size());
  f.tensors_hash = h;
  f.fusion_threshold = s.fusion_threshold;
  f.fusion_cutoff = s.fusion_cutoff;
  return f;
}

std::uint64_t hash_bytes(const void* data, std::size_t n) noexcept {
  return fnv(fnv_basis, data, n);
}

call_fingerprint counts_fingerprint(call_kind kind, span<const std::size_t> counts, int type,
                                    const call_settings& s) {
  call_fingerprint f = make_fingerprint(kind, s, 0, type);
  std::uint64_t h = fnv_basis;
  for (const std::size_t c : counts) {
    const std::uint64_t count = c;
    h = fnv(h, &count, sizeof count);
    f.count += count;
  }
  f.tensors = static_cast<std::uint32_t>(counts.size());
  f.tensors_hash = h;
  return f;
}

std::uint64_t digest(const call_fingerprint& f) noexcept {
  const auto half = [](auto v) {
    return static_cast<std::uint64_t>(static_cast<std::uint32_t>(v));
  };
  const std::uint64_t words[] = {f.seq,
                                 f.count,
                                 f.tensors_hash,
                                 f.segment_bytes,
                                 f.fusion_threshold,
                                 f.fusion_cutoff,
                                 f.algo_hash,
                                 half(f.kind) << 32 | half(f.type),
                                 half(f.op) << 32 | half(f.root),
                                 half(f.tensors) << 32 | half(f.deterministic),
                                 half(f.ps_servers)};
  // Mixed word by word (splitmix64's finaliser) in two independent lanes, even and odd words,
  // then the lanes into each other: half the chain of multiplies a collective waits for, 10.9 ns
  // a digest against 18.7 in one lane (2026-11-28), on every checked call of shm, whose 8-byte
  // allreduce takes 0.2 us.
  const auto mix = [](std::uint64_t h, std::uint64_t w) {
    h = (h ^ w) * 0x9e3779b97f4a7c15;
    return h ^ (h >> 31);
  };
  std::uint64_t a = 0x243f6a8885a308d3;
  std::uint64_t b = 0x13198a2e03707344;
  constexpr std::size_t n = sizeof words / sizeof words[0];
  for (std::size_t i = 0; i + 1 < n; i += 2) {
    a = mix(a, words[i]);
    b = mix(b, words[i + 1]);
  }
  if (n % 2 != 0) a = mix(a, words[n - 1]);
  const std::uint64_t h = mix(a, b);
  return h == 0 ? 1 : h;
}

int compare(const call_fingerprint& a, const call_fingerprint& b) noexcept {
  const auto ka = key(a);
  const auto kb = key(b);
  return ka < kb ? -1 : (kb < ka ? 1 : 0);
}

void agreement::merge(const agreement& other) noexcept {
  const int l = compare(other.lo, lo);
  if (l < 0 || (l == 0 && other.lo.rank < lo.rank)) lo = other.lo;
  const int h = compare(other.hi, hi);
  if (h > 0 || (h == 0 && other.hi.rank < hi.rank)) hi = other.hi;
}

bool agreement::agreed() const noexcept { return key(lo) == key(hi); }  // one pass, no order

std::string ordinal(std::uint64_t n) {
  const char* suffix = "th";
  if (n % 100 < 11 || n % 100 > 13) {
    if (n % 10 == 1) suffix = "st";
    if (n % 10 == 2) suffix = "nd";
    if (n % 10 == 3) suffix = "rd";
  }
  return std::to_string(n) + suffix;
}

std::string not_started_message(const char* what, int from, std::uint64_t seq, int me,
                                std::size_t round, int p, const std::string& transport) {
  // After round 0 `from` may be here and waiting itself, on the ranks it hears from first (on a
  // backend whose abort says nothing, MPI, nobody tells this rank which).
  std::string first;
  std::vector<int> seen{me};
  for (std::size_t j = 0; j < round; ++j) {
    const int s = ((from - (1 << j)) % p + p) % p;
    if (std::find(seen.begin(), seen.end(), s) != seen.end()) continue;
    seen.push_back(s);
    first += (first.empty() ? "rank " : " or rank ") + std::to_string(s);
  }
  return std::string(what) + ": rank " + std::to_string(from) + " did not start the " +
         ordinal(seq + 1) + " collective of this communicator before the deadline" +
         (first.empty() ? std::string(": it")
                        : ", or started it and waits in it for " + first +
                              " (whom it hears from first): one of them") +
         " may be stopped or slow, or have left the job (exited, or destroyed its communicator "
         "after fewer collectives): " +
         transport;
}

std::string counts_mismatch_message(std::uint64_t from, std::uint64_t to, std::uint64_t sent,
                                    std::uint64_t expected) {
  return "alltoallv: ranks disagree on the counts, before any data moved: rank " +
         std::to_string(from) + " sends " + std::to_string(sent) + " elements to rank " +
         std::to_string(to) + ", whose recv_counts[" + std::to_string(from) + "] is " +
         std::to_string(expected);
}

std::string late_start_message(const char* what, int rank, std::uint64_t seq, double late_s) {
  char late[32];
  std::snprintf(late, sizeof late, "%.2f", late_s);
  return std::string(what) + ": rank " + std::to_string(rank) + " did not start the " +
         ordinal(seq + 1) +
         " collective of this communicator before the deadline: its message came " + late +
         " s after it; rank " + std::to_string(rank) +
         ", or a rank it waited for, was stopped or slow (raise DISTCOMM_TIMEOUT if slow)";
}

std::string describe_mismatch(const char* what, const agreement& a, const call_fingerprint& mine) {
  const call_fingerprint& lo = a.lo;
  const call_fingerprint& hi = a.hi;
  const std::string me = "rank " + std::to_string(mine.rank);
  const std::string call = " (" + ordinal(mine.seq + 1) + " collective of this communicator)";
  const std::string head =
      std::string(what) + ": ranks disagree on the call, before any data moved";
  const std::string fix = "; every rank must make the same collective calls in the same order";
  if (is_left(hi)) {
    const std::string n = std::to_string(hi.seq);
    return std::string(what) + ": " + rank_name(hi) + " has left the job after " + n +
           " collective" + (hi.seq == 1 ? "" : "s") + " (its communicator was destroyed); " + me +
           " is in its " + ordinal(mine.seq + 1) + " (" +
           to_string(static_cast<call_kind>(mine.kind)) + ")" + fix;
  }
  if (lo.kind != hi.kind) {
    return head + ": " + rank_name(lo) + " calls " + to_string(static_cast<call_kind>(lo.kind)) +
           ", " + rank_name(hi) + " calls " + to_string(static_cast<call_kind>(hi.kind)) + call +
           fix;
  }
  std::string d;
  if (lo.seq != hi.seq) {
    d = differs("the sequence number", lo, "call " + std::to_string(lo.seq + 1), hi,
                "call " + std::to_string(hi.seq + 1)) +
        " (a rank skipped collectives, or DISTCOMM_MISMATCH_CHECK differs across ranks)";
  } else if (lo.type != hi.type) {
    d = differs("the dtype", lo, dtype_name(lo.type), hi, dtype_name(hi.type));
  } else if (lo.count != hi.count) {
    const bool grouped = lo.kind == static_cast<std::uint32_t>(call_kind::grouped_allreduce);
    d = differs(grouped                ? "the total element count of the tensors"
                : lo.tensors_hash != 0 ? "the total of the per-rank counts"
                                       : "the element count",
                lo, std::to_string(lo.count), hi, std::to_string(hi.count));
  } else if (lo.op != hi.op) {
    d = differs("the reduce op", lo, op_name(lo.op), hi, op_name(hi.op));
  } else if (lo.root != hi.root) {
    d = differs("the root", lo, "root " + std::to_string(lo.root), hi,
                "root " + std::to_string(hi.root));
  } else if (lo.tensors != hi.tensors) {
    d = differs("the number of tensors", lo, std::to_string(lo.tensors), hi,
                std::to_string(hi.tensors));
  } else if (lo.tensors_hash != hi.tensors_hash &&
             lo.kind != static_cast<std::uint32_t>(call_kind::grouped_allreduce)) {
    d = "the per-rank counts differ (same total): " + rank_name(lo) + " and " + rank_name(hi);
  } else if (lo.tensors_hash != hi.tensors_hash) {
    d = "the tensors' counts and dtypes, in order, differ (same number of tensors and elements, "
        "another order or other dtypes): " +
        rank_name(lo) + " and " + rank_name(hi);
  } else if (lo.algo_hash != hi.algo_hash) {
    d = "the strategy (the communicator's Strategy type) or its automatic table (DISTCOMM_ALGO) "
        "differs: " +
        rank_name(lo) + " and " + rank_name(hi);
  } else if (lo.segment_bytes != hi.segment_bytes) {
    d = differs("DISTCOMM_SEGMENT_SIZE", lo, std::to_string(lo.segment_bytes), hi,
                std::to_string(hi.segment_bytes));
  } else if (lo.deterministic != hi.deterministic) {
    d = differs("DISTCOMM_DETERMINISTIC", lo, std::to_string(lo.deterministic), hi,
                std::to_string(hi.deterministic));
  } else if (lo.ps_servers != hi.ps_servers) {
    d = differs("DISTCOMM_PS_SERVERS", lo, std::to_string(lo.ps_servers), hi,
                std::to_string(hi.ps_servers));
  } else if (lo.fusion_threshold != hi.fusion_threshold) {
    d = differs("DISTCOMM_FUSION_THRESHOLD", lo, std::to_string(lo.fusion_threshold), hi,
                std::to_string(hi.fusion_threshold));
  } else {
    d = differs("DISTCOMM_FUSION_CUTOFF", lo, std::to_string(lo.fusion_cutoff), hi,
                std::to_string(hi.fusion_cutoff));
  }
  return head + ": " + d + call + fix + " (seen on " + me + ")";
}

}  // namespace distcomm::check
