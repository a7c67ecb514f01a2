// The tcp_store wire protocol (private): handshake records, request frames and responses, as pure
// functions over byte buffers so the server's decoder can be fuzzed without sockets
// (fuzz/fuzz_store.cpp). All integers are big-endian. docs/STORE.md describes the protocol.
//
// Handshake (after the TCP connect; each record a fixed head, the greeting and hello then the
// job they belong to):
//   server -> client  greeting  "DCST" | u8 version | u8 status | u8 auth | nonce_s[32] | job
//   client -> server  hello     "DCST" | u8 version | u8 auth | nonce_c[32] | job
//   server -> client  proof     u8 status | mac_s[32]
//   client -> server  proof     mac_c[32]
//   server -> client  verdict   u8 status
//   job = u32 world size (0: not said) | u8 id length | id (what the launcher calls the job)
// with mac_s = HMAC-SHA256(token, nonce_c | nonce_s | "distcomm-store-v1 server") and
//      mac_c = HMAC-SHA256(token, nonce_s | nonce_c | "distcomm-store-v1 client"),
// all-zero MACs when the server runs without a token. The server proves first, so a client never
// hands its MAC to a server that does not hold the token. The heads are those of version 1, so
// either side reads the other's version before anything that changed since, and a client of
// another version gets `version_mismatch` rather than a garbled record.
//
// Requests:  u8 command | u32 key length | key | u32 value length | value
// Responses: u8 status  | u32 payload length | payload
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "distcomm/rendezvous/store.hpp"
#include "distcomm/rendezvous/tcp_store.hpp"

