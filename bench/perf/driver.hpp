// The one driver behind every distcomm-bench-<backend> executable: a template over the
// communicator and the kind of buffer it moves. Each rank runs run(backend, options, env); only how
// the backend is made differs between the executables (perf/main_*.cpp). Device-memory backends
// bring their own communicator-like surface and buffer (perf/nccl_comm.hpp).
//
// Method, per size (as nccl-tests' all_reduce_perf, except where noted):
//  * warm-up: -w collectives of every column at the largest and the smallest size, once;
//  * buffers are zeroed (so repeated in-place reductions neither grow nor reach denormals), one
//    untimed collective of every column runs, then a barrier;
//  * -n repetitions, each running every column once in turn (out-of-place, in-place, peer), each
//    collective timed on its own: drift in the machine's speed hits all columns alike (nccl-tests
//    times -n out-of-place collectives, then -n in-place ones);
//  * a rank's time is its mean per collective; ranks combine them as -a says;
//  * -c check iterations: fill known inputs, run one collective, count wrong elements on every
//    rank, sum them over the ranks.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "check.hpp"
#include "distcomm/any_communicator.hpp"
#include "distcomm/communicator.hpp"
#include "distcomm/config.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/core/partition.hpp"
#include "distcomm/fusion/buffer.hpp"
#include "distcomm/registry/strategies.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"
#include "distcomm/rendezvous/world.hpp"
#include "floor.hpp"
#include "options.hpp"
#include "peer.hpp"
#include "report.hpp"

namespace distcomm::bench {

// What the executable tells the driver besides the backend.
struct process_env {
  std::string program;
  int threads = 1;  // ranks in this process (nccl-tests' nThread)
  peer_world peer;  // for --peer
};

// Zeroed host memory aligned to a page, as the peers harness allocates it. The runner reaches a
// buffer's contents only through zero / fill_input / fill_sentinel / wrong, so a device buffer
// (perf/nccl_comm.hpp) can stage them through host memory; pointers passed lie inside the buffer.
class host_buffer {
 public:
  host_buffer() = default;
  explicit host_buffer(std::size_t bytes) {
    const std::size_t rounded = (bytes / align + 1) * align;  // aligned_alloc needs a multiple
    data_.reset(static_cast<unsigned char*>(std::aligned_alloc(align, rounded)));
    if (!data_) throw error("cannot allocate " + std::to_string(bytes) + " bytes");
    std::memset(data_.get(), 0, rounded);
  }
  unsigned char* get() const noexcept { return data_.get(); }

  static tensor_view view(void* data, std::size_t count, dtype t) {
    return tensor_view{data, count, t};
  }
  static void zero(void* p, std::size_t bytes) { std::memset(p, 0, bytes); }
  static void fill_input(const data_check& dc, void* p, std::size_t first, std::size_t count) {
    dc.fill_input(p, first, count);
  }
  static void fill_sentinel(const data_check& dc, void* p, std::size_t count) {
    dc.fill_sentinel(p, count);
  }
  static std::int64_t wrong(const data_check& dc, const void* p, std::size_t first,
                            std::size_t count) {
    return dc.wrong(p, first, count);
  }

 private:
  static constexpr std::size_t align = 4096;
  struct free_deleter {
    void operator()(unsigned char* p) const noexcept { std::free(p); }
  };
  std::unique_ptr<unsigned char, free_deleter> data_;
};

// Comm: distcomm::any_communicator or a type with the same members the runner calls (rank, size,
// settings, allreduce, reduce_scatter, allgather, broadcast, barrier, backend_name, strategy_name);
// its collectives take this runner's Buffer views and host views (control data) alike.
// The strategy's name in reports: its type's ("automatic", "recursive_doubling"), as they have
// always said it, for the registered name the communicator gives ("auto", "rd").
inline const char* long_name(const char* registered) {
  const strategy_info& s = find_strategy(registered);
  return *s.alias != '\0' ? s.alias : s.name;
}

// --pattern tp's compute: the rank's core busy for `us` microseconds.
inline void spin_for_us(double us) {
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::duration<double, std::micro>(us);
  while (std::chrono::steady_clock::now() < until) {
  }
}

template <class Comm, class Buffer = host_buffer>
class runner {
 public:
  template <class B>
  runner(B backend, const options& o, const process_env& env)
      : comm_(std::move(backend)), o_(o), env_(env) {}

