// etcd_client: etcd's v3 JSON gateway over libcurl (etcd_client.hpp).
#include "etcd_client.hpp"

#include <algorithm>
#include <mutex>
#include <thread>
#include <utility>

#include <curl/curl.h>
#include <openssl/evp.h>

#include "distcomm/core/error.hpp"

namespace distcomm::detail {

namespace {

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

long milliseconds_until(store_clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - store_clock::now());
  return std::max<long>(1, static_cast<long>(ms.count()));
}

// What a POST collects: the reply, or for a watch the messages as they come.
struct transfer {
  std::string body;
  std::function<bool(const json&)> on_message;  // set for a stream; true ends it
  bool done = false;                            // on_message returned true
  std::string bad;                              // a message that was not JSON
};

std::size_t collect(char* data, std::size_t size, std::size_t count, void* user) {
  auto* t = static_cast<transfer*>(user);
  t->body.append(data, size * count);
  if (!t->on_message) return size * count;
  // The gateway writes one JSON object per line.
  for (std::size_t end; (end = t->body.find('\n')) != std::string::npos;) {
    const std::string line = t->body.substr(0, end);
    t->body.erase(0, end + 1);
    if (line.empty()) continue;
    json message = json::parse(line, nullptr, false);
    if (message.is_discarded()) {
      t->bad = line.substr(0, 200);
      return 0;  // ends the transfer
    }
    if (t->on_message(message)) {
      t->done = true;
      return 0;
    }
  }
  return size * count;
}

}  // namespace