namespace distcomm::detail::store_protocol {

// 2: the greeting and the hello carry the job (world size and id), and `other_job` exists.
// 3: the `hold` command.
inline constexpr std::uint8_t protocol_version = 3;
inline constexpr std::array<std::uint8_t, 4> magic = {'D', 'C', 'S', 'T'};
inline constexpr std::size_t nonce_bytes = 32;
inline constexpr std::size_t mac_bytes = 32;
inline constexpr std::size_t greeting_head_bytes = 4 + 1 + 1 + 1 + nonce_bytes;
inline constexpr std::size_t hello_head_bytes = 4 + 1 + 1 + nonce_bytes;
inline constexpr std::size_t job_head_bytes = 4 + 1;
inline constexpr std::size_t max_job_id_bytes = 255;
inline constexpr std::size_t max_hello_bytes = hello_head_bytes + job_head_bytes + max_job_id_bytes;
inline constexpr std::size_t server_proof_bytes = 1 + mac_bytes;
inline constexpr std::size_t client_proof_bytes = mac_bytes;
inline constexpr std::size_t verdict_bytes = 1;

using nonce = std::array<std::uint8_t, nonce_bytes>;
using mac = std::array<std::uint8_t, mac_bytes>;

// What a decoder made of the bytes it was given.
enum class decode_status { complete, incomplete, malformed };
struct decode_result {
  decode_status status = decode_status::incomplete;
  std::size_t consumed = 0;  // bytes of the frame, when complete
  std::string error;         // what is wrong, when malformed
};

// Status of the handshake records.
enum class handshake_status : std::uint8_t {
  ok = 0,
  too_many_connections = 1,  // greeting: the server is at its connection limit
  version_mismatch = 2,      // proof: the client speaks another protocol version
  token_required = 3,        // proof: the server has a token, the client none
  token_unexpected = 4,      // proof: the client has a token, the server none
  auth_failed = 5,           // verdict: the client's MAC is wrong
  other_job = 6,             // proof: the client belongs to another job than the server
};

struct greeting {
  std::uint8_t version = protocol_version;
  handshake_status status = handshake_status::ok;
  bool auth = false;
  nonce server_nonce{};
  job_identity job;
};
struct hello {
  std::uint8_t version = protocol_version;
  bool auth = false;
  nonce client_nonce{};
  job_identity job;
};

// The job field; the id is cut to max_job_id_bytes (callers keep it shorter).
bytes encode_job(const job_identity& j);
// The job field at the start of [data, data + size): incomplete until all of it is there;
// malformed when the world size does not fit an int.
decode_result decode_job(const std::uint8_t* data, std::size_t size, job_identity& out);

bytes encode_greeting(const greeting& g);
// The head only (greeting_head_bytes; not the job). False when the record does not start with
// the magic (not a DistComm store).
bool decode_greeting_head(const std::uint8_t* data, greeting& out);
bytes encode_hello(const hello& h);
// A whole hello at the start of [data, data + size). Of a client that speaks another version
// only the head is read (complete after hello_head_bytes, job left empty): the caller answers
// version_mismatch. Malformed without the magic (not a DistComm client).
decode_result decode_hello(const std::uint8_t* data, std::size_t size, hello& out);

enum class command : std::uint8_t {
  set = 1,
  get = 2,
  add = 3,
  check = 4,
  wait = 5,
  compare_set = 6,
  hold = 7,  // set, and removed when this connection closes
};
const char* to_string(command c) noexcept;

// One request, decoded. Which fields are used depends on the command.
struct request {
  command cmd = command::set;
  std::string key;                // set, get, add, compare_set, hold
  bytes value;                    // set, hold: the value; compare_set: the desired value
  bytes expected;                 // compare_set
  std::vector<std::string> keys;  // check, wait
  std::int64_t delta = 0;         // add
  std::uint32_t timeout_ms = 0;   // get, wait: when the server answers `timeout`
};

// The value field of each command:
//   set          the value (<= store_max_value_bytes)
//   get          u32 timeout_ms
//   add          i64 delta
//   check        key list
//   wait         u32 timeout_ms | key list
//   compare_set  u32 expected length | expected | desired
//   hold         the value (<= store_max_value_bytes)
// A key list is u32 count | count x (u32 length | key), at most store_max_value_bytes in all.
// The key field is empty for check and wait.
std::size_t max_value_field(command c) noexcept;
inline constexpr std::size_t max_key_list_bytes = store_max_value_bytes;

// Decodes the first request frame in [data, data + size). Lengths are checked against the limits
// as soon as they are read, before anything is allocated, so a buffer that is `incomplete` never
// needs to grow past the largest legal frame. Never throws for bad input.
decode_result decode_request(const std::uint8_t* data, std::size_t size, request& out);
// The frame for r; the caller has checked the limits (encode never truncates).
bytes encode_request(const request& r);

enum class response_status : std::uint8_t {
  ok = 0,
  timeout = 1,  // payload: key list of the keys still missing
  invalid = 2,  // payload: message (invalid_argument_error on the client)
  error = 3,    // payload: message; the server closes the connection after it
};
inline constexpr std::size_t response_header_bytes = 5;
// Largest legal payload: a value, or the key list of a timeout, plus headroom for messages.
inline constexpr std::size_t max_response_payload = store_max_value_bytes + 64 * 1024;

bytes encode_response(response_status s, const std::uint8_t* payload, std::size_t size);
inline bytes encode_response(response_status s, const bytes& payload) {
  return encode_response(s, payload.data(), payload.size());
}
inline bytes encode_response(response_status s, const std::string& message) {
  return encode_response(s, reinterpret_cast<const std::uint8_t*>(message.data()), message.size());
}
// False when the header is not a response (unknown status or payload above the limit).
bool decode_response_header(const std::uint8_t* data, response_status& status,
                            std::uint32_t& payload_size);

bytes encode_key_list(const std::vector<std::string>& keys);
// False when [data, data + size) is not exactly one key list within the limits.
bool decode_key_list(const std::uint8_t* data, std::size_t size, std::vector<std::string>& out);

void put_u32(bytes& out, std::uint32_t v);
std::uint32_t get_u32(const std::uint8_t* p) noexcept;

// Authentication (store_auth.cpp, OpenSSL libcrypto).
nonce random_nonce();
mac server_mac(const std::string& token, const nonce& client_nonce, const nonce& server_nonce);
mac client_mac(const std::string& token, const nonce& server_nonce, const nonce& client_nonce);
// Constant-time comparison.
bool same_mac(const mac& a, const mac& b) noexcept;

}  // namespace distcomm::detail::store_protocol
