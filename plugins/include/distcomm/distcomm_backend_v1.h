/* DistComm backend plugin ABI, version 1. A plugin is a shared object
 * (libdistcomm_backend_<name>.so) exporting the C function
 *     const distcomm_backend_v1* distcomm_backend_plugin_v1(void);
 * that returns a table of function pointers, valid for as long as the object stays loaded (a
 * function rather than a data symbol, so that the table may be built when first asked for).
 * Everything that crosses this boundary is C: status codes and an error text, never exceptions.
 *
 * THIS HEADER IS NEVER EDITED ONCE RELEASED. A later version is a new header
 * (distcomm_backend_v2.h) with a new table and a new symbol; a loader looks for the newest
 * version a plugin exports first, so a plugin built against this header keeps loading.
 *
 * Contract (the same as DistComm's C++ backends, include/distcomm/backend.hpp):
 *  - messages from one sender to one receiver with the same tag match in posting order;
 *  - a receive whose size differs from the matching send fails with DISTCOMM_V1_MISMATCH (the
 *    buffer is not written past its size, nothing is truncated);
 *  - every wait has a deadline: absolute CLOCK_MONOTONIC time in nanoseconds (the clock of
 *    std::chrono::steady_clock on Linux), DISTCOMM_V1_NO_DEADLINE for none;
 *  - once cancel() or free_request() returns, the transport never touches the buffer again; a
 *    cancelled receive that no message matched yet is retracted (that message goes to the next
 *    receive posted for the same peer and tag);
 *  - buffers are host memory, unless the table's flags say DISTCOMM_V1_DEVICE_MEMORY;
 *  - a context is used from one thread at a time; whether distinct contexts may be used from
 *    distinct threads at once is for the plugin to document (MPI's may not).
 * Every call that fails fills the caller's distcomm_error_v1 with a message that says what failed
 * and, when it can, what to do (NUL-terminated, truncated to fit). */
#ifndef DISTCOMM_BACKEND_V1_H
#define DISTCOMM_BACKEND_V1_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The table's version field. */
#define DISTCOMM_BACKEND_V1_VERSION 1
/* The symbol a plugin exports: a function taking nothing, returning the table. */
#define DISTCOMM_BACKEND_V1_SYMBOL "distcomm_backend_plugin_v1"

/* ---- status codes ---------------------------------------------------------------------------- */
typedef enum {
  DISTCOMM_V1_OK = 0,
  DISTCOMM_V1_PENDING = 1,          /* test(): not finished yet (not an error) */
  DISTCOMM_V1_TIMEOUT = 2,          /* a deadline passed */
  DISTCOMM_V1_MISMATCH = 3,         /* sizes of a send and its receive differ */
  DISTCOMM_V1_PEER_LOST = 4,        /* a peer failed, exited or aborted; or abort() was called */
  DISTCOMM_V1_INVALID_ARGUMENT = 5, /* a bad call on this rank; the transport is untouched */
  DISTCOMM_V1_UNSUPPORTED = 6,      /* the plugin does not offer this */
  DISTCOMM_V1_BACKEND_ERROR = 7,    /* anything else the transport reports */
  DISTCOMM_V1_RENDEZVOUS = 8        /* finding or joining the other ranks failed */
} distcomm_status_v1;

/* Caller-owned error text, filled by a failing call. */
typedef struct {
  char text[1024];
} distcomm_error_v1;

/* ---- data types and reductions: values equal DistComm's distcomm::dtype / reduce_op ---------- */
typedef enum {
  DISTCOMM_V1_F16 = 0,
  DISTCOMM_V1_BF16 = 1,
  DISTCOMM_V1_F32 = 2,
  DISTCOMM_V1_F64 = 3,
  DISTCOMM_V1_I8 = 4,
  DISTCOMM_V1_U8 = 5,
  DISTCOMM_V1_I32 = 6,
  DISTCOMM_V1_I64 = 7
} distcomm_dtype_v1;

typedef enum {
  DISTCOMM_V1_SUM = 0,
  DISTCOMM_V1_AVG = 1,
  DISTCOMM_V1_MIN = 2,
  DISTCOMM_V1_MAX = 3,
  DISTCOMM_V1_PROD = 4
} distcomm_reduce_op_v1;

