// The backend suite on the shm backend, under distcomm-run: one rank per process, every backend
// connected through the job's store from distcomm::bootstrap().
#define DOCTEST_CONFIG_IMPLEMENT
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "context.hpp"
#include "distcomm/backends/shm.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"
#include "segment.hpp"  // the shared layout, to overwrite words of it

namespace {

const distcomm::job* the_job = nullptr;
distcomm::shm_options the_options;

struct shm_env {
  using backend = distcomm::shm_backend;
  // A destroyed receive that no message matched yet is retracted (backends/shm/src/shm.cpp).
  static constexpr bool cancel_retracts = true;

  static void run(const std::function<void(backend_suite::rank_context<backend>&)>& body) {
    backend_suite::rank_context<backend> ctx{the_job->world.rank, the_job->world.size, [] {
                                               return distcomm::shm_backend(*the_job, the_options);
                                             }};
    body(ctx);
  }
};

}  // namespace

// "<uid>.<pid namespace>.<pid>.": what the names of this process's segments carry.
static std::string own_name_part() {
  char ns[128] = {};
  const ssize_t n = ::readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
  std::string id;
  for (ssize_t i = 0; i < n; ++i) {
    if (ns[i] >= '0' && ns[i] <= '9') id += ns[i];
  }
  return std::to_string(::geteuid()) + "." + id + "." + std::to_string(::getpid()) + ".";
}

// The names in /dev/shm of this process's segments
// (distcomm-shm.<uid>.<pid namespace>.<pid>.<n>.<random>).
static std::vector<std::string> own_segments() {
  std::vector<std::string> found;
  const std::string mine = "distcomm-shm." + own_name_part();
  if (DIR* dir = ::opendir("/dev/shm")) {
    while (const dirent* e = ::readdir(dir)) {
      if (std::string(e->d_name).rfind(mine, 0) == 0) found.emplace_back(e->d_name);
    }
    ::closedir(dir);
  }
  return found;
}

TEST_CASE("shm: a connected backend leaves no name in /dev/shm; the memory stays usable") {
  std::vector<distcomm::shm_backend> made;
  for (int i = 0; i < 2; ++i) made.push_back(distcomm::shm_backend(*the_job, the_options));
  CHECK(own_segments().empty());
  const auto until = distcomm::deadline_after(std::chrono::seconds(30));
  std::vector<double> v(1000, the_job->world.rank + 1.0);
  made[1].native_allreduce(v.data(), v.data(), v.size(), distcomm::dtype::f64,
                           distcomm::reduce_op::sum, until);
  const int p = the_job->world.size;
  CHECK(v.front() == p * (p + 1) / 2.0);
  CHECK(v.back() == p * (p + 1) / 2.0);
  made[0].native_barrier(until);
}

