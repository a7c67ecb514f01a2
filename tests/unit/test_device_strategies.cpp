// ring, tree and parameter_server on a device-memory backend, without a GPU. The backend below
// wraps the local backend; its "device" buffers live in an arena that is mprotect(PROT_NONE)
// except inside its own memory operations and its transfers, so any strategy code touching them
// from the host dies with SIGSEGV. Its sends and receives behave as NCCL's do: queued, issued as
// one group at the first wait, groups started one after the other, a request complete with its
// whole group, no tags (matched in posting order per pair of ranks). A posting order that would
// deadlock on NCCL therefore times out here.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "distcomm/distcomm.hpp"

namespace dc = distcomm;

namespace {

// Page-aligned memory, inaccessible except while an `access` is alive. Buffers are bump-allocated
// from the front; the scratch space the memory operations hand out is the last `scratch_bytes`.
class arena {
 public:
  static constexpr std::size_t scratch_bytes = std::size_t{1} << 20;

  explicit arena(std::size_t bytes) : size_(bytes + scratch_bytes) {
    void* p = mmap(nullptr, size_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap failed");
    base_ = static_cast<unsigned char*>(p);
  }
  ~arena() { munmap(base_, size_); }
  arena(const arena&) = delete;
  arena& operator=(const arena&) = delete;

  unsigned char* alloc(std::size_t bytes) {
    const std::size_t at = (used_ + 63) / 64 * 64;
    if (at + bytes > size_ - scratch_bytes) throw std::runtime_error("arena full");
    used_ = at + bytes;
    return base_ + at;
  }
  void reset() noexcept { used_ = 0; }
  unsigned char* scratch(std::size_t bytes) {
    if (bytes > scratch_bytes) throw std::runtime_error("scratch request too large");
    return base_ + size_ - scratch_bytes;
  }
  bool holds(const void* p, std::size_t bytes) const noexcept {
    const auto* c = static_cast<const unsigned char*>(p);
    return c >= base_ && c + bytes <= base_ + size_;
  }
  unsigned char* base() const noexcept { return base_; }

  // Opens the arena to this thread's code for its lifetime.
  class access {
   public:
    explicit access(arena& a) : a_(a), lock_(a.mutex_) { a_.protect(PROT_READ | PROT_WRITE); }
    ~access() { a_.protect(PROT_NONE); }
    access(const access&) = delete;
    access& operator=(const access&) = delete;

   private:
    arena& a_;
    std::lock_guard<std::mutex> lock_;
  };

 private:
  void protect(int prot) {
    if (mprotect(base_, size_, prot) != 0) std::abort();
  }
  unsigned char* base_ = nullptr;
  std::size_t size_;
  std::size_t used_ = 0;
  std::mutex mutex_;
};

// Throws unless [p, p + bytes) is device memory: strategies must never hand host memory to a
// device backend's transfers or operations.
void require_device(const arena& a, const void* p, std::size_t bytes, const char* what) {
  if (bytes != 0 && !a.holds(p, bytes)) {
    throw std::logic_error(std::string(what) + " was given host memory");
  }
}

struct transfer {
  bool send;
  unsigned char* device;
  std::size_t bytes;
  int peer;
  std::vector<unsigned char> staging;  // host copy: sent from, or received into
  dc::local_request request;
  bool done = false;
};

struct group {
  std::vector<std::shared_ptr<transfer>> transfers;
  bool issued = false;
  bool started = false;
  bool done = false;
};

struct guarded_state {
  guarded_state(dc::local_backend b, arena& a) : local(std::move(b)), memory(&a) {}

  // Issues everything queued as one group, behind the groups issued before it.
  void issue() {
    open->transfers = std::move(queued);
    queued.clear();
    open->issued = true;
    running.push_back(std::move(open));
    open.reset();
  }

  // Starts the oldest running group once the one before it completed, and completes groups.
  void progress() {
    while (!running.empty()) {
      group& g = *running.front();
      if (!g.started) {
        g.started = true;
        for (auto& t : g.transfers) {
          if (t->send) {
            arena::access open_arena(*memory);
            if (std::memcmp(t->staging.data(), t->device, t->bytes) != 0) {
              throw std::logic_error("a send buffer changed between isend and its transfer");
            }
            t->request = local.isend(t->staging.data(), t->bytes, t->peer, 0);  // NCCL: no tags
          } else {
            t->request = local.irecv(t->staging.data(), t->bytes, t->peer, 0);
          }
        }
      }
      bool all = true;
      for (auto& t : g.transfers) {
        if (!t->done) t->done = t->request.test();
        all = all && t->done;
      }
      if (!all) return;
      arena::access open_arena(*memory);
      for (auto& t : g.transfers) {
        if (!t->send && t->bytes != 0) std::memcpy(t->device, t->staging.data(), t->bytes);
      }
      g.done = true;
      running.pop_front();
    }
  }