/* Log levels, as DistComm's log_level. */
typedef enum {
  DISTCOMM_V1_LOG_ERROR = 0,
  DISTCOMM_V1_LOG_WARN = 1,
  DISTCOMM_V1_LOG_INFO = 2,
  DISTCOMM_V1_LOG_DEBUG = 3
} distcomm_log_level_v1;

/* Absolute CLOCK_MONOTONIC nanoseconds; this value means "no deadline". */
#define DISTCOMM_V1_NO_DEADLINE INT64_MAX

/* ---- the job's key-value store, offered by the host ------------------------------------------
 * Plugins exchange addresses through it instead of opening a port of their own. The host may
 * connect to the job's store only when a plugin first calls one of these (an MPI plugin that
 * never does needs no rendezvous); that call may then take as long as the rendezvous does.
 * Keys are NUL-terminated strings of at most 4096 bytes, values at most 16 MiB. */
typedef struct {
  void* user; /* passed back as the first argument of every call */
  /* Sets key to value (overwrites). */
  int (*set)(void* user, const char* key, const void* value, size_t size, distcomm_error_v1* err);
  /* Waits until key is set or the deadline passes (DISTCOMM_V1_TIMEOUT, naming the key). Then
   * copies the value into buffer when it fits in capacity and sets *size to the value's size
   * either way: a caller whose buffer was too small calls again with *size bytes. */
  int (*get)(void* user, const char* key, int64_t deadline_ns, void* buffer, size_t capacity,
             size_t* size, distcomm_error_v1* err);
  /* Atomically adds delta to the integer at key (absent = 0); *result is the new value. */
  int (*add)(void* user, const char* key, int64_t delta, int64_t* result, distcomm_error_v1* err);
  /* *all_set = 1 when every one of the count keys is set, else 0; never waits. */
  int (*check)(void* user, const char* const* keys, size_t count, int* all_set,
               distcomm_error_v1* err);
  /* Says the job has failed (call it from abort()): a host that serves the store then stops
   * serving at exit instead of waiting for ranks that may never come. */
  void (*mark_failed)(void* user);
} distcomm_store_v1;

/* ---- init arguments --------------------------------------------------------------------------
 * Fields are only ever appended in this version's lifetime; struct_size says how many the host
 * filled (sizeof(distcomm_init_args_v1) of the header it was built with). */
typedef struct {
  size_t struct_size;
  int32_t rank;       /* this process's rank as the launcher said it, or -1 when unknown */
  int32_t size;       /* the number of ranks as the launcher said it, or -1 when unknown */
  int32_t local_rank; /* rank among the ranks on this node, or -1 when unknown */
  int32_t local_size; /* ranks on this node, or -1 when unknown */
  int32_t log_level;  /* the host's distcomm_log_level_v1: it drops lines above it anyway */
  double timeout_s;   /* DISTCOMM_TIMEOUT: bounds start-up and every wait the host does not bound */
  /* Where the plugin's lines go: the host's log, at the given level; NULL: nowhere. */
  void (*log)(void* log_user, int level, const char* message);
  void* log_user;
  /* The job's store; NULL when the host offers none (a world of one). */
  const distcomm_store_v1* store;
  /* Free-form options for this plugin (DISTCOMM_PLUGIN_OPTIONS), or NULL. */
  const char* options;
} distcomm_init_args_v1;

/* Flags of distcomm_backend_v1.flags. */
/* The native collectives reduce in rank order (DISTCOMM_DETERMINISTIC may use them). */
#define DISTCOMM_V1_NATIVE_DETERMINISTIC 0x1u
/* A message nobody ever receives is harmless (unset: the host sends none, e.g. no farewell
 * notices; MPI reuses a freed communicator's context id and would deliver it elsewhere). */
#define DISTCOMM_V1_UNRECEIVED_MESSAGES_OK 0x2u
/* The buffers are CUDA device memory, not host memory (NCCL). A host that passes host memory (or
 * reduces on the host, as DistComm's point-to-point strategies do) refuses such a plugin. */
#define DISTCOMM_V1_DEVICE_MEMORY 0x4u

/* An opaque request handle. */
typedef struct distcomm_request_v1 distcomm_request_v1;

