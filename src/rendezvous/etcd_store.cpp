// etcd_store: the store contract over an etcd v3 cluster (etcd_store.hpp): keys under the job's
// prefix and lease, waits as watches, add and compare_set as revision-checked transactions.
#include "distcomm/rendezvous/etcd_store.hpp"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "distcomm/config.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/log.hpp"
#include "etcd_client.hpp"
#include "store_detail.hpp"

namespace distcomm {

namespace {

using detail::json;
using detail::store_clock;

// A watch is renewed this often, so that a member lost without a word (its host gone) delays a
// wait by at most this much before another member is asked.
constexpr std::chrono::seconds watch_slice{2};
// How long the look at the keys that ends a wait may take past its deadline.
constexpr std::chrono::seconds last_look{1};
// Range requests per transaction (etcd takes at most 128 operations in one).
constexpr std::size_t ranges_per_txn = 64;

std::string text_of(const bytes& b) { return std::string(b.begin(), b.end()); }

std::int64_t int_of(const json& j, const char* field) {
  const auto it = j.find(field);
  if (it == j.end()) return 0;  // proto3 leaves zero out
  return it->is_string() ? std::stoll(it->get<std::string>()) : it->get<std::int64_t>();
}

// One key as a range request read it.
struct entry {
  bool present = false;
  bytes value;
  std::string mod_revision;
};

}  // namespace

etcd_address parse_etcd_url(const std::string& url) {
  const auto bad = [&](const std::string& why) {
    return rendezvous_error("DISTCOMM_STORE='" + url + "' " + why +
                            " (expected etcd://[user@]host:port[,host:port...]/prefix, e.g. "
                            "etcd://10.0.0.1:2379,10.0.0.2:2379/jobs/train-42)");
  };
  const std::string scheme = "etcd://";
  if (url.rfind(scheme, 0) != 0) {
    throw bad("is not an etcd:// address");
  }
  etcd_address a;
  a.text = url;
  std::string rest = url.substr(scheme.size());
  const auto slash = rest.find('/');
  if (slash == std::string::npos || slash + 1 >= rest.size()) throw bad("has no prefix");
  a.prefix = rest.substr(slash + 1);
  while (!a.prefix.empty() && a.prefix.back() == '/') a.prefix.pop_back();
  if (a.prefix.empty()) throw bad("has no prefix");
  std::string members = rest.substr(0, slash);
  if (const auto at = members.find('@'); at != std::string::npos) {
    a.user = members.substr(0, at);
    members = members.substr(at + 1);
    if (a.user.empty()) throw bad("has an empty user before '@'");
    if (a.user.find(':') != std::string::npos) {
      throw bad("has a password in it: give it as DISTCOMM_AUTH_TOKEN (or _FILE) instead");
    }
  }
  std::size_t start = 0;
  while (start <= members.size()) {
    const auto comma = members.find(',', start);
    const std::string m =
        members.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const auto colon = m.rfind(':');
    const bool bracketed = !m.empty() && m.front() == '[';
    if (m.empty() || colon == std::string::npos || colon == 0 || colon + 1 >= m.size() ||
        (bracketed && m[colon - 1] != ']') || (!bracketed && m.find(':') != colon)) {
      throw bad("has a member '" + m + "' that is not host:port");
    }
    const std::string port = m.substr(colon + 1);
    if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(port) < 1 || std::stoi(port) > 65535) {
      throw bad("has a member '" + m + "' whose port is not 1..65535");
    }
    a.endpoints.push_back(m);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return a;
}

struct etcd_store::impl {
  etcd_address address;
  std::mutex mu;  // one request at a time on `client`
  detail::etcd_client client;
  std::string lease;  // the job's, decimal

  std::mutex keeper_mu;
  std::condition_variable keeper_cv;
  bool stopping = false;
  std::thread keeper;

  impl(etcd_address a, const std::string& password)
      : address(std::move(a)), client(address.endpoints, address.user, password) {}

  std::string full(const std::string& key) const { return address.prefix + "/k/" + key; }
  std::string where() const {
    return "etcd " + client.members() + " under '" + address.prefix + "'";
  }