// The large collectives read the peers' buffers straight from their processes where every rank
// may (copy_path()): the same bits as the staged path, in place and out of place, at sizes that
// take several pieces and leave some ranks an uneven share.
TEST_CASE("shm: single copy gives the staged path's bits") {
  namespace bs = backend_suite;
  distcomm::shm_options staged_opts = the_options, single_opts = the_options;
  staged_opts.single_copy = false;
  single_opts.single_copy = true;
  distcomm::shm_backend single(*the_job, single_opts);
  distcomm::shm_backend staged(*the_job, staged_opts);
  CHECK(staged.copy_path().rfind("copy in/out", 0) == 0);
  if (single.copy_path().rfind("single copy", 0) != 0) {
    MESSAGE("single copy not allowed here, skipped: " << single.copy_path());
    return;
  }
  const auto until = distcomm::deadline_after(std::chrono::seconds(60));
  const int r = the_job->world.rank, p = the_job->world.size;
  const auto pp = static_cast<std::size_t>(p);
  using distcomm::dtype;
  using distcomm::reduce_op;
  for (dtype t : {dtype::f32, dtype::f64, dtype::bf16}) {
    const std::size_t es = distcomm::dtype_size(t);
    const std::size_t count = (std::size_t{3} << 20) / es + 7;  // 3 MiB and a bit
    std::vector<unsigned char> in(count * es);
    for (std::size_t i = 0; i < count; ++i) bs::put(in.data(), i, t, bs::random_input(r, i, t));
    for (reduce_op op : {reduce_op::sum, reduce_op::avg, reduce_op::max}) {
      CAPTURE(distcomm::to_string(t));
      CAPTURE(distcomm::to_string(op));
      std::vector<unsigned char> want(count * es), got(count * es), in_place = in;
      staged.native_allreduce(in.data(), want.data(), count, t, op, until);
      single.native_allreduce(in.data(), got.data(), count, t, op, until);
      CHECK(got == want);
      single.native_allreduce(in_place.data(), in_place.data(), count, t, op, until);
      CHECK(in_place == want);
    }
  }
  // allgather, alltoall and broadcast: exact values, one block per rank.
  const std::size_t block = (std::size_t{300} << 10) / 4 + 3;  // floats
  std::vector<float> mine(block), all(block * pp), sent(block * pp), got(block * pp);
  for (std::size_t i = 0; i < block; ++i) mine[i] = static_cast<float>(r * 1000003 + i);
  single.native_allgather(mine.data(), all.data(), block, dtype::f32, until);
  std::size_t wrong = 0;
  for (std::size_t q = 0; q < pp; ++q) {
    for (std::size_t i = 0; i < block; ++i) wrong += all[q * block + i] != q * 1000003.0f + i;
  }
  CHECK(wrong == 0);
  for (std::size_t q = 0; q < pp; ++q) {
    for (std::size_t i = 0; i < block; ++i) sent[q * block + i] = static_cast<float>(r * 7 + q) + i;
  }
  for (distcomm::shm_backend* b : {&single, &staged}) {
    std::fill(got.begin(), got.end(), -1.0f);
    b->native_alltoall(sent.data(), got.data(), block, dtype::f32, until);
    wrong = 0;
    for (std::size_t q = 0; q < pp; ++q) {
      for (std::size_t i = 0; i < block; ++i) {
        wrong += got[q * block + i] != static_cast<float>(q * 7 + static_cast<std::size_t>(r)) + i;
      }
    }
    CHECK_MESSAGE(wrong == 0, b->copy_path());
  }
  const int root = 1 % p;
  std::vector<float> data(block * pp, static_cast<float>(r));
  single.native_broadcast(data.data(), data.size(), dtype::f32, root, until);
  CHECK(std::count(data.begin(), data.end(), static_cast<float>(root)) ==
        static_cast<std::ptrdiff_t>(data.size()));
  single.native_barrier(until);
  staged.native_barrier(until);
}

// DISTCOMM_SHM_SINGLE_COPY: on or off, anything else refused before the store is touched.
TEST_CASE("shm: DISTCOMM_SHM_SINGLE_COPY is read, and a bad value named") {
  const char* before = std::getenv("DISTCOMM_SHM_SINGLE_COPY");
  const std::string saved = before != nullptr ? before : "";
  ::setenv("DISTCOMM_SHM_SINGLE_COPY", "maybe", 1);
  try {
    distcomm::shm_backend b(*the_job, the_options);
    FAIL("a bad DISTCOMM_SHM_SINGLE_COPY was accepted");
  } catch (const distcomm::invalid_argument_error& e) {
    CHECK(std::string(e.what()).find("DISTCOMM_SHM_SINGLE_COPY is 'maybe'") != std::string::npos);
  }
  ::setenv("DISTCOMM_SHM_SINGLE_COPY", "off", 1);
  {
    distcomm::shm_backend b(*the_job, the_options);
    CHECK(b.copy_path() == "copy in/out");
  }
  if (before != nullptr) {
    ::setenv("DISTCOMM_SHM_SINGLE_COPY", saved.c_str(), 1);
  } else {
    ::unsetenv("DISTCOMM_SHM_SINGLE_COPY");
  }
}

// A chunk must hold alltoallv's table of counts and a slot of one element for each other rank:
// at 172 ranks and more a 4 KiB chunk is refused at connect, naming the setting and the floor
// for the world (64 bytes a rank), before any store is needed.
TEST_CASE("shm: a DISTCOMM_SHM_CHUNK too small for the world's alltoallv is named at connect") {
  for (const int ranks : {172, 257}) {
    CAPTURE(ranks);
    distcomm::shm_options o = the_options;
    o.chunk_bytes = 4096;
    try {
      distcomm::shm_backend b(nullptr, 0, ranks, o);
      FAIL("a chunk too small for the world was accepted");
    } catch (const distcomm::invalid_argument_error& e) {
      CHECK(std::string(e.what()).find("DISTCOMM_SHM_CHUNK is 4096 bytes; it must be at least " +
                                       std::to_string(64 * ranks)) != std::string::npos);
    }
  }
}

