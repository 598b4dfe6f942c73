// SPDX-License-Identifier: MIT
/*
 * What the etcd store's files share (coord_etcd_int.h): its keys and its
 * error messages.
 */
#define LOG_PREFIX "coord: "
#include "coord_etcd_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "etcd.h"
#include "log.h"

/* P followed by @fmt into @buf; returns the key's length. */
size_t cse_key(const struct coord_store_etcd *s, char *buf, const char *fmt,
	       ...)
{
	size_t n = strlen(s->prefix);
	va_list ap;

	memcpy(buf, s->prefix, n);
	va_start(ap, fmt);
	vsnprintf(buf + n, COORD_ETCD_KEY_MAX - n, fmt, ap);
	va_end(ap);
	return strlen(buf);
}

int cse_err(const struct coord_store_etcd *s, int ret, const char *what)
{
	log_err("etcd (%s): %s: %s (%s)", etcd_endpoint(s->e), what,
		etcd_last_error(s->e), log_strerror(ret));
	return ret;
}

int cse_password_read(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "re");
	size_t n;
	int ret = 0;

	if (!f) {
		ret = -errno;
		log_errno(ret, "--etcd-password-file %s", path);
		return ret;
	}
	if (!fgets(buf, (int)len, f)) {
		log_err("--etcd-password-file %s: empty", path);
		ret = -EINVAL;
	} else {
		n = strcspn(buf, "\r\n");
		if (!buf[n] && !feof(f)) {
			log_err("--etcd-password-file %s: a first line over "
				"%zu "
				"bytes",
				path, len - 1);
			ret = -EINVAL;
		}
		buf[n] = '\0';
	}
	fclose(f);
	return ret;
}
