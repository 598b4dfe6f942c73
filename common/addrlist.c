// SPDX-License-Identifier: MIT
/* Lists of "host:port" addresses in one option value (addrlist.h). */
#include "addrlist.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "net.h"

/* What is wrong with entry @a (not HOST:PORT), into @why. */
static void addrlist_entry_why(const char *a, const char *port_hint, char *why,
			       size_t why_len)
{
	if (!strchr(a, ':'))
		snprintf(why, why_len,
			 "'%s' has no port: give HOST:PORT, e.g. %s:%s", a, a,
			 port_hint);
	else
		snprintf(why, why_len,
			 "'%s' is not HOST:PORT (an IPv6 address goes in "
			 "brackets: [::1]:%s)",
			 a, port_hint);
}

int addrlist_parse(const char *s, const char *port_hint, struct addrlist *out,
		   char *why, size_t why_len)
{
	char host[256], port[8];
	const char *p = s, *end;
	size_t len;

	out->n = 0;
	snprintf(why, why_len, "%s", "");
	for (;;) {
		end = strchr(p, ',');
		len = end ? (size_t)(end - p) : strlen(p);
		while (len && (*p == ' ' || *p == '\t')) {
			p++;
			len--;
		}
		while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		if (!len) {
			if (!end && !out->n)
				snprintf(why, why_len,
					 "no address: give HOST:PORT, e.g. "
					 "127.0.0.1:%s",
					 port_hint);
			else
				snprintf(why, why_len,
					 "'%s': address %u is empty", s,
					 out->n + 1);
			return -EINVAL;
		}
		if (out->n == ADDRLIST_MAX) {
			snprintf(why, why_len, "'%s': more than %u addresses",
				 s, ADDRLIST_MAX);
			return -EINVAL;
		}
		if (len >= ADDRLIST_ADDR_LEN) {
			snprintf(why, why_len, "address %u is too long",
				 out->n + 1);
			return -EINVAL;
		}
		memcpy(out->addr[out->n], p, len);
		out->addr[out->n][len] = '\0';
		if (net_addr_split(out->addr[out->n], host, sizeof(host), port,
				   sizeof(port))) {
			addrlist_entry_why(out->addr[out->n], port_hint, why,
					   why_len);
			return -EINVAL;
		}
		out->n++;
		if (!end)
			return 0;
		p = end + 1;
	}
}