// The ring and chunk sizes are range-checked before anything is made: "max" (the largest size)
// once wrapped round to a ring of 0 bytes and a division by zero.
TEST_CASE("shm: DISTCOMM_SHM_RING and DISTCOMM_SHM_CHUNK out of range are named") {
  for (const char* variable : {"DISTCOMM_SHM_RING", "DISTCOMM_SHM_CHUNK"}) {
    CAPTURE(variable);
    distcomm::shm_options o = the_options;
    o.ring_bytes = o.chunk_bytes = 0;
    const char* before = std::getenv(variable);
    const std::string saved = before != nullptr ? before : "";
    for (const char* value : {"max", "2G", "1K"}) {
      CAPTURE(value);
      ::setenv(variable, value, 1);
      try {
        distcomm::shm_backend b(*the_job, o);
        FAIL("an out-of-range size was accepted");
      } catch (const distcomm::invalid_argument_error& e) {
        CHECK(std::string(e.what()).find(std::string(variable) + " is ") != std::string::npos);
        CHECK(std::string(e.what()).find("at most 1073741824") != std::string::npos);
      }
    }
    if (before != nullptr) {
      ::setenv(variable, saved.c_str(), 1);
    } else {
      ::unsetenv(variable);
    }
  }
}

// The job's store as a local user who can write to it would make it (PyTorch's store has no
// authentication): every peer's published segment name reads as `planted`.
class planting_store final : public distcomm::store {
 public:
  planting_store(std::shared_ptr<distcomm::store> inner, int rank, std::string planted)
      : inner_(std::move(inner)), rank_(rank), planted_(std::move(planted)) {
    set_timeout(inner_->timeout());
  }
  void set(const std::string& k, const distcomm::bytes& v) override { inner_->set(k, v); }
  distcomm::bytes get(const std::string& k) override {
    distcomm::bytes v = inner_->get(k);
    const std::size_t at = k.rfind("/rank/");
    if (at == std::string::npos || k.substr(at + 6) == std::to_string(rank_)) return v;
    std::string text(v.begin(), v.end());
    text = planted_ + text.substr(std::min(text.find('\n'), text.size()));
    return distcomm::bytes(text.begin(), text.end());
  }
  std::int64_t add(const std::string& k, std::int64_t d) override { return inner_->add(k, d); }
  bool check(const std::vector<std::string>& k) override { return inner_->check(k); }
  void wait(const std::vector<std::string>& k) override { inner_->wait(k); }
  distcomm::bytes compare_set(const std::string& k, const distcomm::bytes& e,
                              const distcomm::bytes& d) override {
    return inner_->compare_set(k, e, d);
  }

 private:
  std::shared_ptr<distcomm::store> inner_;
  int rank_;
  std::string planted_;
};

// A segment another user made (here: as nobody), or one of this user's that others may write
// to, is never used, whatever the store says: every rank refuses it, naming owner and mode.
TEST_CASE("shm: a segment of another user, or open to others, is refused") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: needs root, to make a segment owned by nobody");
    return;
  }
  const int me = the_job->world.rank;
  const int p = the_job->world.size;
  struct planted_case {
    uid_t owner;
    mode_t mode;
    const char* says;
  };
  for (const planted_case c : {planted_case{65534, 0600, "belongs to uid 65534 with mode 0600"},
                               planted_case{0, 0666, "belongs to uid 0 with mode 0666"}}) {
    CAPTURE(c.says);
    const std::string name = "/distcomm-test-planted." + std::to_string(::getpid());
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, 1 << 20) == 0);
    REQUIRE(::fchown(fd, c.owner, c.owner) == 0);
    REQUIRE(::fchmod(fd, c.mode) == 0);
    ::close(fd);
    auto lying = std::make_shared<planting_store>(the_job->kv, me, name);
    try {
      distcomm::shm_backend b(lying, me, p, the_options);
      FAIL("a planted segment was used");
    } catch (const distcomm::invalid_argument_error& e) {
      CHECK(std::string(e.what()).find(name + " " + c.says) != std::string::npos);
      CHECK(std::string(e.what()).find("refusing it") != std::string::npos);
    }
    ::shm_unlink(name.c_str());
  }
  CHECK(own_segments().empty());  // the refusing ranks removed their own
}

