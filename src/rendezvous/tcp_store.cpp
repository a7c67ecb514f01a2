// tcp_store: the client side (connect with retry, handshake, one request at a time with a
// deadline) and make_tcp_store.
#include "distcomm/rendezvous/tcp_store.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>
#include <random>
#include <thread>

#include <openssl/crypto.h>

#include "distcomm/core/error.hpp"
#include "distcomm/log.hpp"
#include "store_detail.hpp"
#include "store_protocol.hpp"
#include "store_socket.hpp"

namespace distcomm {

namespace proto = detail::store_protocol;
using detail::io_clock;
using detail::io_result;
using detail::socket_fd;

namespace {

// Connect retries: first after 10 ms, doubling up to 1 s, each with jitter so a thousand ranks
// that started together do not knock in lockstep.
constexpr std::chrono::milliseconds first_retry{10};
constexpr std::chrono::milliseconds max_retry{1000};
// How long a connection waits for the server's greeting before it is given up for a new one: a
// connection the server's full accept queue dropped (thousands of ranks connecting at once) would
// otherwise wait out the whole deadline. Grows by as much per attempt.
constexpr std::chrono::seconds greeting_patience{3};
// get/wait: the server answers `timeout` at the store's deadline; the client waits this much
// longer for that answer before it concludes the server itself is stuck.
constexpr std::chrono::milliseconds answer_grace{1000};

std::uint32_t to_ms(std::chrono::duration<double> t) {
  const double ms = std::ceil(t.count() * 1000.0);
  if (!(ms > 0)) return 0;
  return ms >= 4294967295.0 ? 4294967295u : static_cast<std::uint32_t>(ms);
}

// "world size 2, this rank expects 3" / "job 'a', this rank's job 'b'": how the server's job
// differs from this client's.
std::string describe_other_job(const job_identity& server, const job_identity& mine) {
  std::string out;
  if (server.world_size > 0 && mine.world_size > 0 && server.world_size != mine.world_size) {
    out = "world size " + std::to_string(server.world_size) + ", this rank expects " +
          std::to_string(mine.world_size);
  }
  if (!server.id.empty() && !mine.id.empty() && server.id != mine.id) {
    out += (out.empty() ? "" : "; ") + std::string("job ") + detail::quote_key(server.id) +
           ", this rank's job " + detail::quote_key(mine.id);
  }
  return out.empty() ? "the server says so" : out;
}

bool is_numeric_address(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return ::inet_pton(AF_INET, host.c_str(), buf) == 1 ||
         ::inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

// The server is full (its limit on ranks, or on connections still in the handshake), or closed
// the connection in the handshake without saying why (it made room for newer ones): the connect
// loop tries again, with backoff, within its deadline.
struct try_again : rendezvous_error {
  using rendezvous_error::rendezvous_error;
};

}  // namespace

bool same_job(const job_identity& a, const job_identity& b) noexcept {
  if (a.world_size > 0 && b.world_size > 0 && a.world_size != b.world_size) return false;
  return a.id.empty() || b.id.empty() || a.id == b.id;
}

struct tcp_store::impl {
  std::string host;
  int port = 0;
  std::string token;
  job_identity job;
  std::atomic<bool> job_failed{false};
  std::string where;  // host:port for messages
  // A connection and its lock: one request at a time on it.
  struct channel {
    std::mutex mutex;
    socket_fd fd;  // empty while disconnected
    // Answers to requests sent whole but not read before their deadline (holding only): read
    // before its next request.
    std::size_t owed = 0;
  };
  channel main;  // every request but hold
  // hold alone: the server removes held keys when the connection closes, and this one never
  // closes on a request that timed out (main starts afresh then; a hold's answer is read later),
  // only with this client, or when the store itself is lost. A new holding connection holds
  // every key of `held` again first.
  channel holding;
  std::vector<std::pair<std::string, bytes>> held;  // under holding.mutex

  ~impl() { OPENSSL_cleanse(token.data(), token.size()); }

