/* Broken plugins for test_plugin_loader, one per FIXTURE value, written in C99 against the ABI
 * header only (so the header is also checked to be valid C). Each is as small as it can be while
 * failing in one way:
 *   1 nosymbol    exports no ABI entry point
 *   2 badversion  its table says version 99
 *   3 initfails   init logs a line, then returns DISTCOMM_V1_RENDEZVOUS with a text of its own
 *   4 incomplete  its table lacks isend
 *   5 device      its table says DISTCOMM_V1_DEVICE_MEMORY
 *   6 declared    a sound table and a declaration (distcomm_backend_traits_v1.h): processes,
 *                 store and grow
 *   7 olddeclared its declaration says version 99
 *   8 overdeclared its declaration has a capability bit no DistComm knows
 *   9 zerosize    size() returns 0
 *  10 badrank     rank() returns 1 in a world of 1
 *  11 nullrequest isend and irecv return OK without a request
 */
#include <stdio.h>
#include <string.h>

#include "distcomm/distcomm_backend_traits_v1.h"
#include "distcomm/distcomm_backend_v1.h"

#if FIXTURE == 1

int distcomm_something_else(void) { return 1; }

#else

static int the_ctx;

static int fixture_init(void** ctx, const distcomm_init_args_v1* args, distcomm_error_v1* err) {
  (void)args;
#if FIXTURE == 3
  (void)ctx;
  if (args->log != NULL) {
    args->log(args->log_user, DISTCOMM_V1_LOG_WARN, "fixture: looking for the fabric manager");
  }
  snprintf(err->text, sizeof err->text, "fixture: cannot reach the fabric manager at 10.0.0.1");
  return DISTCOMM_V1_RENDEZVOUS;
#else
  (void)err;
  *ctx = &the_ctx;
  return DISTCOMM_V1_OK;
#endif
}
static void fixture_finalize(void* ctx) { (void)ctx, (void)the_ctx; }
static int fixture_rank(void* ctx) {
  (void)ctx;
  return FIXTURE == 10 ? 1 : 0;
}
static int fixture_size(void* ctx) {
  (void)ctx;
  return FIXTURE == 9 ? 0 : 1;
}
static int fixture_isend(void* ctx, const void* data, size_t bytes, int peer, uint32_t tag,
                         distcomm_request_v1** req, distcomm_error_v1* err) {
  (void)ctx, (void)data, (void)bytes, (void)peer, (void)tag, (void)req;
#if FIXTURE == 11
  (void)err;
  return DISTCOMM_V1_OK;
#else
  snprintf(err->text, sizeof err->text, "fixture: no transport");
  return DISTCOMM_V1_UNSUPPORTED;
#endif
}
static int fixture_irecv(void* ctx, void* data, size_t bytes, int peer, uint32_t tag,
                         distcomm_request_v1** req, distcomm_error_v1* err) {
  return fixture_isend(ctx, data, bytes, peer, tag, req, err);
}
static int fixture_test(void* ctx, distcomm_request_v1* req, distcomm_error_v1* err) {
  (void)ctx, (void)req, (void)err;
  return DISTCOMM_V1_OK;
}
static int fixture_wait(void* ctx, distcomm_request_v1* req, int64_t deadline_ns,
                        distcomm_error_v1* err) {
  (void)deadline_ns;
  return fixture_test(ctx, req, err);
}
static void fixture_release(void* ctx, distcomm_request_v1* req) { (void)ctx, (void)req; }
static void fixture_abort(void* ctx, const char* reason) { (void)ctx, (void)reason; }

const distcomm_backend_v1* distcomm_backend_plugin_v1(void) {
  static distcomm_backend_v1 t;
  memset(&t, 0, sizeof t);
  t.version = FIXTURE == 2 ? 99 : DISTCOMM_BACKEND_V1_VERSION;
  t.struct_size = sizeof t;
  t.name = "fixture";
  t.flags = FIXTURE == 5 ? DISTCOMM_V1_DEVICE_MEMORY : 0;
  t.init = fixture_init;
  t.finalize = fixture_finalize;
  t.rank = fixture_rank;
  t.size = fixture_size;
  t.isend = FIXTURE == 4 ? NULL : fixture_isend;
  t.irecv = fixture_irecv;
  t.test = fixture_test;
  t.wait = fixture_wait;
  t.cancel = fixture_release;
  t.free_request = fixture_release;
  t.abort = fixture_abort;
  return &t;
}

#if FIXTURE >= 6
const distcomm_backend_traits_v1* distcomm_backend_plugin_v1_traits(void) {
  static distcomm_backend_traits_v1 d;
  memset(&d, 0, sizeof d);
  d.version = FIXTURE == 7 ? 99 : DISTCOMM_BACKEND_TRAITS_V1_VERSION;
  d.struct_size = sizeof d;
  d.capabilities = DISTCOMM_V1_CAN_PROCESSES | DISTCOMM_V1_CAN_STORE | DISTCOMM_V1_CAN_GROW |
                   (FIXTURE == 8 ? 0x80000000u : 0u);
  d.summary = "a fixture that declares itself";
  return &d;
}
#endif

#endif