  // Returns the exit code: 0, or 1 when a check found wrong elements (on every rank alike).
  int run() {
    const int p = comm_.size();
    if (o_.coll == collective::broadcast && o_.root >= p) {
      throw invalid_argument_error("--root " + std::to_string(o_.root) +
                                   " is not a rank (world size " + std::to_string(p) + ")");
    }
    if (!o_.peer.empty()) peer_ = make_peer(o_.peer, env_.peer);
    if (o_.floor) connect_floor();
    const std::vector<std::string> devices = gather_devices();
    if (comm_.rank() == 0) {
      run_info info;
      info.program = env_.program;
      info.backend = comm_.backend_name();
      info.strategy = long_name(comm_.strategy_name());
      info.ranks = p;
      info.threads = env_.threads;
      info.peer = o_.peer;
      info.peer_detail = peer_ ? peer_->description() : std::string();
      info.floor = floor_ != nullptr;
      info.fusion_threshold = comm_.settings().fusion_threshold;
      info.devices = devices;
      report_.emplace(o_, std::move(info));
      report_->header();
    }
    if (o_.profile_file.empty()) {
      sweep();
    } else {
      profile();
    }
    if (report_) report_->finish();
    return errors_ ? 1 : 0;
  }

 private:
  enum column : std::size_t { out_of_place, in_place, peer_column, floor_column, columns };

  struct variant {
    bool ran = false;
    std::function<void()> run;
    std::function<void()> fill;           // check inputs
    std::function<std::int64_t()> wrong;  // wrong elements after run
    std::size_t bytes = 0;                // counted in algbw
  };
  using variants = std::array<variant, columns>;

  tensor_view tv(void* data, std::size_t count) const { return Buffer::view(data, count, o_.type); }
  std::size_t es() const { return dtype_size(o_.type); }

  std::vector<std::string> gather_devices() {
    constexpr std::size_t line = 256;
    const auto p = static_cast<std::size_t>(comm_.size());
    std::vector<std::uint8_t> mine(line, 0), all(line * p, 0);
    const std::string text = device_line(comm_.rank(), comm_.backend_name());
    std::memcpy(mine.data(), text.data(), std::min(text.size(), line - 1));
    comm_.allgather(view(mine), view(all));
    std::vector<std::string> out;
    for (std::size_t q = 0; q < p; ++q) {
      out.emplace_back(reinterpret_cast<const char*>(all.data() + q * line));
    }
    return out;
  }

  // --floor: ranks 0 and 1 map one page rank 0 made (floor.hpp), in the same processes.
  void connect_floor() {
    if (comm_.size() != 2 || !env_.peer.single_node) {
      throw invalid_argument_error(
          "--floor times a ping-pong between two processes of one host; this job has " +
          std::to_string(comm_.size()) + " ranks" +
          (env_.peer.single_node ? std::string() : std::string(" on several hosts")) +
          ": run 2 ranks on one host");
    }
    std::int64_t key =
        comm_.rank() == 0 ? static_cast<std::int64_t>(cache_line_floor::create()) : 0;
    comm_.broadcast(view(&key, 1), 0);
    floor_ = std::make_unique<cache_line_floor>(static_cast<std::uint64_t>(key), comm_.rank(),
                                                comm_.settings().timeout);
    comm_.barrier();
    floor_->unlink();
  }

  // The floor column of every row: one round trip, no data (variant::bytes 0), run interleaved
  // with the others; its time is rank 0's own (cache_line_floor::take_mean_us).
  void add_floor(variants& v) const {
    if (!floor_) return;
    variant& f = v[floor_column];
    f.ran = true;
    cache_line_floor* line = floor_.get();
    f.run = [line] { line->round_trip(); };
    f.fill = [] {};
    f.wrong = [] { return std::int64_t{0}; };
  }

