// libFuzzer target: arbitrary bytes into the tcp_store server's request decoder (and the other
// record decoders: the hello with its job, the job field, the greeting's head), exactly as the
// server feeds what it reads from a socket. The decoder must
// never crash, never read outside the buffer, never allocate more than the input can justify
// (lengths are checked against the 4 KiB / 16 MiB limits before anything is allocated), and be
// canonical: a frame it accepts re-encodes to the very same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "store_protocol.hpp"

namespace proto = distcomm::detail::store_protocol;

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

void check_request(const proto::request& r) {
  require(r.key.size() <= distcomm::store_max_key_bytes);
  require(r.value.size() <= distcomm::store_max_value_bytes);
  require(r.expected.size() <= distcomm::store_max_value_bytes);
  for (const auto& k : r.keys) require(k.size() <= distcomm::store_max_key_bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // A stream of frames, decoded one after the other as a connection's input buffer is.
  std::size_t pos = 0;
  while (pos < size) {
    proto::request r;
    const auto res = proto::decode_request(data + pos, size - pos, r);
    if (res.status != proto::decode_status::complete) {
      require(res.status == proto::decode_status::incomplete || !res.error.empty());
      break;
    }
    require(res.consumed > 0 && res.consumed <= size - pos);
    check_request(r);
    const distcomm::bytes again = proto::encode_request(r);
    require(again.size() == res.consumed);
    require(std::memcmp(again.data(), data + pos, again.size()) == 0);
    // Every proper prefix of a complete frame is merely incomplete (the server waits for more).
    if (res.consumed <= 64) {
      for (std::size_t k = 0; k < res.consumed; ++k) {
        proto::request partial;
        require(proto::decode_request(data + pos, k, partial).status ==
                proto::decode_status::incomplete);
      }
    }
    pos += res.consumed;
  }

  std::vector<std::string> keys;
  if (proto::decode_key_list(data, size, keys)) {
    const distcomm::bytes again = proto::encode_key_list(keys);
    require(again.size() == size && std::memcmp(again.data(), data, size) == 0);
  }
  if (size >= proto::response_header_bytes) {
    proto::response_status status{};
    std::uint32_t payload = 0;
    if (proto::decode_response_header(data, status, payload)) {
      require(payload <= proto::max_response_payload);
    }
  }
  if (size >= proto::greeting_head_bytes) {
    proto::greeting g;
    proto::decode_greeting_head(data, g);
  }
  // The hello as the server reads it from a connection (head, then the job of protocol 2): bounded
  // by max_hello_bytes, canonical, and every proper prefix of a complete one is incomplete.
  proto::hello h;
  const auto hr = proto::decode_hello(data, size, h);
  if (hr.status == proto::decode_status::complete) {
    require(hr.consumed <= proto::max_hello_bytes && hr.consumed <= size);
    require(h.job.world_size >= 0 && h.job.id.size() <= proto::max_job_id_bytes);
    if (h.version == proto::protocol_version) {
      // Canonical but for the auth flag, where any non-zero byte means "has a token".
      const distcomm::bytes again = proto::encode_hello(h);
      require(again.size() == hr.consumed);
      require(again[5] == (data[5] != 0 ? 1 : 0));
      require(std::memcmp(again.data(), data, 5) == 0);
      require(std::memcmp(again.data() + 6, data + 6, again.size() - 6) == 0);
    } else {
      require(hr.consumed == proto::hello_head_bytes);
    }
    for (std::size_t k = 0; k < hr.consumed; ++k) {
      proto::hello partial;
      require(proto::decode_hello(data, k, partial).status != proto::decode_status::complete);
    }
  } else if (hr.status == proto::decode_status::incomplete) {
    require(size < proto::max_hello_bytes);
  } else {
    require(!hr.error.empty());
  }
  distcomm::job_identity job;
  if (proto::decode_job(data, size, job).status == proto::decode_status::complete) {
    const distcomm::bytes again = proto::encode_job(job);
    require(again.size() <= size && std::memcmp(again.data(), data, again.size()) == 0);
  }
  return 0;
}
