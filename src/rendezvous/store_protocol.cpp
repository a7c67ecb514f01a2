// The tcp_store wire format: encoders and the bounds-checked decoders (no sockets, no OpenSSL, so
// fuzz/fuzz_store.cpp can build this file alone).
#include "store_protocol.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

namespace distcomm::detail::store_protocol {
namespace {

void put_u64(bytes& out, std::uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<std::uint8_t>(v >> shift));
}

std::uint64_t get_u64(const std::uint8_t* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

void put_bytes(bytes& out, const void* data, std::size_t size) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  out.insert(out.end(), p, p + size);
}

bool known_command(std::uint8_t c) noexcept {
  return c >= static_cast<std::uint8_t>(command::set) &&
         c <= static_cast<std::uint8_t>(command::hold);
}

decode_result malformed(std::string why) { return {decode_status::malformed, 0, std::move(why)}; }

}  // namespace

void put_u32(bytes& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<std::uint8_t>(v >> shift));
}

std::uint32_t get_u32(const std::uint8_t* p) noexcept {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

bytes encode_job(const job_identity& j) {
  bytes out;
  const std::size_t id_len = std::min(j.id.size(), max_job_id_bytes);
  out.reserve(job_head_bytes + id_len);
  put_u32(out, static_cast<std::uint32_t>(std::max(j.world_size, 0)));
  out.push_back(static_cast<std::uint8_t>(id_len));
  put_bytes(out, j.id.data(), id_len);
  return out;
}

decode_result decode_job(const std::uint8_t* data, std::size_t size, job_identity& out) {
  if (size < job_head_bytes) return {};
  const std::uint32_t world_size = get_u32(data);
  if (world_size > static_cast<std::uint32_t>(std::numeric_limits<int>::max())) {
    return malformed("world size " + std::to_string(world_size) + " does not fit an int");
  }
  const std::size_t id_len = data[4];
  if (size < job_head_bytes + id_len) return {};
  out.world_size = static_cast<int>(world_size);
  out.id.assign(reinterpret_cast<const char*>(data + job_head_bytes), id_len);
  return {decode_status::complete, job_head_bytes + id_len, {}};
}

bytes encode_greeting(const greeting& g) {
  bytes out;
  out.reserve(greeting_head_bytes + job_head_bytes + g.job.id.size());
  put_bytes(out, magic.data(), magic.size());
  out.push_back(g.version);
  out.push_back(static_cast<std::uint8_t>(g.status));
  out.push_back(g.auth ? 1 : 0);
  put_bytes(out, g.server_nonce.data(), g.server_nonce.size());
  const bytes job = encode_job(g.job);
  out.insert(out.end(), job.begin(), job.end());
  return out;
}

bool decode_greeting_head(const std::uint8_t* data, greeting& out) {
  if (!std::equal(magic.begin(), magic.end(), data)) return false;
  out.version = data[4];
  out.status = static_cast<handshake_status>(data[5]);
  out.auth = data[6] != 0;
  std::copy(data + 7, data + 7 + nonce_bytes, out.server_nonce.begin());
  return true;
}

bytes encode_hello(const hello& h) {
  bytes out;
  out.reserve(hello_head_bytes + job_head_bytes + h.job.id.size());
  put_bytes(out, magic.data(), magic.size());
  out.push_back(h.version);
  out.push_back(h.auth ? 1 : 0);
  put_bytes(out, h.client_nonce.data(), h.client_nonce.size());
  const bytes job = encode_job(h.job);
  out.insert(out.end(), job.begin(), job.end());
  return out;
}

decode_result decode_hello(const std::uint8_t* data, std::size_t size, hello& out) {
  // The magic is judged as soon as its bytes are there: a stranger is not kept waiting for more.
  if (!std::equal(data, data + std::min(size, magic.size()), magic.begin())) {
    return malformed("it does not speak the DistComm store protocol");
  }
  if (size < hello_head_bytes) return {};
  out = hello{};
  out.version = data[4];
  out.auth = data[5] != 0;
  std::copy(data + 6, data + 6 + nonce_bytes, out.client_nonce.begin());
  if (out.version != protocol_version) return {decode_status::complete, hello_head_bytes, {}};
  decode_result job = decode_job(data + hello_head_bytes, size - hello_head_bytes, out.job);
  if (job.status == decode_status::complete) job.consumed += hello_head_bytes;
  return job;
}

const char* to_string(command c) noexcept {
  switch (c) {
    case command::set:
      return "set";
    case command::get:
      return "get";
    case command::add:
      return "add";
    case command::check:
      return "check";
    case command::wait:
      return "wait";
    case command::compare_set:
      return "compare_set";
    case command::hold:
      return "hold";
  }
  return "unknown";
}

std::size_t max_value_field(command c) noexcept {
  switch (c) {
    case command::set:
    case command::hold:
      return store_max_value_bytes;
    case command::get:
      return 4;
    case command::add:
      return 8;
    case command::check:
      return max_key_list_bytes;
    case command::wait:
      return 4 + max_key_list_bytes;
    case command::compare_set:
      return 4 + 2 * store_max_value_bytes;
  }
  return 0;
}

bytes encode_key_list(const std::vector<std::string>& keys) {
  bytes out;
  std::size_t total = 4;
  for (const auto& k : keys) total += 4 + k.size();
  out.reserve(total);
  put_u32(out, static_cast<std::uint32_t>(keys.size()));
  for (const auto& k : keys) {
    put_u32(out, static_cast<std::uint32_t>(k.size()));
    put_bytes(out, k.data(), k.size());
  }
  return out;
}

bool decode_key_list(const std::uint8_t* data, std::size_t size, std::vector<std::string>& out) {
  out.clear();
  if (size < 4 || size > max_key_list_bytes) return false;
  const std::uint32_t count = get_u32(data);
  std::size_t pos = 4;
  // Every key takes at least its 4-byte length: a count the buffer cannot hold is a lie, and must
  // not drive an allocation.
  if (count > (size - pos) / 4) return false;
  out.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    if (size - pos < 4) return false;
    const std::uint32_t len = get_u32(data + pos);
    pos += 4;
    if (len > store_max_key_bytes || len > size - pos) return false;
    out.emplace_back(reinterpret_cast<const char*>(data + pos), len);
    pos += len;
  }
  return pos == size;
}

