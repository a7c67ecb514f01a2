#include "checkpoint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace train_mlp {
namespace {

constexpr char checkpoint_magic[8] = {'D', 'C', 'M', 'L', 'P', 'C', 'K', 'P'};
constexpr char params_magic[8] = {'D', 'C', 'M', 'L', 'P', 'P', 'R', 'M'};
constexpr std::uint32_t format_version = 1;
constexpr std::size_t checkpoint_header_bytes = 136;
constexpr std::size_t params_header_bytes = 24;

class encoder {
 public:
  void bytes(const char* p, std::size_t n) { out_.append(p, n); }
  void u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void u64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void floats(const std::vector<float>& v) {
    for (float f : v) {
      std::uint32_t u;
      std::memcpy(&u, &f, sizeof u);
      u32(u);
    }
  }
  std::string& str() noexcept { return out_; }

 private:
  std::string out_;
};

// Reads what encoder wrote; callers check the size first, so reads never run past the end.
class decoder {
 public:
  explicit decoder(const std::string& in) : in_(in) {}
  bool magic_is(const char (&m)[8]) {
    const bool same = in_.compare(at_, 8, m, 8) == 0;
    at_ += 8;
    return same;
  }
  std::uint32_t u32() { return static_cast<std::uint32_t>(take(4)); }
  std::uint64_t u64() { return take(8); }
  std::vector<float> floats(std::size_t n) {
    std::vector<float> v(n);
    for (float& f : v) {
      const std::uint32_t u = u32();
      std::memcpy(&f, &u, sizeof f);
    }
    return v;
  }

 private:
  std::uint64_t take(int n) {
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) {
      v |= static_cast<std::uint64_t>(static_cast<unsigned char>(in_[at_ + i])) << (8 * i);
    }
    at_ += static_cast<std::size_t>(n);
    return v;
  }

  const std::string& in_;
  std::size_t at_ = 0;
};

std::uint64_t fnv1a(const char* p, std::size_t n) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (std::size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(p[i]);
    h *= 0x100000001b3ULL;
  }
  return h;
}

[[noreturn]] void fail_errno(const std::string& what, const std::string& path) {
  throw std::runtime_error(what + " " + path + ": " + std::strerror(errno));
}

void write_all(int fd, const std::string& bytes, const std::string& path) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_errno("cannot write", path);
    done += static_cast<std::size_t>(n);
  }
}

void write_atomically(const std::string& path, const std::string& bytes) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  // Same directory, so that rename() replaces the target in one step (never across file systems).
  std::string tmp = (dir / ("." + target.filename().string() + ".tmp.XXXXXX")).string();
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) fail_errno("cannot create a temporary file in", dir.string());
  try {
    write_all(fd, bytes, tmp);
    if (::fsync(fd) != 0) fail_errno("cannot fsync", tmp);
    // mkstemp makes the file private (0600); give it the mode of an ordinary new file.
    if (::fchmod(fd, 0644) != 0) fail_errno("cannot chmod", tmp);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    fail_errno("cannot close", tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int saved = errno;
    ::unlink(tmp.c_str());
    errno = saved;
    fail_errno("cannot rename " + tmp + " to", path);
  }
  // The rename itself is durable only once the directory is.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd < 0) fail_errno("cannot open directory", dir.string());
  const int rc = ::fsync(dfd);
  ::close(dfd);
  if (rc != 0) fail_errno("cannot fsync directory", dir.string());
}

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_errno(std::string("cannot open ") + what, path);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail_errno(std::string("cannot read ") + what, path);
  return bytes;
}

[[noreturn]] void bad_checkpoint(const std::string& path, const std::string& why) {
  throw std::runtime_error("checkpoint " + path + ": " + why);
}

std::string size_mismatch(std::size_t have, std::size_t want, const std::string& unit) {
  if (have < want) {
    return "truncated: " + std::to_string(have) + " bytes, expected " + std::to_string(want) +
           " for " + unit;
  }
  return std::to_string(have - want) + " bytes too long: " + std::to_string(have) +
         " bytes, expected " + std::to_string(want) + " for " + unit;
}

// `written with WHAT FILE, this run has RUN; FIX`: a setting that must not change on resume.
std::string mismatch(const char* what, std::uint64_t file, std::uint64_t run, const char* fix) {
  return "written with " + std::string(what) + " " + std::to_string(file) + ", this run has " +
         std::to_string(run) + "; " + fix;
}

}  // namespace