// Segment names carry 128 random bits: nobody can make one before the rank that will.
TEST_CASE("shm: segment names cannot be guessed") {
  const std::string name = distcomm::detail::shm::fresh_name();
  const std::string again = distcomm::detail::shm::fresh_name();
  const std::string part = "/distcomm-shm." + own_name_part();
  REQUIRE(name.rfind(part, 0) == 0);
  const std::string random = name.substr(name.rfind('.') + 1);
  CHECK(random.size() == 32);
  CHECK(random.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(random != again.substr(again.rfind('.') + 1));
}

// Where this process's newest segment (the backend's made last) is mapped: its line in
// /proc/self/maps with the highest <n>.
static unsigned char* newest_segment() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  unsigned long best_start = 0;
  long best_n = -1;
  const std::string part = "distcomm-shm." + own_name_part();
  while (std::getline(maps, line)) {
    const std::size_t at = line.find(part);
    if (at == std::string::npos) continue;
    const long n = std::strtol(line.c_str() + at + part.size(), nullptr, 10);
    if (n > best_n) {
      best_n = n;
      best_start = std::strtoul(line.c_str(), nullptr, 16);
    }
  }
  REQUIRE(best_n >= 0);
  return reinterpret_cast<unsigned char*>(best_start);
}

// A peer's words in shared memory are bounds-checked before use: rank 1 overwrites the write
// position of its ring to rank 0 with garbage; rank 0's receive from it, and rank 1's own send,
// fail with peer_lost_error saying the memory was overwritten (before: a read past the ring).
TEST_CASE("shm: a ring whose words were overwritten is a named error, not a wild read") {
  const int me = the_job->world.rank;
  const int p = the_job->world.size;
  distcomm::shm_backend b(*the_job, the_options);
  const auto until = distcomm::deadline_after(std::chrono::seconds(20));
  if (me == 1) {
    namespace shm = distcomm::detail::shm;
    unsigned char* base = newest_segment();
    const auto round = [](std::size_t n) { return (n + shm::line - 1) / shm::line * shm::line; };
    auto* ring0 = reinterpret_cast<shm::ring_header*>(base + round(sizeof(shm::header)));
    ring0->head.store(0x7fffffffffffULL, std::memory_order_release);
    shm::bump(reinterpret_cast<shm::header*>(base)[0]);
  }
  if (me == 0 || me == 1) {
    std::vector<char> buf(4096);
    const int peer = 1 - me;
    try {
      auto r = me == 0 ? b.irecv(buf.data(), buf.size(), peer, 7)
                       : b.isend(buf.data(), buf.size(), peer, 7);
      r.wait(until);
      FAIL("the overwritten ring went unnoticed");
    } catch (const distcomm::peer_lost_error& e) {
      CHECK(std::string(e.what()).find("the ring from rank 1 to rank 0") != std::string::npos);
      CHECK(std::string(e.what()).find("overwritten") != std::string::npos);
    }
  }
  (void)p;
}

// A peer's message sizes are used only within what this process can hold: rank 1 forges a message
// header of 2^47 bytes into its ring to rank 0, on a tag rank 0 has no receive for (so it would
// be set aside); rank 0's receive fails with peer_lost_error naming the size, and rank 1's send
// with rank 0's reason (before: std::bad_alloc out of the backend).
TEST_CASE("shm: a message too large to set aside is a named error, not bad_alloc") {
  const int me = the_job->world.rank;
  distcomm::shm_backend b(*the_job, the_options);
  const auto until = distcomm::deadline_after(std::chrono::seconds(20));
  if (me == 1) {
    namespace shm = distcomm::detail::shm;
    unsigned char* base = newest_segment();
    const auto round = [](std::size_t n) { return (n + shm::line - 1) / shm::line * shm::line; };
    const std::size_t cap = reinterpret_cast<shm::header*>(base)->ring_bytes;
    auto* ring0 = reinterpret_cast<shm::ring_header*>(base + round(sizeof(shm::header)));
    unsigned char* data = base + round(sizeof(shm::header)) + round(sizeof(shm::ring_header));
    const std::uint64_t head = ring0->head.load(std::memory_order_acquire);
    const std::uint64_t forged[2] = {99, std::uint64_t{1} << 47};  // tag, size
    for (std::size_t i = 0; i < sizeof forged; ++i) {
      data[(head + i) % cap] = reinterpret_cast<const unsigned char*>(forged)[i];
    }
    ring0->head.store(head + sizeof forged, std::memory_order_release);
    shm::bump(reinterpret_cast<shm::header*>(base)[0]);
  }
  if (me == 0 || me == 1) {
    std::vector<char> buf(4096);
    try {
      auto r = me == 0 ? b.irecv(buf.data(), buf.size(), 1, 7) : b.isend(buf.data(), 1, 0, 7);
      r.wait(until);
      if (me == 0) FAIL("the forged message went unnoticed");
    } catch (const distcomm::peer_lost_error& e) {
      CHECK(std::string(e.what()).find("140737488355328 bytes") != std::string::npos);
    }
  }
}