/* ---- the table ------------------------------------------------------------------------------ */
typedef struct {
  uint32_t version;     /* DISTCOMM_BACKEND_V1_VERSION */
  uint32_t struct_size; /* sizeof(distcomm_backend_v1) */
  const char* name;     /* the backend's name, e.g. "tcp" (what DISTCOMM_BACKEND names) */
  uint32_t flags;       /* DISTCOMM_V1_* flags above */
  /* strategy::automatic's table on this backend (e.g. "rd:0-16K;ring:16K-max"), or NULL. */
  const char* default_algo;
  uint64_t default_segment_bytes; /* pipelining segment; 0: DistComm's default */
  uint64_t default_fusion_cutoff; /* Tensor Fusion cutoff; 0: DistComm's default */

  /* Joins the job as one rank (collective over the ranks: each calls it once per backend it
   * makes, in the same order) and sets *ctx. On failure *ctx is left unset. */
  int (*init)(void** ctx, const distcomm_init_args_v1* args, distcomm_error_v1* err);
  /* Releases ctx; every request of it has been freed before. Never fails. */
  void (*finalize)(void* ctx);
  int (*rank)(void* ctx);
  int (*size)(void* ctx);

  /* Non-blocking point-to-point. *req is set on success; the buffer belongs to the transport
   * until the request completed, was cancelled or freed. */
  int (*isend)(void* ctx, const void* data, size_t bytes, int peer, uint32_t tag,
               distcomm_request_v1** req, distcomm_error_v1* err);
  int (*irecv)(void* ctx, void* data, size_t bytes, int peer, uint32_t tag,
               distcomm_request_v1** req, distcomm_error_v1* err);
  /* DISTCOMM_V1_OK once finished, DISTCOMM_V1_PENDING while not, else the failure (again on
   * every later call). */
  int (*test)(void* ctx, distcomm_request_v1* req, distcomm_error_v1* err);
  /* Waits until finished (DISTCOMM_V1_OK), failed, or the deadline passed (DISTCOMM_V1_TIMEOUT,
   * naming the peer, the tag and the bytes; the request may have been cancelled then: free it). */
  int (*wait)(void* ctx, distcomm_request_v1* req, int64_t deadline_ns, distcomm_error_v1* err);
  /* Stops a pending request; after it returns the buffer is not touched. Never fails. */
  void (*cancel)(void* ctx, distcomm_request_v1* req);
  /* Releases a request, cancelling it first when pending. Never fails. */
  void (*free_request)(void* ctx, distcomm_request_v1* req);

  /* Fails every pending and later wait of this rank with DISTCOMM_V1_PEER_LOST(reason), and tells
   * the peers when it can, so that their waits on this rank fail too. Never fails. */
  void (*abort)(void* ctx, const char* reason);

  /* Optional (NULL when absent): a small send nobody waits for; the bytes are copied at once and
   * delivered in order with the sender's other messages on that tag. */
  int (*send_detached)(void* ctx, const void* data, size_t bytes, int peer, uint32_t tag,
                       distcomm_error_v1* err);

  /* Optional native collectives (NULL when absent), blocking until done or the deadline. Counts
   * are elements; in == out is allowed (in place). reduce_scatter: in holds size blocks of
   * recv_count, rank r gets the reduction of block r. allgather: out holds size blocks of
   * send_count, block r from rank r. */
  int (*allreduce)(void* ctx, const void* in, void* out, size_t count, int dtype, int op,
                   int64_t deadline_ns, distcomm_error_v1* err);
  int (*reduce_scatter)(void* ctx, const void* in, void* out, size_t recv_count, int dtype, int op,
                        int64_t deadline_ns, distcomm_error_v1* err);
  int (*allgather)(void* ctx, const void* in, void* out, size_t send_count, int dtype,
                   int64_t deadline_ns, distcomm_error_v1* err);
  int (*broadcast)(void* ctx, void* data, size_t count, int dtype, int root, int64_t deadline_ns,
                   distcomm_error_v1* err);
  int (*barrier)(void* ctx, int64_t deadline_ns, distcomm_error_v1* err);
} distcomm_backend_v1;

/* The type of the exported entry point, DISTCOMM_BACKEND_V1_SYMBOL. */
typedef const distcomm_backend_v1* (*distcomm_backend_plugin_v1_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* DISTCOMM_BACKEND_V1_H */
