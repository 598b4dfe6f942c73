/* SPDX-License-Identifier: MIT */
/*
 * Buffers of 4 KiB to 1 MiB kept for reuse by one thread, by power-of-two
 * size class, up to a bound in bytes. Large malloc()/free() pairs cost page
 * faults and TLB shootdowns every time (glibc hands the memory back to the
 * kernel); a page server sealing a copy of every reply cannot pay that.
 */
#ifndef COMMON_BUFPOOL_H
#define COMMON_BUFPOOL_H

#include <stddef.h>
#include <stdint.h>

#define BUFPOOL_MIN_SHIFT 12
#define BUFPOOL_CLASSES	  9 /* 4 KiB .. 1 MiB */
#define BUFPOOL_MAX	  ((size_t)1 << (BUFPOOL_MIN_SHIFT + BUFPOOL_CLASSES - 1))

/* Zeroed (static or calloc'd) is an empty pool keeping nothing. */
struct bufpool {
	void *free[BUFPOOL_CLASSES];
	size_t cached; /* bytes kept */
	size_t limit;  /* keep no more than this */
};

/* An empty pool that keeps up to @limit bytes of freed buffers. */
void bufpool_init(struct bufpool *p, size_t limit);
/* Frees every buffer kept. */
void bufpool_fini(struct bufpool *p);

/*
 * A buffer of at least @len bytes (1 .. BUFPOOL_MAX): one kept, or a new
 * one. Returns NULL if @len is out of range or memory is short.
 */
void *bufpool_get(struct bufpool *p, size_t len);
/* Gives back a buffer bufpool_get() returned for @len; NULL: no-op. */
void bufpool_put(struct bufpool *p, void *buf, size_t len);

#endif