  dc::local_backend local;
  arena* memory;
  std::vector<std::shared_ptr<transfer>> queued;
  std::shared_ptr<group> open;
  std::deque<std::shared_ptr<group>> running;
};

class guarded_request {
 public:
  guarded_request() = default;
  guarded_request(std::shared_ptr<guarded_state> s, std::shared_ptr<group> g)
      : state_(std::move(s)), group_(std::move(g)) {}

  bool test() {
    if (!group_ || group_->done) return true;
    if (!group_->issued) state_->issue();
    state_->progress();
    return group_->done;
  }
  void wait(dc::deadline until) {
    while (!test()) {
      if (dc::clock::now() >= until) {
        throw dc::timeout_error("guarded backend: a group did not complete (a deadlock on NCCL)");
      }
      std::this_thread::yield();
    }
  }

 private:
  std::shared_ptr<guarded_state> state_;
  std::shared_ptr<group> group_;
};

// The memory operations: the host kernels, run with the arena open, on arena memory only.
class guarded_memory {
 public:
  explicit guarded_memory(guarded_state& s) : s_(&s) {}
  void copy(void* dst, const void* src, std::size_t bytes) {
    check(dst, bytes);
    check(src, bytes);
    arena::access open_arena(*s_->memory);
    std::memmove(dst, src, bytes);
  }
  void combine(void* dst, const void* a, const void* b, std::size_t count, dc::dtype t,
               dc::reduce_op op) {
    const std::size_t bytes = count * dc::dtype_size(t);
    check(dst, bytes);
    check(a, bytes);
    check(b, bytes);
    arena::access open_arena(*s_->memory);
    dc::combine(dst, a, b, count, t, op);
  }
  void divide(void* dst, const void* src, std::size_t count, dc::dtype t, std::size_t divisor) {
    check(dst, count * dc::dtype_size(t));
    check(src, count * dc::dtype_size(t));
    arena::access open_arena(*s_->memory);
    dc::divide(dst, src, count, t, divisor);
  }
  void fold(void* dst, const void* const* in, std::size_t n, std::size_t count, dc::dtype t,
            dc::reduce_op op) {
    const std::size_t bytes = count * dc::dtype_size(t);
    check(dst, bytes);
    for (std::size_t i = 0; i < n; ++i) check(in[i], bytes);
    arena::access open_arena(*s_->memory);
    dc::fold(dst, in, n, count, t, op);
  }
  unsigned char* scratch(std::size_t bytes) { return s_->memory->scratch(bytes); }
  // A collective must not return with transfers still queued or running.
  void complete(dc::deadline) {
    if (!s_->queued.empty() || !s_->running.empty()) {
      throw std::logic_error("a collective returned with transfers pending");
    }
  }

 private:
  void check(const void* p, std::size_t bytes) { require_device(*s_->memory, p, bytes, "op"); }
  guarded_state* s_;
};

class guarded_backend {
 public:
  using request = guarded_request;
  static constexpr const char* name = "guarded-device";
  static constexpr bool moves_device_memory = true;

  guarded_backend(dc::local_backend b, arena& a)
      : s_(std::make_shared<guarded_state>(std::move(b), a)) {}
  int rank() const { return s_->local.rank(); }
  int size() const { return s_->local.size(); }
  void abort(const std::string& reason) noexcept { s_->local.abort(reason); }

  [[nodiscard]] request isend(const void* data, std::size_t bytes, int peer, dc::tag_t) {
    require_device(*s_->memory, data, bytes, "isend");
    auto t = std::make_shared<transfer>();
    t->send = true;
    t->device = static_cast<unsigned char*>(const_cast<void*>(data));
    t->bytes = bytes;
    t->peer = peer;
    t->staging.resize(bytes);
    if (bytes != 0) {
      arena::access open_arena(*s_->memory);
      std::memcpy(t->staging.data(), data, bytes);
    }
    return queue(std::move(t));
  }
  [[nodiscard]] request irecv(void* data, std::size_t bytes, int peer, dc::tag_t) {
    require_device(*s_->memory, data, bytes, "irecv");
    auto t = std::make_shared<transfer>();
    t->send = false;
    t->device = static_cast<unsigned char*>(data);
    t->bytes = bytes;
    t->peer = peer;
    t->staging.resize(bytes);
    return queue(std::move(t));
  }
  guarded_memory memory() { return guarded_memory(*s_); }