  socket_fd connect(io_clock::time_point deadline, std::chrono::duration<double> timeout);
  // `patience`: how long to wait for the greeting before trying a new connection (try_again).
  void handshake(int s, io_clock::time_point deadline, std::chrono::duration<double> timeout,
                 std::chrono::seconds patience);
  // Sends r on `ch` and returns the payload of an `ok` answer; throws for everything else.
  bytes call(channel& ch, const proto::request& r, std::chrono::duration<double> timeout,
             const char* who);
  // Under ch.mutex, on a connected ch: one request and its answer (call()'s). `owe`: when the
  // request went whole and its answer did not come in time, the stream stays open and ch owes it.
  bytes exchange(channel& ch, const proto::request& r, io_clock::time_point deadline,
                 std::chrono::duration<double> timeout, const char* who, bool owe);
  // Under ch.mutex: reads the answers ch owes (a hold whose answer was late), so the stream is
  // in step again, by `deadline`; timeout_error leaves them owed.
  void read_owed(channel& ch, io_clock::time_point deadline,
                 std::chrono::duration<double> timeout, const char* who);
  bytes call(const proto::request& r, std::chrono::duration<double> timeout, const char* who) {
    return call(main, r, timeout, who);
  }
  // set and hold: the key and value checked against the limits, then sent on `ch`.
  void write(channel& ch, proto::command cmd, const std::string& key, const bytes& value,
             std::chrono::duration<double> timeout, const char* who) {
    detail::check_key(who, key);
    detail::check_value(who, key, value.size());
    proto::request r;
    r.cmd = cmd;
    r.key = key;
    r.value = value;
    call(ch, r, timeout, who);
  }