  // ---- the size sweep ---------------------------------------------------------------------------

  // Element counts of one size, as nccl-tests' getCollByteCount: reduce_scatter and allgather
  // move size / ranks elements per rank.
  struct shape {
    std::size_t n = 0;      // count column: elements per rank (per call for allreduce, broadcast)
    std::size_t send = 0;   // elements of the send buffer used
    std::size_t recv = 0;   // elements of the receive buffer used
    std::size_t bytes = 0;  // size column, and the bytes algbw counts
  };

  shape shape_of(std::size_t size) const {
    const std::size_t count = size / es();
    const auto p = static_cast<std::size_t>(comm_.size());
    switch (o_.coll) {
      case collective::reduce_scatter: {
        const std::size_t n = count / p;
        return {n, n * p, n * p, n * p * es()};
      }
      case collective::allgather: {
        const std::size_t n = count / p;
        return {n, n, n * p, n * p * es()};
      }
      case collective::alltoall: {  // n elements to each rank, as alltoall_perf
        const std::size_t n = count / p;
        return {n, n * p, n * p, n * p * es()};
      }
      case collective::alltoallv: {  // n elements to each rank on average, skewed (check.hpp)
        const std::size_t n = count / p;
        const std::vector<std::size_t> c = skewed_counts(n, comm_.size());
        std::size_t sent = 0;
        for (std::size_t x : c) sent += x;
        return {n, sent, c[static_cast<std::size_t>(comm_.rank())] * p, sent * es()};
      }
      case collective::allreduce:
      case collective::broadcast:
        break;
    }
    return {count, count, count, count * es()};
  }