void write_checkpoint(const std::string& path, const checkpoint& c) {
  encoder e;
  e.bytes(checkpoint_magic, 8);
  e.u32(format_version);
  e.u32(0);
  e.u64(c.id.shape.inputs);
  e.u64(c.id.shape.hidden1);
  e.u64(c.id.shape.hidden2);
  e.u64(c.id.shape.classes);
  e.u64(c.id.seed);
  e.u64(c.id.samples);
  e.u64(c.id.global_batch);
  e.u64(c.position.epoch);
  e.u64(c.position.step);
  e.u64(c.position.global_step);
  for (std::uint64_t w : c.position.epoch_rng) e.u64(w);
  e.u64(c.params.size());
  e.floats(c.params);
  e.floats(c.velocity);
  e.u64(fnv1a(e.str().data(), e.str().size()));
  write_atomically(path, e.str());
}

checkpoint read_checkpoint(const std::string& path, const run_identity& expected) {
  const std::string bytes = read_file(path, "checkpoint");
  if (bytes.size() < checkpoint_header_bytes) {
    bad_checkpoint(path, "truncated: " + std::to_string(bytes.size()) +
                             " bytes, shorter than the " + std::to_string(checkpoint_header_bytes) +
                             "-byte header");
  }
  decoder d(bytes);
  if (!d.magic_is(checkpoint_magic)) {
    bad_checkpoint(path, "not a distcomm-train-mlp checkpoint (no DCMLPCKP magic)");
  }
  const std::uint32_t version = d.u32();
  if (version != format_version) {
    bad_checkpoint(path, "format version " + std::to_string(version) +
                             ", this program reads version " + std::to_string(format_version));
  }
  d.u32();
  checkpoint c;
  c.id.shape.inputs = d.u64();
  c.id.shape.hidden1 = d.u64();
  c.id.shape.hidden2 = d.u64();
  c.id.shape.classes = d.u64();
  c.id.seed = d.u64();
  c.id.samples = d.u64();
  c.id.global_batch = d.u64();
  c.position.epoch = d.u64();
  c.position.step = d.u64();
  c.position.global_step = d.u64();
  for (std::uint64_t& w : c.position.epoch_rng) w = d.u64();
  const std::uint64_t count = d.u64();

  const std::string net = c.id.shape.to_string();
  if (net != expected.shape.to_string()) {
    bad_checkpoint(
        path, "written for a " + net + " network, this run builds " + expected.shape.to_string());
  }
  const std::size_t want_count = mlp(expected.shape).parameter_count();
  if (count != want_count) {
    bad_checkpoint(path, "corrupt: it holds " + std::to_string(count) + " parameters, a " + net +
                             " network has " + std::to_string(want_count));
  }
  const std::size_t want_bytes = checkpoint_header_bytes + 8 * count + 8;
  if (bytes.size() != want_bytes) {
    bad_checkpoint(path, size_mismatch(bytes.size(), want_bytes,
                                       std::to_string(count) + " parameters and their momentum"));
  }
  c.params = d.floats(count);
  c.velocity = d.floats(count);
  if (d.u64() != fnv1a(bytes.data(), want_bytes - 8)) {
    bad_checkpoint(path, "corrupt: the hash of its contents does not match");
  }
  if (c.id.seed != expected.seed) {
    bad_checkpoint(path, mismatch("--seed", c.id.seed, expected.seed,
                                  "the data set follows from the seed: pass the checkpoint's"));
  }
  if (c.id.samples != expected.samples) {
    bad_checkpoint(path,
                   mismatch("--samples", c.id.samples, expected.samples, "pass the checkpoint's"));
  }
  if (c.id.global_batch != expected.global_batch) {
    bad_checkpoint(path, mismatch("a global batch (ranks x --batch-size) of", c.id.global_batch,
                                  expected.global_batch,
                                  "the position in the epoch counts global batches: resume with "
                                  "the same global batch"));
  }
  return c;
}

void write_params(const std::string& path, const std::vector<float>& params) {
  encoder e;
  e.bytes(params_magic, 8);
  e.u32(format_version);
  e.u32(0);
  e.u64(params.size());
  e.floats(params);
  write_atomically(path, e.str());
}

std::vector<float> read_params(const std::string& path) {
  const std::string bytes = read_file(path, "parameter file");
  const auto bad = [&](const std::string& why) {
    throw std::runtime_error("parameter file " + path + ": " + why);
  };
  if (bytes.size() < params_header_bytes) bad("truncated: shorter than its header");
  decoder d(bytes);
  if (!d.magic_is(params_magic)) bad("not a distcomm-train-mlp parameter file");
  if (d.u32() != format_version) bad("unknown format version");
  d.u32();
  const std::uint64_t count = d.u64();
  if (count > bytes.size() / 4) {
    bad("truncated: " + std::to_string(bytes.size()) + " bytes cannot hold the " +
        std::to_string(count) + " values its header announces");
  }
  const std::size_t want = params_header_bytes + 4 * count;
  if (bytes.size() != want) bad(size_mismatch(bytes.size(), want, std::to_string(count) + " f32"));
  return d.floats(count);
}

}  // namespace train_mlp