  json range(const std::string& full_key, store_clock::time_point deadline, bool count_only) {
    json body = {{"key", detail::to_base64(full_key)}};
    if (count_only) body["count_only"] = true;
    return client.call("/v3/kv/range", body, deadline);
  }

  entry read(const std::string& full_key, store_clock::time_point deadline) {
    const json reply = range(full_key, deadline, false);
    entry e;
    const auto kvs = reply.find("kvs");
    if (kvs == reply.end() || kvs->empty()) return e;
    const json& kv = kvs->front();
    e.present = true;
    e.value = detail::from_base64(kv.value("value", ""), "a value");
    e.mod_revision = kv.value("mod_revision", "0");
    return e;
  }

  json put_request(const std::string& full_key, const bytes& value) const {
    json put = {{"key", detail::to_base64(full_key)}, {"value", detail::to_base64(value)}};
    if (!lease.empty()) put["lease"] = lease;
    return put;
  }

  // A put of full_key when it is still as `seen` read it; true when it was written.
  bool put_if_unchanged(const std::string& full_key, const entry& seen, const bytes& value,
                        store_clock::time_point deadline) {
    json compare = {{"key", detail::to_base64(full_key)}, {"result", "EQUAL"}};
    if (seen.present) {
      compare["target"] = "MOD";
      compare["mod_revision"] = seen.mod_revision;
    } else {
      compare["target"] = "CREATE";
      compare["create_revision"] = "0";
    }
    const json body = {{"compare", json::array({compare})},
                       {"success", json::array({{{"request_put", put_request(full_key, value)}}})}};
    return client.call("/v3/kv/txn", body, deadline).value("succeeded", false);
  }

  // The keys of `keys` not set, and the revision at which the first of them was seen missing.
  std::vector<std::string> missing(const std::vector<std::string>& keys,
                                   store_clock::time_point deadline, std::int64_t* revision) {
    std::vector<std::string> out;
    for (std::size_t first = 0; first < keys.size(); first += ranges_per_txn) {
      const std::size_t last = std::min(keys.size(), first + ranges_per_txn);
      json ops = json::array();
      for (std::size_t i = first; i < last; ++i) {
        ops.push_back(
            {{"request_range", {{"key", detail::to_base64(full(keys[i]))}, {"count_only", true}}}});
      }
      const json reply = client.call("/v3/kv/txn", {{"success", ops}}, deadline);
      const json responses = reply.value("responses", json::array());
      for (std::size_t i = first; i < last; ++i) {
        const std::size_t at = i - first;
        const json r = at < responses.size() ? responses[at].value("response_range", json::object())
                                             : json::object();
        if (int_of(r, "count") == 0) {
          if (out.empty() && revision != nullptr) {
            *revision = int_of(reply.value("header", json::object()), "revision");
          }
          out.push_back(keys[i]);
        }
      }
    }
    return out;
  }

  // Until every key is set: look, then watch the first missing one from the revision it was
  // seen missing at, and look again; missing_keys_error at the deadline.
  void await(const std::vector<std::string>& keys, std::chrono::duration<double> timeout,
             const char* who) {
    const auto deadline = detail::deadline_after(timeout);
    for (;;) {
      std::int64_t revision = 0;
      std::vector<std::string> absent;
      // The look after the deadline still gets an answer: it decides which keys the error names.
      const auto look_until = std::max(deadline, store_clock::now() + last_look);
      try {
        absent = missing(keys, look_until, &revision);
      } catch (const timeout_error&) {
        absent = keys;  // no member answered: every key counts as missing
      }
      if (absent.empty()) return;
      if (store_clock::now() >= deadline) detail::throw_missing_keys(who, absent, timeout);
      const json body = {{"create_request",
                          {{"key", detail::to_base64(full(absent.front()))},
                           {"start_revision", std::to_string(revision + 1)}}}};
      const auto until = std::min(deadline, store_clock::now() + watch_slice);
      client.watch(body, until, [](const json& result) {
        return result.contains("events") && !result["events"].empty();
      });
    }
  }

