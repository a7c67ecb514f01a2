// The backend suite on the shm backend, under distcomm-run: one rank per process, every backend
// connected through the job's store from distcomm::bootstrap().
#define DOCTEST_CONFIG_IMPLEMENT
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "context.hpp"
#include "distcomm/backends/shm.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"

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

// The names in /dev/shm of this process's segments (distcomm-shm.<uid>.<pid>.<n>).
static std::vector<std::string> own_segments() {
  std::vector<std::string> found;
  const std::string mine =
      "distcomm-shm." + std::to_string(::getuid()) + "." + std::to_string(::getpid()) + ".";
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
