// Store authentication: nonces and HMAC-SHA256 proofs (OpenSSL libcrypto), and where the token
// and the store address come from (DISTCOMM_AUTH_TOKEN, DISTCOMM_AUTH_TOKEN_FILE,
// DISTCOMM_STORE_ADDR).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <system_error>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "distcomm/config.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/log.hpp"
#include "distcomm/rendezvous/tcp_store.hpp"
#include "store_protocol.hpp"

namespace distcomm {
namespace detail::store_protocol {
namespace {

constexpr char server_label[] = "distcomm-store-v1 server";
constexpr char client_label[] = "distcomm-store-v1 client";

mac hmac_of(const std::string& token, const nonce& first, const nonce& second, const char* label) {
  std::string message(first.begin(), first.end());
  message.append(second.begin(), second.end());
  message.append(label);
  mac out{};
  unsigned int len = 0;
  const unsigned char* r = HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
                                reinterpret_cast<const unsigned char*>(message.data()),
                                message.size(), out.data(), &len);
  if (!r || len != out.size()) {
    throw error("tcp_store: HMAC-SHA256 failed in OpenSSL (libcrypto)");
  }
  return out;
}

}  // namespace

nonce random_nonce() {
  nonce n{};
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1) {
    throw error("tcp_store: OpenSSL RAND_bytes could not produce a nonce (no entropy source?)");
  }
  return n;
}

mac server_mac(const std::string& token, const nonce& client_nonce, const nonce& server_nonce) {
  return hmac_of(token, client_nonce, server_nonce, server_label);
}

mac client_mac(const std::string& token, const nonce& server_nonce, const nonce& client_nonce) {
  return hmac_of(token, server_nonce, client_nonce, client_label);
}

bool same_mac(const mac& a, const mac& b) noexcept {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace detail::store_protocol

namespace {

// Shorter tokens are open to offline guessing by anyone who records one handshake.
constexpr std::size_t min_recommended_token = 16;
// A token file is a few dozen bytes; anything this large is the wrong file.
constexpr std::size_t max_token_file = 64 * 1024;

std::string read_token_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw rendezvous_error("DISTCOMM_AUTH_TOKEN_FILE=" + path +
                           " cannot be read: " + std::system_category().message(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw rendezvous_error("DISTCOMM_AUTH_TOKEN_FILE=" + path + " is not a regular file");
  }
  if ((st.st_mode & 077) != 0) {
    // A warning, not a refusal: Kubernetes mounts secrets 0644 by default, and on a private node
    // that is still private.
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    log(log_level::warn, "DISTCOMM_AUTH_TOKEN_FILE=" + path + " is accessible to group or others" +
                             " (mode " + mode + "); chmod 600 it so only you can read the token");
  }
  std::string token;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      throw rendezvous_error("DISTCOMM_AUTH_TOKEN_FILE=" + path +
                             " cannot be read: " + std::system_category().message(e));
    }
    if (n == 0) break;
    token.append(buf, static_cast<std::size_t>(n));
    if (token.size() > max_token_file) {
      ::close(fd);
      throw rendezvous_error("DISTCOMM_AUTH_TOKEN_FILE=" + path +
                             " is larger than 64 KiB: is it really the token?");
    }
  }
  ::close(fd);
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  if (token.empty()) {
    throw rendezvous_error("DISTCOMM_AUTH_TOKEN_FILE=" + path +
                           " is empty: write the token into it, or unset the variable to run"
                           " without authentication");
  }
  return token;
}

}  // namespace

std::string random_token(std::size_t bytes) {
  std::string raw(bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()), static_cast<int>(raw.size())) != 1) {
    throw error("cannot make a random token: OpenSSL RAND_bytes failed (no entropy source?)");
  }
  static constexpr char digits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * raw.size());
  for (const char c : raw) {
    const auto b = static_cast<unsigned char>(c);
    hex.push_back(digits[b >> 4]);
    hex.push_back(digits[b & 0xf]);
  }
  OPENSSL_cleanse(raw.data(), raw.size());
  return hex;
}

std::string auth_token_from_env(const env_lookup& getenv) {
  const char* value = config::read_variable("DISTCOMM_AUTH_TOKEN", getenv);
  const char* file = config::read_variable("DISTCOMM_AUTH_TOKEN_FILE", getenv);
  if (value && file) {
    throw rendezvous_error(
        "both DISTCOMM_AUTH_TOKEN and DISTCOMM_AUTH_TOKEN_FILE are set: set only one");
  }
  std::string token;
  if (value) {
    // An empty token would silently turn authentication off; make that a decision, not an accident.
    if (!*value) {
      throw rendezvous_error(
          "DISTCOMM_AUTH_TOKEN is set but empty: give it a token, or unset it to run without "
          "authentication");
    }
    token = value;
  } else if (file) {
    if (!*file) {
      throw rendezvous_error(
          "DISTCOMM_AUTH_TOKEN_FILE is set but empty: name the token file, or unset it");
    }
    token = read_token_file(file);
  } else {
    return {};
  }
  if (token.size() < min_recommended_token) {
    log(log_level::warn, "the store authentication token has " + std::to_string(token.size()) +
                             " characters; use at least " + std::to_string(min_recommended_token) +
                             " random ones (e.g. `openssl rand -hex 32`)");
  }
  return token;
}

std::string auth_token_from_env() { return auth_token_from_env(config::process_environment); }

std::optional<store_address> store_addr_from_env(const env_lookup& getenv) {
  const char* raw = config::read_variable("DISTCOMM_STORE_ADDR", getenv);
  if (!raw || !*raw) return std::nullopt;
  const std::string value = raw;
  const auto bad = [&](const std::string& why) {
    return rendezvous_error("DISTCOMM_STORE_ADDR='" + value + "' " + why +
                            " (expected host:port, e.g. 10.0.0.1:29500 or [::1]:29500)");
  };
  std::string host;
  std::string port_text;
  if (value.front() == '[') {
    const auto close = value.find(']');
    if (close == std::string::npos || close + 1 >= value.size() || value[close + 1] != ':') {
      throw bad("has an unterminated [IPv6] address or no port");
    }
    host = value.substr(1, close - 1);
    port_text = value.substr(close + 2);
  } else {
    const auto colon = value.rfind(':');
    if (colon == std::string::npos) throw bad("has no port");
    host = value.substr(0, colon);
    port_text = value.substr(colon + 1);
    if (host.find(':') != std::string::npos) throw bad("looks like an IPv6 address without []");
  }
  if (host.empty()) throw bad("has no host");
  if (port_text.empty() || port_text.size() > 5 ||
      port_text.find_first_not_of("0123456789") != std::string::npos) {
    throw bad("has a port that is not a number");
  }
  const int port = std::stoi(port_text);
  if (port < 1 || port > 65535) throw bad("has a port outside 1..65535");
  return store_address{host, port};
}

}  // namespace distcomm