 private:
  request queue(std::shared_ptr<transfer> t) {
    if (!s_->open) s_->open = std::make_shared<group>();
    s_->queued.push_back(std::move(t));
    return request(s_, s_->open);
  }
  std::shared_ptr<guarded_state> s_;
};

// Element i of rank q's input: small integers, so that every sum is exact in every dtype and the
// expected values do not depend on the order of reduction.
void put(dc::dtype t, unsigned char* d, int k) {
  switch (t) {
    case dc::dtype::f16: {
      const dc::f16 h(static_cast<float>(k));
      std::memcpy(d, &h, 2);
      break;
    }
    case dc::dtype::bf16: {
      const dc::bf16 h(static_cast<float>(k));
      std::memcpy(d, &h, 2);
      break;
    }
    case dc::dtype::f32: {
      const auto v = static_cast<float>(k);
      std::memcpy(d, &v, 4);
      break;
    }
    case dc::dtype::f64: {
      const auto v = static_cast<double>(k);
      std::memcpy(d, &v, 8);
      break;
    }
    case dc::dtype::i8:
      *reinterpret_cast<std::int8_t*>(d) = static_cast<std::int8_t>(k);
      break;
    case dc::dtype::u8:
      *d = static_cast<std::uint8_t>(k + 6);
      break;
    case dc::dtype::i32: {
      const auto v = static_cast<std::int32_t>(k);
      std::memcpy(d, &v, 4);
      break;
    }
    case dc::dtype::i64: {
      const auto v = static_cast<std::int64_t>(k);
      std::memcpy(d, &v, 8);
      break;
    }
  }
}

std::vector<unsigned char> input(dc::dtype t, std::size_t count, int q) {
  std::vector<unsigned char> v(count * dc::dtype_size(t));
  for (std::size_t i = 0; i < count; ++i) {
    put(t, v.data() + i * dc::dtype_size(t),
        static_cast<int>((i * 7 + std::size_t(q) * 5) % 13) - 6);
  }
  return v;
}

// The reduction of every rank's input, computed on the host.
std::vector<unsigned char> expected(dc::dtype t, std::size_t count, int p, dc::reduce_op op) {
  std::vector<std::vector<unsigned char>> all;
  std::vector<const void*> in;
  for (int q = 0; q < p; ++q) all.push_back(input(t, count, q));
  for (const auto& v : all) in.push_back(v.data());
  std::vector<unsigned char> out(count * dc::dtype_size(t));
  if (count == 0) return out;
  dc::fold(out.data(), in.data(), in.size(), count, t, op);
  if (op == dc::reduce_op::avg) dc::divide(out.data(), out.data(), count, t, std::size_t(p));
  return out;
}

constexpr dc::dtype types[] = {dc::dtype::f32, dc::dtype::f64, dc::dtype::bf16, dc::dtype::i32,
                               dc::dtype::u8};
constexpr dc::reduce_op ops[] = {dc::reduce_op::sum, dc::reduce_op::avg, dc::reduce_op::max,
                                 dc::reduce_op::min};
// 2000 f32 elements span several 256-byte segments on every rank, in every chunk and shard.
constexpr std::size_t counts[] = {0, 1, 7, 301, 2000};

dc::config settings(bool deterministic, int ps_servers = 0) {
  dc::config c;
  c.ps_servers = ps_servers;
  c.timeout = std::chrono::seconds(20);
  c.segment_bytes = 256;
  c.deterministic = deterministic;
  return c;
}

// Every dtype, op, count, in and out of place, then the other collectives, on p ranks.
template <class S>
void run_all(int p, const dc::config& c) {
  dc::local_world world(p);
  std::vector<std::unique_ptr<arena>> arenas;
  for (int q = 0; q < p; ++q) arenas.push_back(std::make_unique<arena>(std::size_t{1} << 20));
  world.run([&](dc::local_backend lb) {
    arena& a = *arenas[static_cast<std::size_t>(lb.rank())];
    const int r = lb.rank();
    dc::communicator<guarded_backend, S, dc::fusion::none> comm(guarded_backend(lb, a), c);
    for (dc::dtype t : types) {
      const std::size_t es = dc::dtype_size(t);
      for (dc::reduce_op op : ops) {
        for (std::size_t count : counts) {
          for (bool in_place : {true, false}) {
            const auto mine = input(t, count, r);
            const auto want = expected(t, count, p, op);
            a.reset();
            unsigned char* in = a.alloc(count * es);
            unsigned char* out = in_place ? in : a.alloc(count * es);
            {
              arena::access open_arena(a);
              if (count != 0) std::memcpy(in, mine.data(), count * es);
            }
            comm.allreduce(dc::cuda_view(in, count, t, 0), dc::cuda_view(out, count, t, 0), op);
            std::vector<unsigned char> got(count * es), in_after(count * es);
            {
              arena::access open_arena(a);
              if (count != 0) {
                std::memcpy(got.data(), out, count * es);
                std::memcpy(in_after.data(), in, count * es);
              }
            }
            if (got != want || (!in_place && in_after != mine)) {
              FAIL("allreduce of " << count << " " << dc::to_string(t) << " " << dc::to_string(op)
                                   << (in_place ? " in place" : "") << " on rank " << r << " of "
                                   << p << ": wrong result");
            }
          }
        }
      }
    }

    // reduce_scatter, allgather, broadcast and barrier go through p2p_base on every strategy.
    for (std::size_t n : {std::size_t{1}, std::size_t{301}}) {
      const dc::dtype t = dc::dtype::i32;
      const auto pp = static_cast<std::size_t>(p);
      a.reset();
      auto* in = reinterpret_cast<std::int32_t*>(a.alloc(n * pp * 4));
      auto* out = reinterpret_cast<std::int32_t*>(a.alloc(n * pp * 4));
      {
        arena::access open_arena(a);
        for (std::size_t i = 0; i < n * pp; ++i) in[i] = static_cast<std::int32_t>(i) + r;
      }
      comm.reduce_scatter(dc::cuda_view(in, n * pp, t, 0), dc::cuda_view(out, n, t, 0));
      std::size_t wrong = 0;
      {
        arena::access open_arena(a);
        for (std::size_t i = 0; i < n; ++i) {
          const auto x = static_cast<std::int64_t>(std::size_t(r) * n + i);
          wrong += out[i] != static_cast<std::int32_t>(p * x + p * (p - 1) / 2);
        }
        for (std::size_t i = 0; i < n; ++i) in[i] = r * 1000 + static_cast<std::int32_t>(i);
      }
      comm.allgather(dc::cuda_view(in, n, t, 0), dc::cuda_view(out, n * pp, t, 0));
      {
        arena::access open_arena(a);
        for (std::size_t i = 0; i < n * pp; ++i) {
          wrong += out[i] != static_cast<std::int32_t>((i / n) * 1000 + i % n);
        }
        for (std::size_t i = 0; i < n; ++i) in[i] = r == p - 1 ? 7 * static_cast<int>(i) : -1;
      }
      comm.broadcast(dc::cuda_view(in, n, t, 0), p - 1);
      {
        arena::access open_arena(a);
        for (std::size_t i = 0; i < n; ++i) wrong += in[i] != 7 * static_cast<int>(i);
      }
      comm.barrier();
      if (wrong != 0) FAIL(wrong << " wrong elements in the other collectives on rank " << r);
    }
  });
}

}  // namespace

TEST_CASE("the arena's guard kills host code that touches device memory") {
  arena a(4096);
  unsigned char* p = a.alloc(16);
  {
    arena::access open_arena(a);
    p[0] = 42;  // allowed while open
  }
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    alarm(10);                 // the child's deadline: SIGALRM is not SIGSEGV
    signal(SIGSEGV, SIG_DFL);  // no sanitizer report: die of the signal itself
    const volatile unsigned char* q = p;
    _exit(*q == 42 ? 0 : 1);  // must not get here
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGSEGV);
}

