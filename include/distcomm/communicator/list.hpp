// The collectives, written once. communicator<...>, any_communicator's members, its interface and
// its model are generated from this list, so a new collective is one entry here, its builder
// (communicator/collectives.hpp) and its algorithm.
//
// DISTCOMM_COLLECTIVES(X, D) calls X(name, (parameters), (arguments)) for each collective. Each is
// a blocking `void name(parameters)` and a non-blocking `work iname(parameters)`, which returns a
// work at once (async/work.hpp). Both validate their arguments on the caller's thread (a bad
// argument throws from the call itself) and run the same code, one call at a time in the order
// they were started (async/progress.hpp). The memory of a non-blocking call must stay alive until
// its work completes. A parameter's default is written D(value): the public members get
// `= value` (DISTCOMM_DEFAULT), virtual ones nothing (DISTCOMM_NO_DEFAULT).
//
// DISTCOMM_COLLECTIVE_FORMS(X, D) lists the shorter forms of a collective, each X(name,
// (parameters), (the collective's arguments)); they are members of the public types only.
#pragma once

#define DISTCOMM_DEFAULT(value) = value
#define DISTCOMM_NO_DEFAULT(value)

// clang-format off
#define DISTCOMM_COLLECTIVES(X, D)                                                                 \
  /* Out of place: `out` becomes the reduction of every rank's `in`. `in` is only read. */        \
  X(allreduce, (tensor_view in, tensor_view out, reduce_op op D(reduce_op::sum)), (in, out, op))   \
  /* Grouped allreduce of a whole gradient set, in place, fused by the Fusion policy. */           \
  X(allreduce, (span<const tensor_view> tensors, reduce_op op D(reduce_op::sum)), (tensors, op))   \
  /* `in` holds size() blocks of out.count elements; rank r receives the reduction of block r. */ \
  X(reduce_scatter, (tensor_view in, tensor_view out, reduce_op op D(reduce_op::sum)),            \
    (in, out, op))                                                                                 \
  /* `out` holds size() blocks of in.count elements, block r from rank r. */                       \
  X(allgather, (tensor_view in, tensor_view out), (in, out))                                       \
  /* Every rank's `data` becomes root's `data`. */                                                 \
  X(broadcast, (tensor_view data, int root), (data, root))                                         \
  /* `in` and `out` hold size() blocks of the same count: block q of `in` goes to rank q, block q  \
     of `out` comes from rank q. */                                                                \
  X(alltoall, (tensor_view in, tensor_view out), (in, out))                                        \
  /* Ragged alltoall: send_counts[q] elements of `in` go to rank q, recv_counts[q] elements of     \
     `out` come from it; zeros allowed. Displacements (elements) say where each block starts;      \
     without them the blocks are packed in rank order. Each pair of ranks checks that what one     \
     sends is what the other expects (a mismatch_error naming both otherwise). */                  \
  X(alltoallv, (tensor_view in, span<const std::size_t> send_counts, tensor_view out,              \
                span<const std::size_t> recv_counts, span<const std::size_t> send_displs D({}),    \
                span<const std::size_t> recv_displs D({})),                                        \
    (in, send_counts, out, recv_counts, send_displs, recv_displs))                                 \
  /* Ragged allgather: rank q's `in` (counts[q] elements, zero allowed) lands in `out` at          \
     displs[q] (packed in rank order without displs). Every rank passes the same counts. */        \
  X(allgatherv, (tensor_view in, tensor_view out, span<const std::size_t> counts,                  \
                 span<const std::size_t> displs D({})),                                            \
    (in, out, counts, displs))                                                                     \
  /* The root's `out` becomes the reduction of every rank's `in` (in place: in == out). `out` is   \
     not touched on the other ranks (pass an empty view). */                                       \
  X(reduce, (tensor_view in, tensor_view out, reduce_op op, int root), (in, out, op, root))        \
  /* The root's `out` holds size() blocks of in.count elements, block q from rank q; `out` is not  \
     touched on the other ranks. */                                                                \
  X(gather, (tensor_view in, tensor_view out, int root), (in, out, root))                          \
  /* Every rank's `out` becomes block rank() of the root's `in` (size() blocks of out.count        \
     elements); `in` is not read on the other ranks. */                                            \
  X(scatter, (tensor_view in, tensor_view out, int root), (in, out, root))                         \
  /* Point-to-point messages for users (pipeline parallelism): `data` to or from rank `peer`,      \
     with a tag of the user's (0 <= tag < 2^30) on a tag space no collective uses. Messages of one \
     sender, receiver and tag match in the order they were sent; a receive whose size differs from \
     the send is a mismatch_error (no truncation), and each has the communicator's deadline. They  \
     are posted in order with the communicator's collectives, as on a stream. The blocking forms   \
     also complete there: two ranks that both send() before they recv() wait for each other (until \
     the deadline) unless the messages are small. The non-blocking forms complete in the          \
     background, the calls after them starting meanwhile: both ranks may isend, then irecv, and    \
     wait for both; sendrecv is the blocking form of that exchange. */                             \
  X(send, (tensor_view data, int peer, int tag D(0)), (data, peer, tag))                           \
  X(recv, (tensor_view data, int peer, int tag D(0)), (data, peer, tag))                           \
  /* A receive from any rank (MPI_ANY_SOURCE): the first message on `tag` to arrive that no      \
     receive posted before takes; `*source` holds its sender once the call completes. On backends \
     with irecv_any (local, shm, gloo, ucx; backend.hpp), invalid_argument_error naming the      \
     backend on the others; `data` has at least one element (an empty send posts no message). */  \
  X(recv_any, (tensor_view data, int* source, int tag D(0)), (data, source, tag))                  \
  X(sendrecv, (tensor_view out, int dest, tensor_view in, int source, int tag D(0)),               \
    (out, dest, in, source, tag))                                                                  \
  /* No rank leaves it before every rank entered it. With the mismatch check on, the agreement     \
     that precedes every collective is a barrier by itself: nothing more is sent. */               \
  X(barrier, (), ())

#define DISTCOMM_COLLECTIVE_FORMS(X, D)                                                            \
  /* In place: every rank's `data` becomes the reduction of all ranks' `data`. */                  \
  X(allreduce, (tensor_view data, reduce_op op D(reduce_op::sum)), (data, data, op))
// clang-format on