std::string to_base64(const std::string& raw) {
  std::string out(4 * ((raw.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(raw.data()),
                                static_cast<int>(raw.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

std::string to_base64(const bytes& raw) { return to_base64(std::string(raw.begin(), raw.end())); }

bytes from_base64(const std::string& text, const char* what) {
  if (text.empty()) return {};
  if (text.size() % 4 != 0) {
    throw rendezvous_error(std::string("etcd_store: ") + what + " is not base64: '" +
                           text.substr(0, 40) + "'");
  }
  bytes out(3 * text.size() / 4);
  const int n = EVP_DecodeBlock(out.data(), reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  if (n < 0) {
    throw rendezvous_error(std::string("etcd_store: ") + what + " is not base64: '" +
                           text.substr(0, 40) + "'");
  }
  // EVP_DecodeBlock counts the padding as zero bytes.
  std::size_t len = static_cast<std::size_t>(n);
  for (std::size_t i = text.size(); i > 0 && text[i - 1] == '=' && len > 0; --i) --len;
  out.resize(len);
  return out;
}

struct etcd_client::impl {
  std::vector<std::string> endpoints;
  std::string user;
  std::string password;
  std::string token;        // etcd's, after authentication
  std::size_t current = 0;  // the member asked first
  CURL* curl = nullptr;

  // One POST to one member; the HTTP status (0 when the member did not answer, with `why`).
  long post(const std::string& endpoint, const std::string& path, const std::string& body,
            long timeout_ms, transfer& t, std::string& why) {
    curl_easy_reset(curl);
    const std::string url = "http://" + endpoint + path;
    curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
    if (!token.empty()) headers = curl_slist_append(headers, ("Authorization: " + token).c_str());
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, std::min<long>(timeout_ms, 2000));
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http");
    const CURLcode rc = curl_easy_perform(curl);
    curl_slist_free_all(headers);
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    if (rc != CURLE_OK && !(rc == CURLE_WRITE_ERROR && t.done)) {
      why = endpoint + ": " + (t.bad.empty() ? curl_easy_strerror(rc) : "not JSON: " + t.bad);
      return t.on_message && status == 200 ? -1 : 0;  // -1: a stream that broke off
    }
    return status;
  }

  void authenticate(store_clock::time_point deadline);
  json call(const std::string& path, const json& body, store_clock::time_point deadline,
            bool may_authenticate);
};

etcd_client::etcd_client(std::vector<std::string> endpoints, std::string user, std::string password)
    : impl_(std::make_unique<impl>()) {
  global_init();
  impl_->endpoints = std::move(endpoints);
  impl_->user = std::move(user);
  impl_->password = std::move(password);
  impl_->curl = curl_easy_init();
  if (impl_->curl == nullptr) throw error("etcd_store: libcurl could not make a handle");
}

etcd_client::~etcd_client() { curl_easy_cleanup(impl_->curl); }

std::string etcd_client::members() const {
  std::string s;
  for (const std::string& e : impl_->endpoints) s += (s.empty() ? "" : ",") + e;
  return s;
}

json etcd_client::impl::call(const std::string& path, const json& body,
                             store_clock::time_point deadline, bool may_authenticate) {
  if (!user.empty() && token.empty() && path != "/v3/auth/authenticate") authenticate(deadline);
  const std::string text = body.dump();
  std::string last;
  for (std::size_t tried = 0;; ++tried) {
    if (store_clock::now() >= deadline) {
      std::string list;
      for (const std::string& e : endpoints) list += (list.empty() ? "" : ",") + e;
      throw timeout_error("etcd_store: no member of the etcd cluster " + list + " answered " +
                          path +
                          " in time (last: " + (last.empty() ? std::string("no attempt") : last) +
                          "); is etcd running and reachable? (DISTCOMM_STORE, DISTCOMM_TIMEOUT)");
    }
    const std::string& endpoint = endpoints[current];
    const long timeout_ms = std::min(
        milliseconds_until(deadline),
        static_cast<long>(std::chrono::milliseconds(etcd_client::attempt_timeout).count()));
    transfer t;
    std::string why;
    const long status = post(endpoint, path, text, timeout_ms, t, why);
    if (status == 0) {
      last = why;
      current = (current + 1) % endpoints.size();  // the next member
      if (tried + 1 >= endpoints.size()) {
        // Every member failed once: a short pause, not a busy loop, before going round again.
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      continue;
    }
    json reply = json::parse(t.body, nullptr, false);
    if (reply.is_discarded() || !reply.is_object()) {
      throw rendezvous_error("etcd_store: " + endpoint + " answered " + path +
                             " with something that is not etcd's JSON (HTTP " +
                             std::to_string(status) + "): '" + t.body.substr(0, 200) +
                             "'; is that address an etcd v3 member's client URL?");
    }
    if (status == 200) return reply;
    const int code = reply.value("code", 0);
    const std::string message = reply.value("message", reply.value("error", t.body));
    if (may_authenticate && !user.empty() &&
        message.find("invalid auth token") != std::string::npos) {
      token.clear();  // expired: once more with a new one
      authenticate(deadline);
      return call(path, body, deadline, false);
    }
    // Unavailable (no leader yet, a member leaving): another member may serve it.
    if (code == 14) {
      last = endpoint + ": " + message;
      current = (current + 1) % endpoints.size();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    throw etcd_reply_error("etcd_store: etcd at " + endpoint + " refused " + path + ": " + message,
                           code, message);
  }
}

void etcd_client::impl::authenticate(store_clock::time_point deadline) {
  json body = {{"name", user}, {"password", password}};
  json reply;
  try {
    reply = call("/v3/auth/authenticate", body, deadline, false);
  } catch (const etcd_reply_error& e) {
    throw rendezvous_error("etcd_store: etcd refused the user '" + user + "' (" + e.message() +
                           "): give the password as DISTCOMM_AUTH_TOKEN (or _FILE), or name "
                           "the user etcd knows in DISTCOMM_STORE (etcd://user@host:port/prefix)");
  }
  token = reply.value("token", "");
  if (token.empty())
    throw rendezvous_error("etcd_store: etcd authenticated '" + user + "' but sent no token");
}

json etcd_client::call(const std::string& path, const json& body,
                       store_clock::time_point deadline) {
  return impl_->call(path, body, deadline, true);
}

bool etcd_client::watch(const json& body, store_clock::time_point until,
                        const std::function<bool(const json&)>& on_event) {
  impl& m = *impl_;
  if (!m.user.empty() && m.token.empty()) m.authenticate(until);
  transfer t;
  bool created = false;
  std::string refused;
  t.on_message = [&](const json& message) {
    if (message.contains("error")) {
      refused = message["error"].value("message", message.dump());
      return true;
    }
    const json& result = message.value("result", json::object());
    if (!created) {
      created = result.value("created", false);
      if (!created) return on_event(result);
      return false;
    }
    return on_event(result);
  };
  std::string why;
  const long status =
      m.post(m.endpoints[m.current], "/v3/watch", body.dump(), milliseconds_until(until), t, why);
  if (!refused.empty()) throw rendezvous_error("etcd_store: etcd refused a watch: " + refused);
  if (status == 0) m.current = (m.current + 1) % m.endpoints.size();
  return t.done;
}

}  // namespace distcomm::detail
