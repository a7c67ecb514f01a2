/* DistComm backend plugin ABI, version 1, extension "traits": what the plugin's backend is and
 * can do, the declaration a built backend makes in its header (distcomm/backend_traits.hpp). A
 * plugin of version 1 (distcomm_backend_v1.h) may export, besides its table, the C function
 *     const distcomm_backend_traits_v1* distcomm_backend_plugin_v1_traits(void);
 * returning a struct valid for as long as the object stays loaded. A loader that knows this
 * extension reads it when present and checks its version; one that does not ignores it, so a
 * plugin that exports it still loads everywhere a version 1 plugin does. A plugin without it is
 * taken to run its ranks as processes meeting through the job's store, and nothing more: no
 * split, shrink or grow.
 *
 * THIS HEADER IS NEVER EDITED ONCE RELEASED. More facts are a new extension header. */
#ifndef DISTCOMM_BACKEND_TRAITS_V1_H
#define DISTCOMM_BACKEND_TRAITS_V1_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The struct's version field. */
#define DISTCOMM_BACKEND_TRAITS_V1_VERSION 1
/* The symbol a plugin exports: a function taking nothing, returning the struct. */
#define DISTCOMM_BACKEND_TRAITS_V1_SYMBOL "distcomm_backend_plugin_v1_traits"

/* Capability bits, the values of distcomm::capability. */
#define DISTCOMM_V1_CAN_PROCESSES 0x1u   /* its ranks are processes (else threads of one) */
#define DISTCOMM_V1_CAN_STORE 0x2u       /* its ranks meet through the job's key-value store */
#define DISTCOMM_V1_CAN_MPI_WORLD 0x4u   /* its world is MPI_COMM_WORLD (mpirun starts ranks) */
#define DISTCOMM_V1_CAN_SINGLE_HOST 0x8u /* every rank is on one host */
#define DISTCOMM_V1_CAN_SPLIT 0x10u      /* sub-communicators */
#define DISTCOMM_V1_CAN_SHRINK 0x20u     /* the survivors of a lost rank go on */
#define DISTCOMM_V1_CAN_GROW 0x40u       /* replacements join a running job */

typedef struct {
  uint32_t version;      /* DISTCOMM_BACKEND_TRAITS_V1_VERSION */
  uint32_t struct_size;  /* sizeof(distcomm_backend_traits_v1) */
  uint32_t capabilities; /* DISTCOMM_V1_CAN_* bits */
  /* One line saying what the backend is, for help texts, or NULL. */
  const char* summary;
} distcomm_backend_traits_v1;

/* The type of the exported function, DISTCOMM_BACKEND_TRAITS_V1_SYMBOL. */
typedef const distcomm_backend_traits_v1* (*distcomm_backend_traits_v1_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* DISTCOMM_BACKEND_TRAITS_V1_H */
