/* SPDX-License-Identifier: MIT */
/*
 * What `farpage vm` hands to libfarpage-preload in QEMU's environment
 * (vm/preload.c says how the two place QEMU's guest RAM in a region).
 */
#ifndef VM_VM_H
#define VM_VM_H

#define VM_ENV_REGION "FARPAGE_VM_REGION" /* the region's name */
#define VM_ENV_FD     "FARPAGE_VM_FD"	  /* the sealed memfd QEMU opens */
/* words, each followed by a comma: "prefetch", "movable", "incoming" */
#define VM_ENV_FLAGS "FARPAGE_VM_FLAGS"

/* The memory backend `farpage vm` adds to QEMU's command line. */
#define VM_BACKEND_ID "farpage-ram"

/* Where `farpage vm` looks for the library, beside its own binary. */
#define VM_PRELOAD_NAME "libfarpage-preload.so"
#define VM_PRELOAD_ENV	"FARPAGE_PRELOAD"

#endif
