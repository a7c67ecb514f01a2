// etcd_client: requests to an etcd v3 cluster through its JSON gateway (POST /v3/..., keys and
// values in base64), over libcurl. Private to etcd_store.cpp.
//
// Every request has a deadline. A member that does not answer (refused, unreachable, silent for
// attempt_timeout) is left for the next one in the list, round and round until the deadline; the
// member that answered last is asked first. With a user, the client authenticates
// (/v3/auth/authenticate, the password being the job's token) and sends etcd's token with every
// request, authenticating again when etcd says it expired.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "distcomm/rendezvous/store.hpp"
#include "store_detail.hpp"

namespace distcomm::detail {

using json = nlohmann::json;

std::string to_base64(const std::string& raw);
std::string to_base64(const bytes& raw);
// rendezvous_error naming `what` when `text` is not base64.
bytes from_base64(const std::string& text, const char* what);

// An error reply of etcd (HTTP status other than 200): its gRPC code and message.
class etcd_reply_error : public rendezvous_error {
 public:
  etcd_reply_error(const std::string& what, int code, std::string message)
      : rendezvous_error(what), code_(code), message_(std::move(message)) {}
  int code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }

 private:
  int code_;
  std::string message_;
};

class etcd_client {
 public:
  // endpoints: "host:port" of each member (http). user: "" for a cluster without
  // authentication.
  etcd_client(std::vector<std::string> endpoints, std::string user, std::string password);
  ~etcd_client();
  etcd_client(const etcd_client&) = delete;
  etcd_client& operator=(const etcd_client&) = delete;

  // POST `path` (e.g. "/v3/kv/range") with `body`; etcd's reply. etcd_reply_error for an error
  // reply, timeout_error when no member answered before `deadline`.
  json call(const std::string& path, const json& body, store_clock::time_point deadline);

  // POST /v3/watch with `body`, then `on_event(message)` for every message of the stream after
  // the one that says the watch was created, until it returns true (returns true) or `until`
  // passes (returns false). A member lost meanwhile ends the watch early (returns false): the
  // caller looks again and watches anew.
  bool watch(const json& body, store_clock::time_point until,
             const std::function<bool(const json&)>& on_event);

  // "host:port,host:port", for messages.
  std::string members() const;

  // How long one member may take to answer a request before the next is asked.
  static constexpr std::chrono::seconds attempt_timeout{3};

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace distcomm::detail
