// How the engine's ranks agree on what is ready (engine/engine.hpp). Each cycle, every rank
// reports the named tensors it has submitted and not yet seen reduced. Normally the report is one
// byte per entry of the response cache (the tensors seen before, numbered the same on every
// rank), combined with min: an entry is ready when every rank has it pending. When a rank has a
// name the cache does not hold (or holds with another dtype, count, op or root), joins, shuts down,
// waits past its stall warning or deadline, or every rank is blocked with nothing ready, the ranks
// instead exchange whole reports (names and calls), and negotiate() below turns them into the
// same plan on every rank: what to run, in which order, and what failed, naming the tensors, the
// ranks and the field. The plan depends only on the reports, never on the rank computing it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "distcomm/core/dtype.hpp"

namespace distcomm::engine_detail {

enum class tensor_kind : std::uint8_t { allreduce = 1, broadcast = 2, allgather = 3 };
const char* to_string(tensor_kind k) noexcept;

// What one rank asked for under a name.
struct tensor_request {
  std::string name;
  tensor_kind kind = tensor_kind::allreduce;
  dtype type = dtype::f32;
  std::uint64_t count = 0;  // allgather: elements of this rank's block
  std::int32_t op = -1;     // reduce_op, allreduce only
  std::int32_t root = -1;   // broadcast only
  bool same_call(const tensor_request& o) const noexcept {
    return kind == o.kind && type == o.type && count == o.count && op == o.op && root == o.root;
  }
};

struct pending_request {
  tensor_request request;
  double age_s = 0;  // seconds since it was submitted on its rank
};

// One rank's part of a full exchange.
struct rank_report {
  bool joined = false;                   // called join(), which has not completed
  bool shutdown = false;                 // its engine is being destroyed
  bool blocked = false;                  // its program waits on the engine and submits nothing more
  std::vector<pending_request> pending;  // in submission order
};

std::vector<unsigned char> serialize(const rank_report& r);
// Throws mismatch_error naming `rank` when the bytes are not a report (another program on the
// other end).
rank_report deserialize(const unsigned char* data, std::size_t bytes, int rank);

// The tensors negotiated before, numbered alike on every rank (entries are only added or
// replaced, from plans every rank computes alike).
class response_cache {
 public:
  // The entry for exactly this call, or -1.
  int find(const tensor_request& r) const;
  // Adds the entry, or replaces the one under the same name; returns its number.
  int put(const tensor_request& r);
  const tensor_request& at(int i) const { return entries_[static_cast<std::size_t>(i)]; }
  std::size_t size() const noexcept { return entries_.size(); }

 private:
  std::vector<tensor_request> entries_;
  std::unordered_map<std::string, int> by_name_;
};

struct failure {
  enum class kind { mismatch, timeout, shutdown };
  kind what = kind::mismatch;
  std::vector<std::string> names;  // tensors whose works fail, on every rank holding them
  bool everything = false;         // every pending tensor fails (names lists the culprits)
  std::string message;
};

struct stall {
  std::string name;
  double age_s = 0;
  std::vector<int> holders;  // ranks that submitted it
  std::vector<int> missing;  // ranks that have not
};

struct plan {
  std::vector<int> ready;  // cache entries to run now, in this order
  std::vector<failure> failures;
  std::vector<int> joined;  // ranks that have joined, as of this cycle
  bool all_joined = false;
  int shutdown_rank = -1;  // the first rank shutting down, or -1
  std::vector<stall> stalls;
};

struct negotiation_settings {
  double stall_s = 0;    // report names pending at least this long (0: never)
  double timeout_s = 0;  // fail names pending at least this long on some rank but not all
};

// The plan for one full exchange. New ready calls are added to `cache` (in the submission order of
// the lowest active rank holding them), so the next cycles find them by number.
plan negotiate(const std::vector<rank_report>& reports, response_cache& cache,
               const negotiation_settings& s);

// "rank 1", "ranks 0, 2, 3", "ranks 0-5".
std::string describe_ranks(const std::vector<int>& ranks);

}  // namespace distcomm::engine_detail
