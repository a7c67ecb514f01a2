// Sub-communicators, for groups of ranks (Horovod's process sets, torch's new_group,
// MPI_Comm_split), and the survivors' communicator after a failure. Members of every
// communicator<...> (this base is its own type's friend): each sub-communicator is a communicator
// of the same backend, strategy and settings with a transport context of its own, usable at the
// same time as its parent and its siblings and destroyed independently. All are collective over
// the parent (every rank calls them, in the same order with its other collectives); the backend
// needs split() (backend.hpp).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distcomm/backend.hpp"
#include "distcomm/check/agree.hpp"
#include "distcomm/communicator/pipeline.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/core/span.hpp"
#include "distcomm/core/tensor_view.hpp"
#include "distcomm/group/members.hpp"
#include "distcomm/rendezvous/survivors.hpp"
#include "distcomm/trace/flight_recorder.hpp"

namespace distcomm::detail {

template <class Comm>
class groups {
 public:
  // The ranks passing the same color form one communicator, ranked by key, then by rank here
  // (MPI_Comm_split); a negative color joins none and gets nothing.
  std::optional<Comm> split(int color, int key = 0) {
    std::int64_t mine[2] = {color < 0 ? -1 : color, key};
    std::vector<std::int64_t> all(2 * static_cast<std::size_t>(self().size()));
    allgather_host(mine, all.data(), 2);
    std::vector<std::int64_t> colors, keys;
    for (std::size_t r = 0; r < all.size(); r += 2) {
      colors.push_back(all[r]);
      keys.push_back(all[r + 1]);
    }
    return make_group(split_members(colors, keys, self().rank()));
  }

  // The ranks listed (distinct, every rank passing the same list) form one communicator, rank
  // ranks[i] becoming its rank i; the others get nothing. A list that differs across ranks is a
  // mismatch_error on every rank.
  std::optional<Comm> subset(span<const int> ranks) {
    const int size = self().size();
    std::vector<int> members(ranks.begin(), ranks.end());
    for (auto i = members.begin(); i != members.end(); ++i) {
      if (*i < 0 || *i >= size || std::find(members.begin(), i, *i) != i) {
        throw invalid_argument_error("subset: rank " + std::to_string(*i) + " is " +
                                     (*i < 0 || *i >= size
                                          ? "not a rank (world size " + std::to_string(size) + ")"
                                          : std::string("listed twice")));
      }
    }
    const std::uint64_t h = check::hash_bytes(members.data(), members.size() * sizeof(int));
    const std::vector<std::uint64_t> all = allgather_word(h);
    for (std::size_t r = 0; r < all.size(); ++r) {
      if (all[r] != h) {
        throw mismatch_error("subset: rank " + std::to_string(r) + " lists other ranks than rank " +
                             std::to_string(self().rank()) + " does");
      }
    }
    if (std::find(members.begin(), members.end(), self().rank()) == members.end()) members.clear();
    return make_group(std::move(members));
  }

  // The ranks on this host (same host name), ranked as here.
  Comm split_by_node() {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    const std::vector<std::uint64_t> all =
        allgather_word(check::hash_bytes(host, std::strlen(host)));
    const std::uint64_t h = all[static_cast<std::size_t>(self().rank())];
    const auto first = std::find(all.begin(), all.end(), h) - all.begin();
    return std::move(*split(static_cast<int>(first), self().rank()));
  }