  variants make_variants(const shape& s) {
    variants v;
    const int r = comm_.rank();
    const int p = comm_.size();
    const std::size_t n = s.n;
    const reduce_op op = o_.op;
    const std::size_t e = es();
    unsigned char* send = send_.get();
    unsigned char* recv = recv_.get();
    unsigned char* mine = recv + static_cast<std::size_t>(r) * n * e;  // this rank's block
    const std::size_t np = n * static_cast<std::size_t>(p);
    const data_check dc(o_.coll, o_.type, op, p, r, o_.root, n);
    for (variant& x : v) x.bytes = s.bytes;
    variant& oop = v[out_of_place];
    variant& ip = v[in_place];
    switch (o_.coll) {
      case collective::allreduce:
        oop.ran = o_.fusion_tensors == 1;  // the grouped allreduce is in place only
        oop.run = [=] { comm_.allreduce(tv(send, n), tv(recv, n), op); };
        oop.fill = [=] {
          send_.fill_input(dc, send, 0, n);
          recv_.fill_sentinel(dc, recv, n);
        };
        oop.wrong = [=] { return recv_.wrong(dc, recv, 0, n); };
        ip.ran = true;
        if (o_.fusion_tensors == 1) {
          ip.run = [=] { comm_.allreduce(tv(recv, n), op); };
        } else {
          tensors_.clear();
          for (std::size_t k = 0; k < o_.fusion_tensors; ++k) {
            const block b = partition(n, o_.fusion_tensors, k);
            tensors_.push_back(tv(recv + b.begin * e, b.count));
          }
          ip.run = [=] { comm_.allreduce(span<const tensor_view>(tensors_), op); };
        }
        ip.fill = [=] { recv_.fill_input(dc, recv, 0, n); };
        ip.wrong = [=] { return recv_.wrong(dc, recv, 0, n); };
        if (peer_) {
          variant& pv = v[peer_column];
          pv.ran = true;
          pv.run = [=] { peer_->allreduce(recv, n, o_.type, op); };
          pv.fill = ip.fill;
          pv.wrong = ip.wrong;
        }
        break;
      case collective::reduce_scatter:
        oop.ran = ip.ran = true;
        oop.run = [=] { comm_.reduce_scatter(tv(send, np), tv(recv, n), op); };
        oop.fill = [=] {
          send_.fill_input(dc, send, 0, np);
          recv_.fill_sentinel(dc, recv, n);
        };
        oop.wrong = [=] { return recv_.wrong(dc, recv, static_cast<std::size_t>(r) * n, n); };
        ip.run = [=] { comm_.reduce_scatter(tv(recv, np), tv(mine, n), op); };
        ip.fill = [=] { recv_.fill_input(dc, recv, 0, np); };
        ip.wrong = [=] { return recv_.wrong(dc, mine, static_cast<std::size_t>(r) * n, n); };
        break;
      case collective::allgather:
        oop.ran = ip.ran = true;
        oop.run = [=] { comm_.allgather(tv(send, n), tv(recv, np)); };
        oop.fill = [=] {
          send_.fill_input(dc, send, 0, n);
          recv_.fill_sentinel(dc, recv, np);
        };
        oop.wrong = [=] { return recv_.wrong(dc, recv, 0, np); };
        ip.run = [=] { comm_.allgather(tv(mine, n), tv(recv, np)); };
        ip.fill = [=] {
          recv_.fill_sentinel(dc, recv, np);
          recv_.fill_input(dc, mine, 0, n);
        };
        ip.wrong = oop.wrong;
        break;
      case collective::alltoall:
        oop.ran = true;  // DistComm's alltoall is out of place only
        oop.run = [=] { comm_.alltoall(tv(send, np), tv(recv, np)); };
        oop.fill = [=] {
          send_.fill_input(dc, send, 0, np);
          recv_.fill_sentinel(dc, recv, np);
        };
        oop.wrong = [=] { return recv_.wrong(dc, recv, 0, np); };
        if (peer_) {
          variant& pv = v[peer_column];
          pv.ran = true;
          pv.run = [=] { peer_->alltoall(send, recv, n, o_.type); };
          pv.fill = oop.fill;
          pv.wrong = oop.wrong;
        }
        break;
      case collective::alltoallv: {
        exchange_layout(n);
        const std::size_t sent = s.send;
        const std::size_t got = s.recv;
        const data_check dv(o_.coll, o_.type, op, p, r, o_.root,
                            counts_[static_cast<std::size_t>(r)],
                            send_displs_[static_cast<std::size_t>(r)]);
        oop.ran = true;
        oop.run = [=] {
          comm_.alltoallv(tv(send, sent), span<const std::size_t>(counts_), tv(recv, got),
                          span<const std::size_t>(recv_counts_),
                          span<const std::size_t>(send_displs_),
                          span<const std::size_t>(recv_displs_));
        };
        oop.fill = [=] {
          send_.fill_input(dv, send, 0, sent);
          recv_.fill_sentinel(dv, recv, got);
        };
        oop.wrong = [=] { return recv_.wrong(dv, recv, 0, got); };
        if (peer_) {
          variant& pv = v[peer_column];
          pv.ran = true;
          pv.run = [=] {
            peer_->alltoallv(send, mpi_counts_[0].data(), mpi_counts_[1].data(), recv,
                             mpi_counts_[2].data(), mpi_counts_[3].data(), o_.type);
          };
          pv.fill = oop.fill;
          pv.wrong = oop.wrong;
        }
        break;
      }
      case collective::broadcast:
        ip.ran = true;  // DistComm's broadcast is in place only
        ip.run = [=] { comm_.broadcast(tv(recv, n), o_.root); };
        ip.fill = [=] { recv_.fill_input(dc, recv, 0, n); };
        ip.wrong = [=] { return recv_.wrong(dc, recv, 0, n); };
        break;
    }
    add_floor(v);
    if (o_.pattern == "tp") {
      for (variant& x : v) {
        if (!x.ran) continue;
        x.run = [compute = o_.compute_us, call = std::move(x.run)] {
          spin_for_us(compute);
          call();
        };
      }
    }
    return v;
  }