TEST_CASE("ring on device memory") {
  for (int p : {2, 3}) {
    CAPTURE(p);
    run_all<dc::strategy::ring>(p, settings(false));
  }
}

TEST_CASE("tree on device memory") {
  for (int p : {2, 3}) {
    CAPTURE(p);
    run_all<dc::strategy::tree>(p, settings(false));
  }
}

TEST_CASE("recursive_doubling on device memory, with and without ranks folding in") {
  for (int p : {2, 3, 4, 6}) {
    CAPTURE(p);
    run_all<dc::strategy::recursive_doubling>(p, settings(false));
  }
}

TEST_CASE("parameter_server on device memory, one server and every rank serving") {
  for (int p : {2, 3}) {
    CAPTURE(p);
    run_all<dc::strategy::parameter_server>(p, settings(false, 1));
    run_all<dc::strategy::parameter_server>(p, settings(false, 0));
  }
}

TEST_CASE("deterministic mode on device memory: the ordered path of ring and tree") {
  for (int p : {2, 3}) {
    CAPTURE(p);
    run_all<dc::strategy::ring>(p, settings(true));
    run_all<dc::strategy::tree>(p, settings(true));
  }
}

TEST_CASE("automatic on a device backend without native collectives uses its table") {
  for (int p : {2, 3}) {
    CAPTURE(p);
    run_all<dc::strategy::automatic>(p, settings(false));
  }
}