  // The job's lease: the one its first client made, or a new one when there is none.
  void join_lease(store_clock::time_point deadline) {
    const std::string key = address.prefix + "/lease";
    for (;;) {
      const entry seen = read(key, deadline);
      if (seen.present) {
        const json alive =
            client.call("/v3/lease/timetolive", {{"ID", text_of(seen.value)}}, deadline);
        if (int_of(alive, "TTL") > 0) {
          lease = text_of(seen.value);
          return;
        }
      }
      const json granted =
          client.call("/v3/lease/grant", {{"TTL", std::to_string(lease_ttl.count())}}, deadline);
      const std::string mine = granted.value("ID", "");
      if (mine.empty()) throw rendezvous_error("etcd_store: " + where() + " granted no lease");
      lease = mine;
      if (put_if_unchanged(key, seen, bytes(mine.begin(), mine.end()), deadline)) return;
      client.call("/v3/lease/revoke", {{"ID", mine}}, deadline);  // another client came first
      lease.clear();
    }
  }

  // The prefix's job, written by its first client; another job's client is refused.
  void claim(const job_identity& me, store_clock::time_point deadline) {
    if (me.world_size == 0 && me.id.empty()) return;
    const std::string key = address.prefix + "/job";
    const std::string said = detail::job_text(me);
    const entry seen = read(key, deadline);
    if (!seen.present && put_if_unchanged(key, seen, bytes(said.begin(), said.end()), deadline)) {
      return;
    }
    const entry now = seen.present ? seen : read(key, deadline);
    const std::string theirs = text_of(now.value);
    const std::optional<job_identity> read_back = detail::job_from_text(theirs);
    if (!read_back) {
      throw rendezvous_error("etcd_store: " + address.prefix + "/job in " + where() + " holds '" +
                             theirs + "', not a job (another program wrote it?)");
    }
    const job_identity& other = *read_back;
    if (!same_job(me, other)) {
      throw rendezvous_error(
          "rendezvous: the prefix '" + address.prefix + "' in etcd " + client.members() +
          " belongs to another job (world size " + std::to_string(other.world_size) +
          (other.id.empty() ? "" : ", job '" + other.id + "'") + "; this rank: world size " +
          std::to_string(me.world_size) + (me.id.empty() ? "" : ", job '" + me.id + "'") +
          "): give each job a prefix of its own in DISTCOMM_STORE");
    }
  }

  // Renews the lease every lease_renewal until the store is destroyed, on a client of its own.
  void keep(detail::etcd_client& renewer) {
    std::unique_lock<std::mutex> lock(keeper_mu);
    bool warned = false;
    while (!keeper_cv.wait_for(lock, lease_renewal, [&] { return stopping; })) {
      lock.unlock();
      try {
        // A short deadline: the destructor waits for this call to end.
        const json reply =
            renewer.call("/v3/lease/keepalive", {{"ID", lease}},
                         detail::deadline_after(detail::etcd_client::attempt_timeout));
        if (int_of(reply.value("result", json::object()), "TTL") <= 0 && !warned) {
          warned = true;
          log(log_level::error,
              "etcd_store: the job's lease in " + where() + " expired: every client was away for " +
                  std::to_string(lease_ttl.count()) + " s, and the job's keys are gone");
        }
      } catch (const std::exception& e) {
        log(log_level::warn, std::string("etcd_store: could not renew the job's lease: ") +
                                 e.what() + "; trying again in " +
                                 std::to_string(lease_renewal.count()) + " s");
      }
      lock.lock();
    }
  }