  // alltoallv's counts and displacements at a mean of n elements per peer, for DistComm and (as
  // int) for the peer: send counts, send displacements, receive counts, receive displacements.
  void exchange_layout(std::size_t n) {
    const auto p = static_cast<std::size_t>(comm_.size());
    const auto r = static_cast<std::size_t>(comm_.rank());
    counts_ = skewed_counts(n, comm_.size());
    send_displs_.assign(p, 0);
    recv_counts_.assign(p, counts_[r]);
    recv_displs_.assign(p, 0);
    for (std::size_t q = 1; q < p; ++q) send_displs_[q] = send_displs_[q - 1] + counts_[q - 1];
    for (std::size_t q = 0; q < p; ++q) recv_displs_[q] = q * counts_[r];
    const std::vector<std::size_t>* from[4] = {&counts_, &send_displs_, &recv_counts_,
                                               &recv_displs_};
    for (std::size_t k = 0; k < 4; ++k) {
      mpi_counts_[k].clear();
      for (std::size_t x : *from[k]) {
        if (x > static_cast<std::size_t>(INT_MAX)) {
          throw invalid_argument_error("--collective alltoallv: " + std::to_string(x) +
                                       " elements exceed the peer's int counts");
        }
        mpi_counts_[k].push_back(static_cast<int>(x));
      }
    }
  }

  void sweep() {
    send_ = Buffer(o_.max_bytes);
    // alltoallv's most popular rank receives up to twice the mean (check.hpp, skewed_counts)
    recv_ = Buffer(o_.coll == collective::alltoallv ? 2 * o_.max_bytes : o_.max_bytes);
    for (std::size_t size : {o_.max_bytes, o_.min_bytes}) {
      const variants v = make_variants(shape_of(size));
      for (int w = 0; w < o_.warmup_iters; ++w) {
        for (const variant& x : v) {
          if (x.ran) x.run();
        }
      }
    }
    const std::vector<std::size_t> sizes = o_.sizes();
    for (int cycle = 0; o_.run_cycles == 0 || cycle < o_.run_cycles; ++cycle) {
      for (std::size_t size : sizes) {
        const shape s = shape_of(size);
        send_.zero(send_.get(), s.send * es());
        recv_.zero(recv_.get(), s.recv * es());
        const variants v = make_variants(s);
        const std::array<measurement, columns> m = measure(v);
        if (report_) {
          row rw;
          rw.cycle = cycle;
          rw.bytes = s.bytes;
          rw.count = s.n;
          rw.root = o_.coll == collective::broadcast ? o_.root : -1;
          rw.out_of_place = m[out_of_place];
          rw.in_place = m[in_place];
          rw.peer = m[peer_column];
          rw.floor_us = m[floor_column].ran ? floor_us_ : 0.0;
          report_->add(rw);
        }
      }
    }
  }

  // Times every column that runs, interleaved, then checks it (see the top of this file).
  template <std::size_t N>
  std::array<measurement, N> measure(const std::array<variant, N>& v) {
    using clock = std::chrono::steady_clock;
    for (const variant& x : v) {
      if (x.ran) x.run();
    }
    comm_.barrier();
    if (floor_) (void)floor_->take_mean_us();  // the timed round trips only
    std::array<double, N> seconds{};
    for (int it = 0; it < o_.iters; ++it) {
      for (std::size_t c = 0; c < N; ++c) {
        if (!v[c].ran) continue;
        const auto t0 = clock::now();
        for (int a = 0; a < o_.agg_iters; ++a) v[c].run();
        seconds[c] += std::chrono::duration<double>(clock::now() - t0).count();
      }
    }
    if (floor_) floor_us_ = floor_->take_mean_us();
    for (double& s : seconds) s /= static_cast<double>(o_.iters) * o_.agg_iters;
    combine_times(seconds);

    std::array<std::int64_t, N> wrong{};
    for (int c = 0; c < o_.check; ++c) {
      std::array<std::int64_t, N> here{};
      for (std::size_t k = 0; k < N; ++k) {
        if (!v[k].ran) continue;
        v[k].fill();
        v[k].run();
        here[k] = v[k].wrong();
      }
      comm_.allreduce(view(here.data(), N), reduce_op::sum);
      bool any = false;
      for (std::size_t k = 0; k < N; ++k) {
        wrong[k] += here[k];
        any = any || here[k] > 0;
      }
      if (any) break;  // as nccl-tests: the first failing check is enough
    }

    std::array<measurement, N> m;
    for (std::size_t k = 0; k < N; ++k) {
      if (!v[k].ran) continue;
      m[k].ran = true;
      m[k].time_us = seconds[k] * 1e6;
      m[k].algbw = seconds[k] > 0 ? static_cast<double>(v[k].bytes) / 1e9 / seconds[k] : 0.0;
      m[k].busbw = m[k].algbw * bus_factor(o_.coll, comm_.size());
      m[k].wrong = o_.check > 0 ? wrong[k] : -1;
      if (wrong[k] > 0) ++errors_;
    }
    return m;
  }