decode_result decode_request(const std::uint8_t* data, std::size_t size, request& out) {
  if (size < 1) return {};
  if (!known_command(data[0])) return malformed("unknown command " + std::to_string(data[0]));
  const auto cmd = static_cast<command>(data[0]);
  if (size < 5) return {};
  const std::uint32_t key_len = get_u32(data + 1);
  if (key_len > store_max_key_bytes) {
    return malformed("key of " + std::to_string(key_len) + " bytes is above the limit of " +
                     std::to_string(store_max_key_bytes) + " bytes");
  }
  if ((cmd == command::check || cmd == command::wait) && key_len != 0) {
    return malformed(std::string(to_string(cmd)) + " carries its keys in the value field");
  }
  const std::size_t value_len_at = 5 + std::size_t{key_len};
  if (size < value_len_at + 4) return {};
  const std::uint32_t value_len = get_u32(data + value_len_at);
  if (value_len > max_value_field(cmd)) {
    return malformed("value field of " + std::to_string(value_len) +
                     " bytes is above the limit of " + std::to_string(max_value_field(cmd)) +
                     " bytes for " + to_string(cmd));
  }
  if ((cmd == command::get && value_len != 4) || (cmd == command::add && value_len != 8) ||
      (cmd == command::wait && value_len < 4) || (cmd == command::compare_set && value_len < 4)) {
    return malformed("value field of " + std::to_string(value_len) + " bytes does not fit " +
                     to_string(cmd));
  }
  const std::size_t frame = value_len_at + 4 + value_len;
  if (size < frame) return {};

  const std::uint8_t* value = data + value_len_at + 4;
  out = request{};
  out.cmd = cmd;
  out.key.assign(reinterpret_cast<const char*>(data + 5), key_len);
  switch (cmd) {
    case command::set:
    case command::hold:
      out.value.assign(value, value + value_len);
      break;
    case command::get:
      out.timeout_ms = get_u32(value);
      break;
    case command::add:
      out.delta = static_cast<std::int64_t>(get_u64(value));
      break;
    case command::check:
      if (!decode_key_list(value, value_len, out.keys)) return malformed("bad key list in check");
      break;
    case command::wait:
      out.timeout_ms = get_u32(value);
      if (!decode_key_list(value + 4, value_len - 4, out.keys)) {
        return malformed("bad key list in wait");
      }
      break;
    case command::compare_set: {
      const std::uint32_t expected_len = get_u32(value);
      const std::size_t rest = value_len - 4;
      if (expected_len > rest || expected_len > store_max_value_bytes ||
          rest - expected_len > store_max_value_bytes) {
        return malformed("bad expected/desired lengths in compare_set");
      }
      out.expected.assign(value + 4, value + 4 + expected_len);
      out.value.assign(value + 4 + expected_len, value + value_len);
      break;
    }
  }
  return {decode_status::complete, frame, {}};
}

bytes encode_request(const request& r) {
  bytes field;
  switch (r.cmd) {
    case command::set:
    case command::hold:
      field = r.value;
      break;
    case command::get:
      put_u32(field, r.timeout_ms);
      break;
    case command::add:
      put_u64(field, static_cast<std::uint64_t>(r.delta));
      break;
    case command::check:
      field = encode_key_list(r.keys);
      break;
    case command::wait: {
      put_u32(field, r.timeout_ms);
      const bytes list = encode_key_list(r.keys);
      field.insert(field.end(), list.begin(), list.end());
      break;
    }
    case command::compare_set:
      put_u32(field, static_cast<std::uint32_t>(r.expected.size()));
      field.insert(field.end(), r.expected.begin(), r.expected.end());
      field.insert(field.end(), r.value.begin(), r.value.end());
      break;
  }
  const bool keyless = r.cmd == command::check || r.cmd == command::wait;
  const std::size_t key_len = keyless ? 0 : r.key.size();
  bytes out;
  out.reserve(1 + 4 + key_len + 4 + field.size());
  out.push_back(static_cast<std::uint8_t>(r.cmd));
  put_u32(out, static_cast<std::uint32_t>(key_len));
  put_bytes(out, r.key.data(), key_len);
  put_u32(out, static_cast<std::uint32_t>(field.size()));
  out.insert(out.end(), field.begin(), field.end());
  return out;
}

bytes encode_response(response_status s, const std::uint8_t* payload, std::size_t size) {
  // Sized up front and filled in place (also keeps GCC 12's -Wfree-nonheap-object quiet).
  bytes out(response_header_bytes + size);
  out[0] = static_cast<std::uint8_t>(s);
  const auto n = static_cast<std::uint32_t>(size);
  for (int i = 0; i < 4; ++i) out[1 + i] = static_cast<std::uint8_t>(n >> (24 - 8 * i));
  if (size) std::memcpy(out.data() + response_header_bytes, payload, size);
  return out;
}

bool decode_response_header(const std::uint8_t* data, response_status& status,
                            std::uint32_t& payload_size) {
  if (data[0] > static_cast<std::uint8_t>(response_status::error)) return false;
  status = static_cast<response_status>(data[0]);
  payload_size = get_u32(data + 1);
  return payload_size <= max_response_payload;
}

}  // namespace distcomm::detail::store_protocol