  [[noreturn]] void auth_failed(const std::string& why) const {
    throw rendezvous_error("tcp_store: authentication failed: " + why);
  }
};

socket_fd tcp_store::impl::connect(io_clock::time_point deadline,
                                   std::chrono::duration<double> timeout) {
  std::minstd_rand jitter(std::random_device{}());
  auto backoff = first_retry;
  int attempts = 0;
  std::string why = "no attempt before the deadline";
  const auto start = io_clock::now();
  auto next_report = start + detail::progress_interval;
  for (;;) {
    std::string attempt;
    socket_fd s = detail::try_connect(host, port, deadline, attempt);
    if (s) {
      detail::keep_alive(s.get(), timeout);  // a store on a host that is lost is noticed too
      try {
        ++attempts;
        handshake(s.get(), deadline, timeout, attempts * greeting_patience);
        return s;
      } catch (const try_again& e) {
        attempt = e.what();
        s.reset();
      }
    }
    // "Connection refused" says more than the time-out of an attempt cut short by the deadline.
    if (why.rfind("no attempt", 0) == 0 || attempt != "connect timed out") why = attempt;
    const auto now = io_clock::now();
    if (now >= deadline) break;
    if (now >= next_report) {
      // Silence would look like a hang: say what is tried, what it got, and for how long still.
      log(log_level::warn, "tcp_store: no store at " + where + " yet after " +
                               detail::whole_seconds(now - start) + " (last error: " + why +
                               "); trying for another " + detail::whole_seconds(deadline - now) +
                               " (DISTCOMM_TIMEOUT)");
      next_report = now + detail::progress_interval;
    }
    const auto pause = std::chrono::duration_cast<io_clock::duration>(
        backoff * std::uniform_real_distribution<double>(0.5, 1.0)(jitter));
    std::this_thread::sleep_for(std::min<io_clock::duration>(pause, deadline - now));
    backoff = std::min(backoff * 2, max_retry);
  }
  throw timeout_error("tcp_store: could not connect to the store at " + where + " within " +
                      detail::format_seconds(timeout) + " (last error: " + why +
                      "); is the store server (rank 0, or DISTCOMM_STORE_ADDR) running and "
                      "reachable? (DISTCOMM_TIMEOUT)");
}

void tcp_store::impl::handshake(int s, io_clock::time_point deadline,
                                std::chrono::duration<double> timeout,
                                std::chrono::seconds patience) {
  int err = 0;
  const auto check_io = [&](io_result r, const char* step) {
    if (r == io_result::timeout) {
      throw timeout_error("tcp_store: the store at " + where + " did not finish the handshake (" +
                          step + ") within " + detail::format_seconds(timeout) +
                          " (DISTCOMM_TIMEOUT)");
    }
    if (r == io_result::closed) {
      throw try_again("the store closed the connection during the handshake (" + std::string(step) +
                      ")" + (err ? ": " + detail::errno_text(err) : std::string()));
    }
  };

  std::uint8_t greeting_record[proto::greeting_head_bytes];
  const auto greeting_by = std::min(deadline, io_clock::now() + patience);
  const io_result greeted =
      detail::recv_all(s, greeting_record, sizeof greeting_record, greeting_by, err);
  if (greeted == io_result::timeout && greeting_by < deadline) {
    throw try_again("no greeting from the store within " + std::to_string(patience.count()) +
                    " s of connecting");
  }
  check_io(greeted, "greeting");
  proto::greeting g;
  if (!proto::decode_greeting_head(greeting_record, g)) {
    throw rendezvous_error("tcp_store: " + where +
                           " is not a DistComm store (it answered with something else); check "
                           "the address and port");
  }
  if (g.status == proto::handshake_status::too_many_connections) {
    throw try_again(
        "the store is full: it serves as many ranks as its limit allows "
        "(tcp_store_server max_connections), or as many connections still in their "
        "handshake");
  }
  if (g.version != proto::protocol_version) {
    throw rendezvous_error("tcp_store: the store at " + where + " speaks protocol version " +
                           std::to_string(g.version) + ", this client " +
                           std::to_string(proto::protocol_version) +
                           "; use the same DistComm version on every rank");
  }
  // The server's job, after the head of this version's greeting.
  std::uint8_t job_record[proto::job_head_bytes + proto::max_job_id_bytes];
  check_io(detail::recv_all(s, job_record, proto::job_head_bytes, deadline, err), "greeting");
  const std::size_t id_bytes = job_record[4];
  check_io(detail::recv_all(s, job_record + proto::job_head_bytes, id_bytes, deadline, err),
           "greeting");
  if (proto::decode_job(job_record, proto::job_head_bytes + id_bytes, g.job).status !=
      proto::decode_status::complete) {
    throw rendezvous_error("tcp_store: the store at " + where +
                           " sent a malformed greeting (its job's world size)");
  }

  proto::hello h;
  h.auth = !token.empty();
  h.client_nonce = proto::random_nonce();
  h.job = job;
  const auto hello_record = proto::encode_hello(h);
  check_io(detail::send_all(s, hello_record.data(), hello_record.size(), deadline, err), "hello");

  std::uint8_t proof_record[proto::server_proof_bytes];
  check_io(detail::recv_all(s, proof_record, sizeof proof_record, deadline, err), "server proof");
  switch (static_cast<proto::handshake_status>(proof_record[0])) {
    case proto::handshake_status::ok:
      break;
    case proto::handshake_status::token_required:
      auth_failed("the store at " + where +
                  " requires a token and this process has none (set DISTCOMM_AUTH_TOKEN or "
                  "DISTCOMM_AUTH_TOKEN_FILE to the job's token)");
    case proto::handshake_status::token_unexpected:
      auth_failed("this process has a token (DISTCOMM_AUTH_TOKEN) but the store at " + where +
                  " runs without one; give the server the same token, or unset it here");
    case proto::handshake_status::other_job:
      throw rendezvous_error("rendezvous: the store at " + where + " belongs to another job (" +
                             describe_other_job(g.job, job) +
                             "): two jobs were started on one port; choose another MASTER_PORT "
                             "(or DISTCOMM_MASTER_PORT) for one of them");
    case proto::handshake_status::version_mismatch:
      throw rendezvous_error("tcp_store: the store at " + where + " does not speak protocol " +
                             std::to_string(proto::protocol_version) +
                             "; use the same DistComm version on every rank");
    default:
      throw rendezvous_error("tcp_store: the store at " + where + " sent an unknown status (" +
                             std::to_string(proof_record[0]) + ") in the handshake");
  }
  proto::mac server_proof{};
  std::copy(proof_record + 1, proof_record + 1 + proto::mac_bytes, server_proof.begin());
  proto::mac answer{};  // all zero without a token, and for a server that failed its proof
  bool server_ok = true;
  if (!token.empty()) {
    server_ok =
        proto::same_mac(server_proof, proto::server_mac(token, h.client_nonce, g.server_nonce));
    if (server_ok) answer = proto::client_mac(token, g.server_nonce, h.client_nonce);
  }
  check_io(detail::send_all(s, answer.data(), answer.size(), deadline, err), "client proof");
  const std::string refused =
      "the store at " + where + " did not accept this token (DISTCOMM_AUTH_TOKEN)";
  if (!server_ok) {
    // Our zero MAC makes a genuine server log the refusal; a rogue one learns nothing.
    auth_failed(refused +
                ": it could not prove it holds the same token (a different token, or "
                "not this job's store)");
  }
  std::uint8_t verdict = 0;
  check_io(detail::recv_all(s, &verdict, 1, deadline, err), "verdict");
  if (verdict == static_cast<std::uint8_t>(proto::handshake_status::auth_failed)) {
    auth_failed(refused);
  }
  if (verdict != static_cast<std::uint8_t>(proto::handshake_status::ok)) {
    throw rendezvous_error("tcp_store: the store at " + where + " sent an unknown verdict (" +
                           std::to_string(verdict) + ") in the handshake");
  }
}

bytes tcp_store::impl::call(channel& ch, const proto::request& r,
                            std::chrono::duration<double> timeout, const char* who) {
  const bool waits = r.cmd == proto::command::get || r.cmd == proto::command::wait;
  auto deadline = detail::deadline_after(timeout);
  std::lock_guard<std::mutex> lock(ch.mutex);
  const bool holds = &ch == &holding;
  if (!ch.fd) {
    ch.fd = connect(deadline, timeout);
    ch.owed = 0;
    // The server dropped this client's held keys with the connection that is gone: hold them
    // again, so that a live rank does not look departed.
    if (holds) {
      for (const auto& [key, value] : held) {
        if (key == r.key) continue;  // held below
        proto::request again;
        again.cmd = proto::command::hold;
        again.key = key;
        again.value = value;
        exchange(ch, again, deadline, timeout, who, false);
      }
    }
  }
  read_owed(ch, deadline, timeout, who);
  return exchange(ch, r, waits ? deadline + answer_grace : deadline, timeout, who, holds);
}

void tcp_store::impl::read_owed(channel& ch, io_clock::time_point deadline,
                                std::chrono::duration<double> timeout, const char* who) {
  while (ch.owed > 0) {
    std::uint8_t header[proto::response_header_bytes];
    int err = 0;
    io_result res = detail::recv_all(ch.fd.get(), header, sizeof header, deadline, err);
    proto::response_status status{};
    std::uint32_t size = 0;
    if (res == io_result::ok && !proto::decode_response_header(header, status, size)) {
      res = io_result::closed;  // out of step: start afresh
    }
    if (res == io_result::ok) {
      bytes payload(size);
      // Half an answer read leaves the stream out of step, whatever stopped it.
      if (detail::recv_all(ch.fd.get(), payload.data(), payload.size(), deadline, err) !=
          io_result::ok) {
        res = io_result::closed;
      }
    }
    if (res == io_result::timeout) {
      throw timeout_error(std::string(who) + ": no answer from the store at " + where +
                          " within " + detail::format_seconds(timeout) +
                          " to an earlier hold (DISTCOMM_TIMEOUT)");
    }
    if (res != io_result::ok) {
      ch.fd.reset();
      throw peer_lost_error(std::string(who) + ": lost the connection to the store at " + where +
                            " while reading the answer to an earlier hold");
    }
    --ch.owed;
  }
}

bytes tcp_store::impl::exchange(channel& ch, const proto::request& r,
                                io_clock::time_point deadline,
                                std::chrono::duration<double> timeout, const char* who,
                                bool owe) {
  const bool waits = r.cmd == proto::command::get || r.cmd == proto::command::wait;
  socket_fd& fd = ch.fd;
  bool sent = false;

  const auto keys_text = [&] {
    return r.keys.empty() ? detail::quote_key(r.key) : detail::quote_keys(r.keys);
  };
  int err = 0;
  const auto check_io = [&](io_result res) {
    if (res == io_result::ok) return;
    if (owe && sent && res == io_result::timeout) {
      ++ch.owed;  // the request went whole: its answer is read before the next one
    } else {
      fd.reset();  // a half-done exchange leaves the stream out of step: start afresh next call
    }
    if (res == io_result::timeout) {
      throw timeout_error(std::string(who) + ": no answer from the store at " + where + " within " +
                          detail::format_seconds(timeout) + " for " + keys_text() +
                          (waits ? " (still missing)" : "") + " (DISTCOMM_TIMEOUT)");
    }
    throw peer_lost_error(std::string(who) + ": lost the connection to the store at " + where +
                          " during " + proto::to_string(r.cmd) + "(" + keys_text() + ")" +
                          (err ? ": " + detail::errno_text(err) : std::string()));
  };

  const bytes frame = proto::encode_request(r);
  check_io(detail::send_all(fd.get(), frame.data(), frame.size(), deadline, err));
  sent = true;
  std::uint8_t header[proto::response_header_bytes];
  check_io(detail::recv_all(fd.get(), header, sizeof header, deadline, err));
  proto::response_status status{};
  std::uint32_t size = 0;
  if (!proto::decode_response_header(header, status, size)) {
    fd.reset();
    throw error(std::string(who) + ": the store at " + where + " sent a malformed answer");
  }
  bytes payload(size);
  check_io(detail::recv_all(fd.get(), payload.data(), payload.size(), deadline, err));
  switch (status) {
    case proto::response_status::ok:
      return payload;
    case proto::response_status::timeout: {
      std::vector<std::string> missing;
      if (!proto::decode_key_list(payload.data(), payload.size(), missing)) {
        fd.reset();
        throw error(std::string(who) + ": the store at " + where + " sent a malformed answer");
      }
      detail::throw_missing_keys(who, missing, timeout);
    }
    case proto::response_status::invalid:
      throw invalid_argument_error(std::string(payload.begin(), payload.end()));
    case proto::response_status::error:
      fd.reset();
      throw error(std::string(who) + ": " + std::string(payload.begin(), payload.end()));
  }
  fd.reset();
  throw error(std::string(who) + ": the store at " + where + " sent a malformed answer");
}

tcp_store::tcp_store(std::string host, int port, std::chrono::duration<double> timeout,
                     std::string token, job_identity job)
    : impl_(std::make_unique<impl>()) {
  if (port < 1 || port > 65535) {
    throw invalid_argument_error("tcp_store: port " + std::to_string(port) +
                                 " is outside 1..65535");
  }
  if (job.id.size() > proto::max_job_id_bytes) {
    throw invalid_argument_error("tcp_store: a job id has at most " +
                                 std::to_string(proto::max_job_id_bytes) + " bytes, not " +
                                 std::to_string(job.id.size()));
  }
  set_timeout(timeout);
  impl_->host = std::move(host);
  impl_->port = port;
  impl_->token = std::move(token);
  impl_->job = std::move(job);
  impl_->where = detail::host_port(impl_->host, port);
  std::lock_guard<std::mutex> lock(impl_->main.mutex);
  impl_->main.fd = impl_->connect(detail::deadline_after(timeout), timeout);
}

tcp_store::tcp_store(std::unique_ptr<tcp_store_server> server, std::string host,
                     std::chrono::duration<double> timeout, std::string token)
    : tcp_store(std::move(host), server ? server->port() : 0, timeout, std::move(token),
                server ? server->job() : job_identity{}) {
  server_ = std::move(server);
}

namespace {
// How long a store whose job failed still serves connected ranks at exit: far longer than a
// healthy rank takes to read a reply, far shorter than a user waits for a failed job to end.
constexpr auto failed_linger = std::chrono::milliseconds(250);
}  // namespace

tcp_store::~tcp_store() {
  // Unwinding means this rank is failing: no rank can count on the store any more.
  const bool failed = impl_->job_failed.load() || std::uncaught_exceptions() > 0;
  impl_.reset();  // close the connection before the hosted server (if any) stops
  if (!server_) return;
  if (failed) {
    // After a failure some rank may be stopped or hung and never disconnect: serving on would
    // only keep this process alive (up to 30 s) after it has reported its error. A short grace
    // still lets the healthy ranks read their last replies (a barrier the failure did not
    // concern, a rank timing out at the same deadline with its own message).
    const auto grace = std::chrono::steady_clock::now() + failed_linger;
    while (server_->connections() != 0 && std::chrono::steady_clock::now() < grace) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (server_->connections() != 0 && log_enabled(log_level::info)) {
      log(log_level::info, "tcp_store: the job failed; closing the store on port " +
                               std::to_string(server_->port()) + " with " +
                               std::to_string(server_->connections()) +
                               " connection(s) still open");
    }
    return;
  }
  // The hosting rank often finishes first (it does no more work than the others): keep serving
  // until the other ranks have read their last replies and disconnected, for at most the
  // store's timeout, so a late reader does not see its store vanish mid-call.
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::min(timeout(), std::chrono::duration<double>(30.0)));
  while (server_->connections() != 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void tcp_store::mark_job_failed() noexcept { impl_->job_failed.store(true); }

const std::string& tcp_store::host() const noexcept { return impl_->host; }
int tcp_store::port() const noexcept { return impl_->port; }

void tcp_store::set(const std::string& key, const bytes& value) {
  impl_->write(impl_->main, proto::command::set, key, value, timeout(), "tcp_store set");
}

bool tcp_store::hold(const std::string& key, const bytes& value) {
  impl_->write(impl_->holding, proto::command::hold, key, value, timeout(), "tcp_store hold");
  // Held again on a new holding connection, should this one be lost.
  const std::lock_guard<std::mutex> lock(impl_->holding.mutex);
  auto& held = impl_->held;
  const auto it = std::find_if(held.begin(), held.end(), [&](const auto& h) {
    return h.first == key;
  });
  if (it == held.end()) {
    held.emplace_back(key, value);
  } else {
    it->second = value;
  }
  return true;
}

bytes tcp_store::get(const std::string& key) {
  detail::check_key("tcp_store get", key);
  proto::request r;
  r.cmd = proto::command::get;
  r.key = key;
  r.timeout_ms = to_ms(timeout());
  return impl_->call(r, timeout(), "tcp_store get");
}

std::int64_t tcp_store::add(const std::string& key, std::int64_t delta) {
  detail::check_key("tcp_store add", key);
  proto::request r;
  r.cmd = proto::command::add;
  r.key = key;
  r.delta = delta;
  const bytes payload = impl_->call(r, timeout(), "tcp_store add");
  if (payload.size() != 8) throw error("tcp_store add: the store sent a malformed answer");
  const std::uint64_t v =
      (std::uint64_t{proto::get_u32(payload.data())} << 32) | proto::get_u32(payload.data() + 4);
  return static_cast<std::int64_t>(v);
}

namespace {

void check_key_list(const char* who, const std::vector<std::string>& keys) {
  std::size_t total = 4;
  for (const auto& k : keys) {
    detail::check_key(who, k);
    total += 4 + k.size();
  }
  if (total > proto::max_key_list_bytes) {
    throw invalid_argument_error(std::string(who) + ": " + std::to_string(keys.size()) +
                                 " keys take " + std::to_string(total) +
                                 " bytes, above the 16 MiB one request may carry");
  }
}

}  // namespace

bool tcp_store::check(const std::vector<std::string>& keys) {
  check_key_list("tcp_store check", keys);
  proto::request r;
  r.cmd = proto::command::check;
  r.keys = keys;
  const bytes payload = impl_->call(r, timeout(), "tcp_store check");
  if (payload.size() != 1) throw error("tcp_store check: the store sent a malformed answer");
  return payload[0] != 0;
}

void tcp_store::wait(const std::vector<std::string>& keys) {
  check_key_list("tcp_store wait", keys);
  proto::request r;
  r.cmd = proto::command::wait;
  r.keys = keys;
  r.timeout_ms = to_ms(timeout());
  impl_->call(r, timeout(), "tcp_store wait");
}

bytes tcp_store::compare_set(const std::string& key, const bytes& expected, const bytes& desired) {
  detail::check_key("tcp_store compare_set", key);
  detail::check_value("tcp_store compare_set", key, expected.size());
  detail::check_value("tcp_store compare_set", key, desired.size());
  proto::request r;
  r.cmd = proto::command::compare_set;
  r.key = key;
  r.expected = expected;
  r.value = desired;
  return impl_->call(r, timeout(), "tcp_store compare_set");
}

std::unique_ptr<store> make_tcp_store(const std::string& host, int port, bool is_server,
                                      std::chrono::duration<double> timeout,
                                      const std::string& token, const job_identity& job) {
  if (!is_server) return std::make_unique<tcp_store>(host, port, timeout, token, job);
  // A name may resolve to a loopback alias on its own machine (Debian maps the host name to
  // 127.0.1.1), so a named host listens on every interface and the hosting client uses loopback.
  const bool numeric = is_numeric_address(host);
  auto server =
      std::make_unique<tcp_store_server>(numeric ? host : std::string(), port, token, job);
  std::string local = host;
  if (!numeric || host == "0.0.0.0") local = "127.0.0.1";
  if (host == "::") local = "::1";
  return std::make_unique<tcp_store>(std::move(server), local, timeout, token);
}

}  // namespace distcomm