  // Each rank's mean time per collective -> the figure -a asks for, on every rank.
  template <std::size_t N>
  void combine_times(std::array<double, N>& t) {
    switch (o_.average) {
      case 0:
        comm_.broadcast(view(t.data(), N), 0);
        break;
      case 1:
        comm_.allreduce(view(t.data(), N), reduce_op::avg);
        break;
      case 2:
        comm_.allreduce(view(t.data(), N), reduce_op::min);
        break;
      default:
        comm_.allreduce(view(t.data(), N), reduce_op::max);
        break;
    }
  }

  // ---- --profile: one training step's gradient set ----------------------------------------------

  void profile() {
    // Every rank reads the file (--profile checked that it exists on every rank's host).
    const std::vector<std::size_t> counts = read_profile(o_.profile_file);

    // The tensors live in one allocation, each 64-byte aligned; `flat` is one buffer as large.
    std::vector<std::size_t> offsets;  // element index of each tensor in the concatenation
    std::vector<std::size_t> placed;   // byte offset of each tensor in the allocation
    std::size_t total = 0, bytes = 0;
    for (std::size_t c : counts) {
      offsets.push_back(total);
      placed.push_back(bytes);
      total += c;
      bytes += (c * es() + 63) / 64 * 64;
    }
    send_ = Buffer(bytes);
    recv_ = Buffer(total * es());
    unsigned char* grads = send_.get();
    unsigned char* flat = recv_.get();
    std::vector<tensor_view> views;
    for (std::size_t k = 0; k < counts.size(); ++k) {
      views.push_back(tv(grads + placed[k], counts[k]));
    }
    const span<const tensor_view> all(views);
    const reduce_op op = o_.op;
    const data_check dc(collective::allreduce, o_.type, op, comm_.size(), comm_.rank(), 0);

    std::size_t fused_collectives = 0;  // how many collectives the fusion policy makes of the set
    fusion::buffer(comm_.settings())
        .allreduce(all, op,
                   [&](const void*, void*, std::size_t, dtype, reduce_op) { ++fused_collectives; });
    std::size_t nonempty = 0;
    for (std::size_t c : counts) nonempty += c != 0;

    const auto fill_set = [=] {
      for (std::size_t k = 0; k < views.size(); ++k) {
        send_.fill_input(dc, views[k].data, offsets[k], views[k].count);
      }
    };
    const auto wrong_set = [=] {
      std::int64_t w = 0;
      for (std::size_t k = 0; k < views.size(); ++k) {
        w += send_.wrong(dc, views[k].data, offsets[k], views[k].count);
      }
      return w;
    };
    // fused, unfused (one allreduce per tensor), flat (one buffer of the same size), peer (flat).
    std::array<variant, 4> modes;
    for (variant& m : modes) {
      m.ran = true;
      m.bytes = total * es();
    }
    modes[0].run = [=] { comm_.allreduce(all, op); };
    modes[1].run = [=] {
      for (const tensor_view& t : views) comm_.allreduce(t, op);
    };
    modes[0].fill = modes[1].fill = fill_set;
    modes[0].wrong = modes[1].wrong = wrong_set;
    modes[2].run = [=] { comm_.allreduce(tv(flat, total), op); };
    modes[2].fill = [=] { recv_.fill_input(dc, flat, 0, total); };
    modes[2].wrong = [=] { return recv_.wrong(dc, flat, 0, total); };
    modes[3].ran = peer_ != nullptr;
    if (peer_) {
      modes[3].run = [=] { peer_->allreduce(flat, total, o_.type, op); };
      modes[3].fill = modes[2].fill;
      modes[3].wrong = modes[2].wrong;
    }
    for (int w = 0; w < o_.warmup_iters; ++w) {
      for (const variant& m : modes) {
        if (m.ran) m.run();
      }
    }
    send_.zero(grads, bytes);
    recv_.zero(flat, total * es());
    const std::array<measurement, 4> m = measure(modes);
    if (report_) {
      report_->profile_header(o_.profile_file, counts.size(), total);
      const std::size_t tensors[] = {counts.size(), counts.size(), 1, 1};
      const std::size_t collectives[] = {fused_collectives, nonempty, 1, 1};
      const std::string names[] = {"fused", "unfused", "flat", "peer-" + o_.peer};
      for (std::size_t k = 0; k < modes.size(); ++k) {
        if (modes[k].ran) report_->add(profile_row{names[k], tensors[k], collectives[k], m[k]});
      }
    }
  }