// The small alltoall goes through the staging areas in one arrival.
TEST_CASE("shm: native alltoall, small blocks") {
  distcomm::shm_backend b(*the_job, the_options);
  const auto until = distcomm::deadline_after(std::chrono::seconds(30));
  const int r = the_job->world.rank, p = the_job->world.size;
  for (std::size_t block : {std::size_t{1}, std::size_t{5}, std::size_t{4099}}) {
    std::vector<std::int32_t> sent(block * static_cast<std::size_t>(p)), got(sent.size(), -1);
    for (std::size_t i = 0; i < sent.size(); ++i) sent[i] = r * 100000 + static_cast<int>(i);
    b.native_alltoall(sent.data(), got.data(), block, distcomm::dtype::i32, until);
    std::size_t wrong = 0;
    for (int q = 0; q < p; ++q) {
      for (std::size_t i = 0; i < block; ++i) {
        const auto want = q * 100000 + static_cast<int>(static_cast<std::size_t>(r) * block + i);
        wrong += got[static_cast<std::size_t>(q) * block + i] != want;
      }
    }
    CHECK_MESSAGE(wrong == 0, "block " << block);
  }
}

// alltoallv through the segments: skewed messages from empty to several chunks, and a count
// one apart on one pair, named alike on every rank before anything is written.
TEST_CASE("shm: native alltoallv, skewed, and its counts checked") {
  distcomm::shm_backend b(*the_job, the_options);
  const auto until = distcomm::deadline_after(std::chrono::seconds(60));
  const int r = the_job->world.rank, p = the_job->world.size;
  const auto pp = static_cast<std::size_t>(p);
  // Rank q sends (q + 1) * (d + 2) * unit floats to rank d, none when q + d is 3.
  const auto count = [](std::size_t q, std::size_t d, std::size_t unit) {
    return q + d == 3 ? 0 : (q + 1) * (d + 2) * unit;
  };
  for (std::size_t unit : {std::size_t{1}, std::size_t{3000}, std::size_t{70000}}) {
    std::vector<std::size_t> sc(pp), sd(pp), rc(pp), rd(pp);
    std::size_t sent = 0, received = 0;
    for (std::size_t q = 0; q < pp; ++q) {
      sc[q] = count(static_cast<std::size_t>(r), q, unit);
      sd[q] = sent;
      sent += sc[q];
      rc[q] = count(q, static_cast<std::size_t>(r), unit);
      rd[q] = received;
      received += rc[q];
    }
    std::vector<float> in(sent), out(received + 1, -1.0f);
    for (std::size_t q = 0; q < pp; ++q) {
      for (std::size_t i = 0; i < sc[q]; ++i) in[sd[q] + i] = static_cast<float>(r * 10 + q) + i;
    }
    b.native_alltoallv(in.data(), sc.data(), sd.data(), out.data(), rc.data(), rd.data(),
                       distcomm::dtype::f32, until);
    std::size_t wrong = 0;
    for (std::size_t q = 0; q < pp; ++q) {
      for (std::size_t i = 0; i < rc[q]; ++i) {
        wrong += out[rd[q] + i] != static_cast<float>(q * 10 + static_cast<std::size_t>(r)) + i;
      }
    }
    CHECK_MESSAGE(wrong == 0, "unit " << unit);
    CHECK(out[received] == -1.0f);
    if (unit != 3000 || p < 2) continue;
    // Rank 1 expects one element fewer from rank 0 than rank 0 sends.
    if (r == 1) --rc[0];
    std::fill(out.begin(), out.end(), -1.0f);
    try {
      b.native_alltoallv(in.data(), sc.data(), sd.data(), out.data(), rc.data(), rd.data(),
                         distcomm::dtype::f32, until);
      FAIL("no mismatch_error");
    } catch (const distcomm::mismatch_error& e) {
      CHECK(std::string(e.what()).find("rank 0") != std::string::npos);
      CHECK(std::string(e.what()).find("rank 1") != std::string::npos);
    }
    CHECK(std::count(out.begin(), out.end(), -1.0f) == static_cast<std::ptrdiff_t>(out.size()));
  }
  b.native_barrier(until);  // usable after the mismatch
}

TYPE_TO_STRING_AS("shm", shm_env);
#define DISTCOMM_SUITE_ENVS shm_env
#include "suite.hpp"

int main(int argc, char** argv) {
  const distcomm::config cfg = distcomm::config::from_env();
  const distcomm::job j = distcomm::bootstrap(cfg);
  the_job = &j;
  the_options.timeout = cfg.timeout;
  doctest::Context ctx(argc, argv);  // every rank reports its own failures
  return ctx.run();
}
