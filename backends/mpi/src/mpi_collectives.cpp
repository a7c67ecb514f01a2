// Native collectives: MPI's nonblocking collectives, polled with MPI_Test until the deadline
// (MPI_Wait cannot time out), so even the native path fails in bounded time.
#include <climits>
#include <cstring>
#include <functional>
#include <vector>

#include "distcomm/backends/mpi.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/core/reduce.hpp"
#include "mpi_state.hpp"

namespace distcomm {
namespace {

MPI_Datatype mpi_type(dtype t) {
  switch (t) {
    case dtype::f16:
    case dtype::bf16:
      return MPI_UINT16_T;  // reduced by mpi_state's user-defined ops
    case dtype::f32:
      return MPI_FLOAT;
    case dtype::f64:
      return MPI_DOUBLE;
    case dtype::i8:
      return MPI_INT8_T;
    case dtype::u8:
      return MPI_UINT8_T;
    case dtype::i32:
      return MPI_INT32_T;
    case dtype::i64:
      return MPI_INT64_T;
  }
  throw invalid_argument_error("mpi: invalid dtype value " + std::to_string(static_cast<int>(t)));
}

int op_index(reduce_op op) {
  switch (op) {
    case reduce_op::sum:
    case reduce_op::avg:  // sum, then divide()
      return 0;
    case reduce_op::min:
      return 1;
    case reduce_op::max:
      return 2;
    case reduce_op::prod:
      return 3;
  }
  throw invalid_argument_error("mpi: invalid reduce_op value " +
                               std::to_string(static_cast<int>(op)));
}

// MPI's built-in op, or mpi_state's user-defined one where MPI's is missing or differs: f16 and
// bf16 always, i8 and u8 for sum (and so avg) and prod, which must wrap around. min and max of
// integers are the same either way and stay MPI's.
MPI_Op mpi_op(const detail::mpi_state& s, dtype t, reduce_op op) {
  const int i = op_index(op);
  switch (t) {
    case dtype::f16:
      return s.user_ops[0][i];
    case dtype::bf16:
      return s.user_ops[1][i];
    case dtype::i8:
    case dtype::u8:
      if (op == reduce_op::min || op == reduce_op::max) break;
      return s.user_ops[t == dtype::i8 ? 2 : 3][i];
    default:
      break;
  }
  constexpr MPI_Op builtin[4] = {MPI_SUM, MPI_MIN, MPI_MAX, MPI_PROD};
  return builtin[i];
}

int checked_count(std::size_t count, const char* what) {
  if (count > static_cast<std::size_t>(INT_MAX)) {
    throw invalid_argument_error(std::string("mpi: native ") + what + " of " +
                                 std::to_string(count) +
                                 " elements: MPI counts are int; above INT_MAX use ring or tree "
                                 "(DISTCOMM_ALGO) or split the tensor");
  }
  return static_cast<int>(count);
}

// Polls a collective's request until done or `until`. MPI cannot cancel a collective, so a
// timeout leaves the request to MPI, which may still read and write the buffers during any later
// MPI call of this process: the process is fenced (mpi_state.hpp) and makes none.
void finish(detail::mpi_state& s, MPI_Request& req, const char* what, std::size_t bytes,
            deadline until) {
  int rc = MPI_SUCCESS;
  bool fenced = false;
  const bool done = detail::mpi_poll(
      [&] {
        const detail::mpi_lock lock(detail::mpi_mutex());
        if (detail::mpi_fenced()) return fenced = true;  // another thread gave up a request
        detail::mpi_serve_receives();  // a peer's send may wait on a receive of this rank
        int flag = 0;
        rc = MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
        return rc != MPI_SUCCESS || flag != 0;
      },
      until, /*may_sleep=*/false);
  if (fenced) s.throw_aborted();
  if (rc != MPI_SUCCESS) s.mark_failed();
  detail::mpi_check(rc, "MPI_Test");
  if (done) return;
  const std::string msg = "mpi: rank " + std::to_string(s.rank) + ": native " + what + " of " +
                          std::to_string(bytes) +
                          " bytes did not complete before the deadline (DISTCOMM_TIMEOUT); some "
                          "rank of " +
                          std::to_string(s.size) + " is dead, stuck or in another collective";
  {
    const detail::mpi_lock lock(detail::mpi_mutex());
    detail::mpi_fence("rank " + std::to_string(s.rank) + " gave up a native " + what + " of " +
                      std::to_string(bytes) + " bytes that timed out");
  }
  s.abort(msg);
  throw timeout_error(msg);
}

// Posts a collective with `post` under the process's MPI lock, unless `s` is aborted or the process
// fenced.
template <class Post>
MPI_Request start(detail::mpi_state& s, const char* routine, Post&& post) {
  MPI_Request req = MPI_REQUEST_NULL;
  const detail::mpi_lock lock(detail::mpi_mutex());
  s.check_aborted();
  detail::mpi_check(post(&req), routine);
  return req;
}

}  // namespace

void mpi_backend::native_allreduce(const void* in, void* out, std::size_t count, dtype t,
                                   reduce_op op, deadline until) {
  detail::mpi_state& s = *state_;
  s.check_aborted();
  const int n = checked_count(count, "allreduce");
  if (n == 0) return;
  MPI_Request req = start(s, "MPI_Iallreduce", [&](MPI_Request* r) {
    return MPI_Iallreduce(in == out ? MPI_IN_PLACE : in, out, n, mpi_type(t), mpi_op(s, t, op),
                          s.comm, r);
  });
  finish(s, req, "allreduce", count * dtype_size(t), until);
  if (op == reduce_op::avg) divide(out, out, count, t, static_cast<std::size_t>(s.size));
}

void mpi_backend::native_reduce_scatter(const void* in, void* out, std::size_t recv_count, dtype t,
                                        reduce_op op, deadline until) {
  detail::mpi_state& s = *state_;
  s.check_aborted();
  const int n = checked_count(recv_count, "reduce_scatter");
  if (n == 0) return;
  // MPI forbids overlapping send and receive buffers, and its MPI_IN_PLACE means a different
  // layout here ("the input is in out"): copy an input that overlaps the output in any way (in
  // place, or nccl-tests' out = in + rank * recv_count).
  std::vector<unsigned char> copy;
  const std::size_t total = recv_count * static_cast<std::size_t>(s.size) * dtype_size(t);
  const auto* in_begin = static_cast<const unsigned char*>(in);
  const auto* out_begin = static_cast<const unsigned char*>(out);
  const std::less<const unsigned char*> before;
  if (before(out_begin, in_begin + total) &&
      before(in_begin, out_begin + recv_count * dtype_size(t))) {
    copy.assign(in_begin, in_begin + total);
    in = copy.data();
  }
  MPI_Request req = start(s, "MPI_Ireduce_scatter_block", [&](MPI_Request* r) {
    return MPI_Ireduce_scatter_block(in, out, n, mpi_type(t), mpi_op(s, t, op), s.comm, r);
  });
  finish(s, req, "reduce_scatter", recv_count * dtype_size(t), until);
  if (op == reduce_op::avg) divide(out, out, recv_count, t, static_cast<std::size_t>(s.size));
}

void mpi_backend::native_allgather(const void* in, void* out, std::size_t send_count, dtype t,
                                   deadline until) {
  detail::mpi_state& s = *state_;
  s.check_aborted();
  const int n = checked_count(send_count, "allgather");
  checked_count(send_count * static_cast<std::size_t>(s.size), "allgather");
  if (n == 0) return;
  const std::size_t bytes = send_count * dtype_size(t);
  const void* mine = static_cast<unsigned char*>(out) + static_cast<std::size_t>(s.rank) * bytes;
  MPI_Request req = start(s, "MPI_Iallgather", [&](MPI_Request* r) {
    return MPI_Iallgather(in == mine ? MPI_IN_PLACE : in, n, mpi_type(t), out, n, mpi_type(t),
                          s.comm, r);
  });
  finish(s, req, "allgather", bytes, until);
}

void mpi_backend::native_alltoall(const void* in, void* out, std::size_t block_count, dtype t,
                                  deadline until) {
  detail::mpi_state& s = *state_;
  s.check_aborted();
  const int n = checked_count(block_count, "alltoall");
  checked_count(block_count * static_cast<std::size_t>(s.size), "alltoall");
  if (n == 0) return;
  MPI_Request req = start(s, "MPI_Ialltoall", [&](MPI_Request* r) {
    return MPI_Ialltoall(in, n, mpi_type(t), out, n, mpi_type(t), s.comm, r);
  });
  finish(s, req, "alltoall", block_count * dtype_size(t), until);
}

void mpi_backend::native_alltoallv(const void* in, const std::size_t* send_counts,
                                   const std::size_t* send_displs, void* out,
                                   const std::size_t* recv_counts, const std::size_t* recv_displs,
                                   dtype t, deadline until) {
  detail::mpi_state& s = *state_;
  s.check_aborted();
  const auto p = static_cast<std::size_t>(s.size);
  std::vector<int> sc(p), sd(p), rc(p), rd(p);  // alive until the request completes
  std::size_t bytes = 0;
  for (std::size_t q = 0; q < p; ++q) {
    sc[q] = checked_count(send_counts[q], "alltoallv");
    sd[q] = checked_count(send_displs[q], "alltoallv");
    rc[q] = checked_count(recv_counts[q], "alltoallv");
    rd[q] = checked_count(recv_displs[q], "alltoallv");
    bytes += send_counts[q] * dtype_size(t);
  }
  MPI_Request req = start(s, "MPI_Ialltoallv", [&](MPI_Request* r) {
    return MPI_Ialltoallv(in, sc.data(), sd.data(), mpi_type(t), out, rc.data(), rd.data(),
                          mpi_type(t), s.comm, r);
  });
  finish(s, req, "alltoallv", bytes, until);
}

void mpi_backend::native_broadcast(void* data, std::size_t count, dtype t, int root,
                                   deadline until) {
  detail::mpi_state& s = *state_;
  if (root < 0 || root >= s.size) {
    throw invalid_argument_error("mpi: broadcast root " + std::to_string(root) +
                                 " is not a rank (world size " + std::to_string(s.size) + ")");
  }
  s.check_aborted();
  const int n = checked_count(count, "broadcast");
  if (n == 0) return;
  MPI_Request req = start(s, "MPI_Ibcast", [&](MPI_Request* r) {
    return MPI_Ibcast(data, n, mpi_type(t), root, s.comm, r);
  });
  finish(s, req, "broadcast", count * dtype_size(t), until);
}

void mpi_backend::native_barrier(deadline until) {
  detail::mpi_state& s = *state_;
  s.check_aborted();
  MPI_Request req =
      start(s, "MPI_Ibarrier", [&](MPI_Request* r) { return MPI_Ibarrier(s.comm, r); });
  finish(s, req, "barrier", 0, until);
}

}  // namespace distcomm