  Comm comm_;
  const options& o_;
  const process_env& env_;
  std::unique_ptr<peer> peer_;
  std::unique_ptr<cache_line_floor> floor_;  // --floor
  double floor_us_ = 0;                      // rank 0: the last measure()'s mean round trip
  std::optional<report> report_;
  Buffer send_, recv_;
  std::vector<tensor_view> tensors_;  // --fusion-tensors views of recv_
  std::vector<std::size_t> counts_, send_displs_, recv_counts_, recv_displs_;  // alltoallv
  std::array<std::vector<int>, 4> mpi_counts_;  // the same four, as the peer takes them
  int errors_ = 0;
};

// The usage errors that depend on the backend or on how the job was started, raised before the
// backend connects anything.
template <class Backend>
void precheck(const options& o, const peer_world& w) {
  visit_strategy<Backend>(o.strategy, [](auto) {});  // a strategy that does not run on Backend
  if (!o.peer.empty()) check_peer(o.peer, w);
}

// Runs the benchmark on this rank with the strategy the options name, through the
// communicator the backend's library compiled (make_communicator(), behind any_communicator, as
// distcomm::init() gives it): the erasure costs nothing measurable (distcomm-bench-erasure), and
// each benchmark compiles in seconds instead of compiling every strategy's communicator again.
template <class Backend>
int run(Backend backend, const options& o, const process_env& env) {
  return runner<any_communicator>(
             make_communicator(std::move(backend), o.strategy, config::from_env()), o, env)
      .run();
}

// The process's part of a run: the program's name and the world the launcher described.
inline process_env process_env_of(const char* program, const world_info& w, const config& cfg) {
  process_env env;
  env.program = program;
  env.peer.rank = w.rank;
  env.peer.size = w.size;
  env.peer.single_node = w.single_node();
  env.peer.launcher = w.launcher;
  env.peer.timeout = cfg.timeout;
  return env;
}

// main()'s frame: a usage error (invalid_argument_error) exits 2, any other failure 1.
template <class F>
int guarded_main(const char* program, F&& body) {
  try {
    return body();
  } catch (const invalid_argument_error& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

// main() of a backend that meets through the job's store (gloo, ucx, shm): parses the options,
// detects the world, bootstraps the store and runs the sweep over make(job, config).
template <class Backend, class Make>
int store_backend_main(const char* program, int argc, char** argv, Make&& make) {
  options o;
  if (const int rc = parse_options(argc, argv, {program, false}, o); rc >= 0) return rc;
  return guarded_main(program, [&] {
    const config cfg = config::from_env();
    process_env env = process_env_of(program, detect_world(), cfg);
    precheck<Backend>(o, env.peer);
    job j = bootstrap(cfg);
    env.peer.kv = [&] { return j.kv; };
    return run(make(j, cfg), o, env);
  });
}

}  // namespace distcomm::bench