  // `what`, retried once with a new lease when etcd says the job's lease is gone; etcd's refusal
  // of a request too large becomes invalid_argument_error saying what to change.
  template <class F>
  auto with_lease(const char* who, const std::string& key, F&& what,
                  store_clock::time_point deadline) {
    try {
      try {
        return what();
      } catch (const detail::etcd_reply_error& e) {
        if (e.message().find("lease not found") == std::string::npos) throw;
        log(log_level::warn,
            "etcd_store: the job's lease in " + where() + " was gone; making a new one");
        join_lease(deadline);
        return what();
      }
    } catch (const detail::etcd_reply_error& e) {
      if (e.message().find("too large") == std::string::npos) throw;
      throw invalid_argument_error(
          std::string(who) + ": etcd refused to store key " + detail::quote_key(key) +
          ": its request is larger than etcd takes (" + e.message() +
          "); start etcd with --max-request-bytes=33554432 for values up to 16 MiB");
    }
  }
};

etcd_store::etcd_store(etcd_address address, std::chrono::duration<double> timeout,
                       std::string password, job_identity job)
    : impl_(std::make_unique<impl>(std::move(address), password)) {
  set_timeout(timeout);
  const auto deadline = detail::deadline_after(timeout);
  impl_->join_lease(deadline);
  impl_->claim(job, deadline);
  const etcd_address a = impl_->address;
  impl_->keeper = std::thread([this, a, password] {
    detail::etcd_client renewer(a.endpoints, a.user, password);
    impl_->keep(renewer);
  });
}

etcd_store::~etcd_store() {
  {
    const std::lock_guard<std::mutex> lock(impl_->keeper_mu);
    impl_->stopping = true;
  }
  impl_->keeper_cv.notify_all();
  impl_->keeper.join();
}

const etcd_address& etcd_store::address() const noexcept { return impl_->address; }

void etcd_store::set(const std::string& key, const bytes& value) {
  detail::check_key("etcd_store set", key);
  detail::check_value("etcd_store set", key, value.size());
  const std::lock_guard<std::mutex> lock(impl_->mu);
  const auto deadline = detail::deadline_after(timeout());
  impl_->with_lease(
      "etcd_store set", key,
      [&] {
        return impl_->client.call("/v3/kv/put", impl_->put_request(impl_->full(key), value),
                                  deadline);
      },
      deadline);
}

bytes etcd_store::get(const std::string& key) {
  detail::check_key("etcd_store get", key);
  const std::lock_guard<std::mutex> lock(impl_->mu);
  const auto deadline = detail::deadline_after(timeout());
  entry e = impl_->read(impl_->full(key), deadline);
  if (!e.present) {
    impl_->await({key}, timeout(), "etcd_store get");
    e = impl_->read(impl_->full(key), deadline);
  }
  return e.value;
}

std::int64_t etcd_store::add(const std::string& key, std::int64_t delta) {
  detail::check_key("etcd_store add", key);
  const std::lock_guard<std::mutex> lock(impl_->mu);
  const auto deadline = detail::deadline_after(timeout());
  const std::string k = impl_->full(key);
  return impl_->with_lease(
      "etcd_store add", key,
      [&] {
        for (;;) {
          const entry seen = impl_->read(k, deadline);
          const std::int64_t next = detail::add_to_counter(
              "etcd_store", key, seen.present ? &seen.value : nullptr, delta);
          if (impl_->put_if_unchanged(k, seen, detail::encode_counter(next), deadline)) return next;
        }
      },
      deadline);
}

bool etcd_store::check(const std::vector<std::string>& keys) {
  for (const auto& k : keys) detail::check_key("etcd_store check", k);
  const std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->missing(keys, detail::deadline_after(timeout()), nullptr).empty();
}

void etcd_store::wait(const std::vector<std::string>& keys) {
  for (const auto& k : keys) detail::check_key("etcd_store wait", k);
  const std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->await(keys, timeout(), "etcd_store wait");
}

bytes etcd_store::compare_set(const std::string& key, const bytes& expected, const bytes& desired) {
  detail::check_key("etcd_store compare_set", key);
  detail::check_value("etcd_store compare_set", key, desired.size());
  const std::lock_guard<std::mutex> lock(impl_->mu);
  const auto deadline = detail::deadline_after(timeout());
  const std::string k = impl_->full(key);
  return impl_->with_lease(
      "etcd_store compare_set", key,
      [&]() -> bytes {
        for (;;) {
          const entry seen = impl_->read(k, deadline);
          if (!detail::compare_set_applies(seen.present ? &seen.value : nullptr, expected)) {
            return seen.value;
          }
          if (impl_->put_if_unchanged(k, seen, desired, deadline)) return desired;
        }
      },
      deadline);
}

}  // namespace distcomm
