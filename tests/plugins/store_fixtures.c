/* Broken store plugins for test_plugin_loader, one per STORE_FIXTURE value, in C99 against the
 * store ABI header only (so it is also checked to be valid C). Each fails in one way:
 *   1 nosymbol     exports no store entry point
 *   2 badversion   its table says version 99
 *   3 otherscheme  its table serves the scheme "other", not its file's
 *   4 openfails    open logs a line, then returns DISTCOMM_V1_TIMEOUT with a text of its own
 *   5 incomplete   open returns OK with a store that lacks compare_set (and counts its close)
 */
#include <stdio.h>
#include <string.h>

#include "distcomm/distcomm_store_plugin_v1.h"

#if STORE_FIXTURE == 1

int distcomm_something_else(void) { return 1; }

#else

static int closed;

/* How many stores this fixture has closed: the test checks that a refused store is closed. */
__attribute__((visibility("default"))) int distcomm_store_fixture_closed(void) { return closed; }

#if STORE_FIXTURE != 4
static int no_set(void* user, const char* key, const void* value, size_t size,
                  distcomm_error_v1* err) {
  (void)user, (void)key, (void)value, (void)size, (void)err;
  return DISTCOMM_V1_UNSUPPORTED;
}

static void close_store(void* user) {
  (void)user;
  ++closed;
}
#endif

static int fixture_open(const distcomm_store_open_args_v1* args, distcomm_opened_store_v1* out,
                        distcomm_error_v1* err) {
#if STORE_FIXTURE == 4
  (void)out;
  if (args->log != NULL) {
    args->log(args->log_user, DISTCOMM_V1_LOG_WARN, "fixture: looking for the store's leader");
  }
  snprintf(err->text, sizeof err->text, "fixture: no leader at %s after %.1f s", args->address,
           args->timeout_s);
  return DISTCOMM_V1_TIMEOUT;
#else
  (void)args, (void)err;
  memset(out, 0, sizeof *out);
  out->base.set = no_set;
  out->close = close_store;
  return DISTCOMM_V1_OK;
#endif
}

static distcomm_store_plugin_table_v1 table;

__attribute__((visibility("default"))) const distcomm_store_plugin_table_v1*
distcomm_store_plugin_v1(void) {
  table.version = STORE_FIXTURE == 2 ? 99 : DISTCOMM_STORE_PLUGIN_V1_VERSION;
  table.struct_size = sizeof table;
  table.scheme = STORE_FIXTURE == 3 ? "other" : STORE_FIXTURE_SCHEME;
  table.open = fixture_open;
  return &table;
}

#endif
