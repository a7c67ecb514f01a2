/* DistComm store plugin ABI, version 1. A store plugin is a shared object
 * (libdistcomm_store_<scheme>.so) exporting the C function
 *     const distcomm_store_plugin_table_v1* distcomm_store_plugin_v1(void);
 * that returns a table valid for as long as the object stays loaded. DISTCOMM_STORE=<scheme>://...
 * selects it; its open() connects to the store the rest of the URL names and fills a
 * distcomm_opened_store_v1: the calls of the job's store as a backend plugin sees it
 * (distcomm_store_v1 of distcomm_backend_v1.h), plus wait, compare_set and close.
 * Everything that crosses this boundary is C: status codes and an error text, never exceptions.
 *
 * THIS HEADER IS NEVER EDITED ONCE RELEASED. A later version is a new header and a new symbol.
 *
 * Contract (DistComm's store, include/distcomm/rendezvous/store.hpp): keys are NUL-terminated
 * strings of at most 4096 bytes, values at most 16 MiB; add() keeps the integer as decimal text;
 * compare_set() treats an absent key as equal to an empty expected value and returns the value
 * after the call (empty when the key stays absent); every wait ends at its deadline with
 * DISTCOMM_V1_TIMEOUT and a text naming the keys still missing. One opened store may be used from
 * several threads at once. */
#ifndef DISTCOMM_STORE_PLUGIN_V1_H
#define DISTCOMM_STORE_PLUGIN_V1_H

#include "distcomm/distcomm_backend_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DISTCOMM_STORE_PLUGIN_V1_VERSION 1
#define DISTCOMM_STORE_PLUGIN_V1_SYMBOL "distcomm_store_plugin_v1"

/* What open() is given. Fields are only ever appended; struct_size says how many were filled. */
typedef struct {
  size_t struct_size;
  const char* url;     /* the whole URL, for messages */
  const char* address; /* what follows "<scheme>://" */
  double timeout_s;    /* to reach the store; then the deadline of waits without one */
  const char* token;   /* DISTCOMM_AUTH_TOKEN(_FILE), "" when none */
  const char* job_id;  /* the job's id as the launcher says it, "" when unsaid */
  int32_t world_size;  /* the job's number of ranks, 0 when unsaid */
  int32_t rank;        /* the launcher's rank of this process, for messages */
  /* Where the plugin's lines go: the host's log (distcomm_log_level_v1); NULL: nowhere. */
  void (*log)(void* log_user, int level, const char* message);
  void* log_user;
} distcomm_store_open_args_v1;

/* An opened store. base.user is the plugin's context, passed back to every call. */
typedef struct {
  distcomm_store_v1 base;
  /* Waits until every one of the count keys is set, or the deadline passes (TIMEOUT). */
  int (*wait)(void* user, const char* const* keys, size_t count, int64_t deadline_ns,
              distcomm_error_v1* err);
  /* As the contract says; the result is copied like get()'s: *size is its size either way. */
  int (*compare_set)(void* user, const char* key, const void* expected, size_t expected_size,
                     const void* desired, size_t desired_size, void* buffer, size_t capacity,
                     size_t* size, distcomm_error_v1* err);
  /* Disconnects and frees the context; nothing is called on it afterwards. */
  void (*close)(void* user);
} distcomm_opened_store_v1;

typedef struct {
  uint32_t version; /* DISTCOMM_STORE_PLUGIN_V1_VERSION */
  uint32_t struct_size;
  const char* scheme; /* what DISTCOMM_STORE names it by */
  int (*open)(const distcomm_store_open_args_v1* args, distcomm_opened_store_v1* out,
              distcomm_error_v1* err);
} distcomm_store_plugin_table_v1;

typedef const distcomm_store_plugin_table_v1* (*distcomm_store_plugin_v1_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* DISTCOMM_STORE_PLUGIN_V1_H */