  // After a lost rank (peer_lost_error) or a deadline (timeout_error), the ranks still alive
  // make a communicator of themselves and go on: they agree through the job's store on who they
  // are (agree_survivors, rendezvous/survivors.hpp: each waits up to `window` for the others),
  // then connect anew, ranked in their old order, with the same strategy and settings. Every
  // survivor calls it once per failure; this communicator stays unusable. A rank that arrives
  // after the survivors decided without it (stopped, then continued) gets excluded_error. Works
  // at any time (with every rank alive it makes the same group anew); needs a backend whose
  // traits say it can shrink (backend_traits.hpp): others throw invalid_argument_error saying so.
  Comm shrink(std::chrono::duration<double> window) {
    using Backend = typename Comm::backend_type;
    auto& s = self().get("shrink");
    if constexpr (!has_split<Backend>::value || !has_group_store<Backend>::value) {
      (void)s;
      (void)window;
      throw invalid_argument_error(std::string("shrink: backend '") + self().backend_name() +
                                   "' cannot make a communicator of the survivors (it needs "
                                   "split() and a store its sub-communicators meet through)");
    } else {
      s.progress.drain();  // what is queued fails at once on a failed communicator
      const std::string epoch = std::to_string(s.shrinks++);
      std::shared_ptr<store> kv = s.backend.group_store();
      const std::vector<int> alive =
          agree_survivors(*kv, "shrink/" + epoch, self().rank(), self().size(), window);
      std::optional<Backend> child;
      if constexpr (has_survivors<Backend>::value) {
        child = s.backend.survivors(alive, "shrink" + epoch);
      } else {
        child = s.backend.split(alive, "shrink" + epoch);
      }
      return Comm(std::move(*child), s.cfg, child_identity(s, "s" + epoch, alive));
    }
  }
  // The same with the default window: DISTCOMM_TIMEOUT, at most 5 s.
  Comm shrink() {
    return shrink(std::min(self().get("shrink").cfg.timeout, std::chrono::duration<double>(5.0)));
  }

 private:
  Comm& self() { return static_cast<Comm&>(*this); }

  // The sub-communicator of `members` (empty: none for this rank), made by the backend in order
  // with the parent's collectives.
  std::optional<Comm> make_group(std::vector<int> members) {
    using Backend = typename Comm::backend_type;
    auto& s = self().get("split");
    if constexpr (!has_split<Backend>::value) {
      (void)s;
      throw invalid_argument_error(std::string("split: backend '") + self().backend_name() +
                                   "' cannot make sub-communicators (it has no split())");
    } else {
      const std::string name = std::to_string(s.splits++) + "." +
                               (members.empty() ? std::string("none") : std::to_string(members[0]));
      std::optional<Backend> child;
      s.progress.run("split", [&] {
        pipeline<std::remove_reference_t<decltype(s)>>::refuse_after_failure(s, "split");
        child = s.backend.split(members, name);
      });
      if (!child) return std::nullopt;
      return Comm(std::move(*child), s.cfg,
                  child_identity(s, std::to_string(s.splits - 1), members));
    }
  }

  // The recorder identity of a sub-communicator of `members` (ranks here, in their new order),
  // named `<parent>/<suffix>`; none without a recorder here.
  template <class State>
  std::optional<trace::flight_recorder::identity> child_identity(const State& s,
                                                                 const std::string& suffix,
                                                                 const std::vector<int>& members) {
    if (!s.recorder) return std::nullopt;
    const trace::flight_recorder::identity& parent = s.recorder->who();
    trace::flight_recorder::identity id;
    id.name = parent.name + "/" + suffix;
    id.rank = static_cast<int>(std::find(members.begin(), members.end(), self().rank()) -
                               members.begin());
    for (int m : members) id.ranks.push_back(parent.ranks[static_cast<std::size_t>(m)]);
    return id;
  }

  // Every rank's `word`, in rank order (group agreement: lists, host names).
  std::vector<std::uint64_t> allgather_word(std::uint64_t word) {
    std::vector<std::uint64_t> all(static_cast<std::size_t>(self().size()));
    allgather_host(&word, all.data(), 1);
    return all;
  }

  // Every rank's `n` words of host memory, in rank order: the group agreements' exchange. A
  // backend that moves device memory (NCCL) moves them through its host_allgather (backend.hpp),
  // once every call started before has completed (its own calls run in order behind them).
  template <class Word>
  void allgather_host(Word* mine, Word* all, std::size_t n) {
    static_assert(sizeof(Word) == sizeof(std::int64_t));
    using Backend = typename Comm::backend_type;
    if constexpr (has_host_allgather<Backend>::value) {
      self().synchronize();
      self().backend().host_allgather(mine, all, n * sizeof(Word),
                                      deadline_after(self().settings().timeout));
    } else {
      self().allgather(tensor_view{mine, n, dtype::i64},
                       tensor_view{all, n * static_cast<std::size_t>(self().size()), dtype::i64});
    }
  }
};

}  // namespace distcomm::detail
