/* SPDX-License-Identifier: MIT */
/*
 * Lists of "host:port" addresses given as one option value, "A,B,C" (the
 * coordinators a client may talk to), and the order a client tries them in.
 */
#ifndef COMMON_ADDRLIST_H
#define COMMON_ADDRLIST_H

#include <stddef.h>
#include <stdint.h>

#define ADDRLIST_MAX	  8   /* addresses in one list */
#define ADDRLIST_ADDR_LEN 272 /* "[" host(255) "]:" port(5) and NUL */

struct addrlist {
	uint32_t n; /* 1..ADDRLIST_MAX once parsed */
	char addr[ADDRLIST_MAX][ADDRLIST_ADDR_LEN];
};

/*
 * Parses @s, "HOST:PORT[,HOST:PORT...]" (blanks around an entry ignored;
 * an IPv6 host in brackets), into @out. Each entry must be net_addr_split()
 * form. Returns 0, or -EINVAL with what is wrong in @why (no program or
 * option name in it; an entry without a port gets "e.g. HOST:@port_hint").
 */
int addrlist_parse(const char *s, const char *port_hint, struct addrlist *out,
		   char *why, size_t why_len);

/* The index after @i, round the list. */
static inline uint32_t addrlist_next(const struct addrlist *l, uint32_t i)
{
	return i + 1 < l->n ? i + 1 : 0;
}

#endif
