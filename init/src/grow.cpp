// distcomm::grow(): the running ranks admit the replacements waiting in the job's store
// (rendezvous/join.hpp) and connect anew with them, through the registry like init() does.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "distcomm/core/error.hpp"
#include "distcomm/init.hpp"
#include "distcomm/log.hpp"
#include "distcomm/registry/backends.hpp"
#include "distcomm/rendezvous/join.hpp"
#include "distcomm/trace/recorder_names.hpp"
#include "launch_options.hpp"

namespace distcomm {

namespace {

std::string rank_list(const std::vector<std::int64_t>& ranks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    s += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  }
  return s;
}

// Why `comm` cannot take new members, or "" when it can: its backend's declaration says whether
// it grows (a hierarchical communicator, "shm+gloo", is no one backend and does not).
std::string cannot_grow(const any_communicator& comm, const job& launched) {
  const std::string backend = comm.backend_name();
  if (!launched.kv) {
    return "this process has no job store to meet replacements through (it did not bootstrap a "
           "launched job of several ranks: init() of a given job, or a job of one)";
  }
  bool grows = false;
  try {
    grows = traits_of(backend).can(capability::grow);
  } catch (const invalid_argument_error&) {
    grows = false;  // not a backend's name
  }
  if (grows) return {};
  std::string can;
  for (const backend_info& b : built_backends()) {
    if (b.traits.can(capability::grow)) can += (can.empty() ? "" : ", ") + std::string(b.name);
  }
  return "backend '" + backend +
         "' cannot take new processes (its declaration has no grow; these can: " +
         (can.empty() ? std::string("none built") : can) + ")";
}

// Rank 0 of the communicator reads the store at most every 100 ms, so that checking every step
// costs a clock read rather than a round trip to the store: a replacement waits up to 100 ms
// longer. grow() forgets the count it answered.
struct waiting_cache {
  std::mutex mu;
  std::int64_t count = 0;
  std::chrono::steady_clock::time_point read{};
  static constexpr std::chrono::milliseconds every{100};
};
waiting_cache& cache() {
  static waiting_cache c;
  return c;
}

}  // namespace

std::int64_t waiting_to_join(const any_communicator& comm) {
  if (comm.rank() != 0) return 0;
  waiting_cache& c = cache();
  const std::lock_guard<std::mutex> lock(c.mu);
  const auto now = std::chrono::steady_clock::now();
  if (c.read != std::chrono::steady_clock::time_point{} && now - c.read < waiting_cache::every) {
    return c.count;
  }
  const job launched = join::launched();
  c.count = launched.kv ? join::waiting(*launched.kv) : 0;
  c.read = now;
  return c.count;
}

bool is_replacement() noexcept { return join::is_replacement(); }

std::optional<any_communicator> grow(any_communicator& comm) {
  const job launched = join::launched();
  if (const std::string why = cannot_grow(comm, launched); !why.empty()) {
    throw invalid_argument_error("grow: " + why);
  }
  store& kv = *launched.kv;
  const bool leader = comm.rank() == 0;
  if (leader) {
    const std::lock_guard<std::mutex> lock(cache().mu);
    cache().read = {};  // what it counted is answered below
  }

  // Rank 0 lists the tickets (number, job rank) and the grow number they would get.
  std::vector<join::ticket> asked;
  std::int64_t head[2] = {0, 0};
  if (leader) {
    asked = join::unanswered(kv);
    head[0] = static_cast<std::int64_t>(asked.size());
    if (!asked.empty()) head[1] = join::next_grow(kv);
  }
  comm.broadcast(view(head, 2), 0);
  if (head[0] == 0) return std::nullopt;
  std::vector<std::int64_t> list(2 * static_cast<std::size_t>(head[0]));
  for (std::size_t i = 0; i < asked.size(); ++i) {
    list[2 * i] = asked[i].number;
    list[2 * i + 1] = asked[i].job_rank;
  }
  comm.broadcast(view(list), 0);

  // The members' job ranks; a replacement joins for a job rank nobody holds.
  std::vector<std::int64_t> members(static_cast<std::size_t>(comm.size()));
  std::int64_t me = launched.world.rank;
  comm.allgather(view(&me, 1), view(members));
  std::vector<join::ticket> admitted;
  std::vector<std::int64_t> joined;
  for (std::size_t i = 0; i < list.size(); i += 2) {
    const join::ticket t{list[i], static_cast<int>(list[i + 1])};
    std::string why;
    if (t.job_rank < 0 || t.job_rank >= launched.world.size) {
      why = "job rank " + std::to_string(t.job_rank) + " is not a rank of this job of " +
            std::to_string(launched.world.size);
    } else if (std::find(members.begin(), members.end(), t.job_rank) != members.end()) {
      why = "job rank " + std::to_string(t.job_rank) +
            " is alive and a member of the running job; start a replacement only for a lost rank";
    } else if (std::find(joined.begin(), joined.end(), t.job_rank) != joined.end()) {
      why = "another replacement for job rank " + std::to_string(t.job_rank) + " came first";
    }
    if (!why.empty()) {
      if (leader) join::refuse(kv, t, why);
      log(log_level::warn, "grow: a replacement was refused: " + why);
      continue;
    }
    admitted.push_back(t);
    joined.push_back(t.job_rank);
  }
  if (admitted.empty()) return std::nullopt;

  members.insert(members.end(), joined.begin(), joined.end());
  std::sort(members.begin(), members.end());
  const auto rank_of = [&](std::int64_t job_rank) {
    return static_cast<int>(std::find(members.begin(), members.end(), job_rank) - members.begin());
  };
  const int size = static_cast<int>(members.size());
  const std::int64_t number = head[1];
  if (leader) {
    for (const join::ticket& t : admitted) {
      join::admit(kv, t, join::admission{number, rank_of(t.job_rank), size});
    }
  }
  log(log_level::info, "grow: job ranks " + rank_list(joined) + " join; " + std::to_string(size) +
                           " ranks go on: job ranks " + rank_list(members));
  const int rank = rank_of(launched.world.rank);
  trace::name_next_recorder("g" + std::to_string(number));
  // As init() of the launcher's job was asked, which the replacements' init() repeats: a job
  // init() made hierarchical is rebuilt so where its hosts allow (the survivors of a shrink are
  // flat). Without that init(), as comm was made.
  init_options o;
  if (const std::optional<init_options> launched_with = detail::launch_options()) {
    o = *launched_with;
  } else {
    o.backend = comm.backend_name();
    o.strategy = comm.strategy_name();
  }
  if (!o.settings) o.settings = comm.settings();
  return init(
      job{join::grown_world(launched.world, rank, size), join::group_store(launched.kv, number)},
      o);
}

}  // namespace distcomm
