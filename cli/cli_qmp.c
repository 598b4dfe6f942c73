// SPDX-License-Identifier: MIT
/*
 * A QMP client for farpage migrate: one connection to a QEMU's monitor
 * (a Unix socket, or TCP for a QEMU on another host), commands sent one
 * at a time, events skipped (the time of a STOP or RESUME kept). QEMU
 * sends each message as one line of JSON; json-c builds the commands and
 * parses the answers.
 */
#include "cli_qmp.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "evl.h"
#include "net.h"

/* A QMP address: "unix:PATH", a path (with a '/'), "tcp:HOST:PORT" or
 * "HOST:PORT". */
static int qmp_connect(const char *addr, int timeout_ms, int *fd)
{
	if (!strncmp(addr, "unix:", 5))
		return net_unix_connect(addr + 5, fd);
	if (strchr(addr, '/'))
		return net_unix_connect(addr, fd);
	if (!strncmp(addr, "tcp:", 4))
		addr += 4;
	return net_connect(addr, timeout_ms, fd);
}

/* The next line QEMU sent, parsed (NULL: see the return value): 0,
 * -ETIMEDOUT, -ECONNRESET (closed), -EBADMSG (not JSON, or too long). */
static int qmp_line(struct cli_qmp *q, struct json_object **out)
{
	uint64_t end = evl_now_ms() + (uint64_t)q->timeout_ms;

	*out = NULL;
	for (;;) {
		char *nl = memchr(q->buf, '\n', q->len);
		struct pollfd p = { .fd = q->fd, .events = POLLIN };
		uint64_t now;
		ssize_t n;

		if (nl) {
			size_t len = (size_t)(nl - q->buf) + 1;

			*nl = '\0';
			*out = json_tokener_parse(q->buf);
			memmove(q->buf, q->buf + len, q->len - len);
			q->len -= len;
			return *out ? 0 : -EBADMSG;
		}
		if (q->len == sizeof(q->buf) - 1)
			return -EBADMSG;
		now = evl_now_ms();
		if (now >= end)
			return -ETIMEDOUT;
		if (poll(&p, 1, (int)(end - now)) < 0 && errno != EINTR)
			return -errno;
		if (!(p.revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		n = read(q->fd, q->buf + q->len, sizeof(q->buf) - 1 - q->len);
		if (n < 0 && errno != EINTR && errno != EAGAIN)
			return -errno;
		if (n == 0)
			return -ECONNRESET;
		if (n > 0)
			q->len += (size_t)n;
	}
}

/* @o, not an answer: an event's time is kept if it is STOP or RESUME. */
static void qmp_event(struct cli_qmp *q, struct json_object *o)
{
	const char *ev = cli_qmp_str(o, "event");
	uint64_t us;

	if (strcmp(ev, "STOP") && strcmp(ev, "RESUME"))
		return;
	us = cli_qmp_u64(o, "timestamp.seconds") * 1000000 +
	     cli_qmp_u64(o, "timestamp.microseconds");
	if (!strcmp(ev, "STOP"))
		q->stop_us = us;
	else
		q->resume_us = us;
}

int cli_qmp_open(struct cli_qmp *q, const char *addr, const char *who,
		 int timeout_ms)
{
	struct json_object *greet = NULL, *ret = NULL;
	int err;

	memset(q, 0, sizeof(*q));
	q->fd = -1;
	q->who = who;
	q->timeout_ms = timeout_ms;
	err = qmp_connect(addr, timeout_ms, &q->fd);
	if (err) {
		cli_err("migrate: %s QEMU's monitor at %s: %s", who, addr,
			strerror(-err));
		return err;
	}
	err = qmp_line(q, &greet);
	if (!err && !json_object_object_get_ex(greet, "QMP", NULL))
		err = -EPROTO;
	json_object_put(greet);
	if (err) {
		cli_err("migrate: %s QEMU's monitor at %s: no QMP greeting "
			"(%s): is it a QMP socket (-qmp, not -monitor)?",
			who, addr, strerror(-err));
		cli_qmp_close(q);
		return err;
	}
	err = cli_qmp_cmd(q, "qmp_capabilities", NULL, &ret);
	json_object_put(ret);
	if (err)
		cli_qmp_close(q);
	return err;
}

void cli_qmp_close(struct cli_qmp *q)
{
	if (q->fd >= 0)
		close(q->fd);
	q->fd = -1;
}

int cli_qmp_cmd(struct cli_qmp *q, const char *cmd, struct json_object *args,
		struct json_object **ret)
{
	struct json_object *req = json_object_new_object(), *ans = NULL, *v;
	const char *text;
	int err = -ENOMEM;

	*ret = NULL;
	if (!req || fp_json_set_str(req, "execute", cmd) ||
	    (args && fp_json_set(req, "arguments", json_object_get(args))))
		goto out;
	text = fp_json_text(req);
	if (!text)
		goto out;
	if (dprintf(q->fd, "%s\n", text) < 0) {
		err = -errno;
		cli_err("migrate: %s QEMU: %s: %s", q->who, cmd,
			strerror(-err));
		goto out;
	}
	for (;;) {
		json_object_put(ans);
		err = qmp_line(q, &ans);
		if (err) {
			cli_err("migrate: %s QEMU: %s: no answer: %s", q->who,
				cmd, strerror(-err));
			goto out;
		}
		if (json_object_object_get_ex(ans, "return", &v)) {
			*ret = json_object_get(v);
			err = 0;
			goto out;
		}
		if (json_object_object_get_ex(ans, "error", &v)) {
			struct json_object *d = NULL;

			json_object_object_get_ex(v, "desc", &d);
			cli_err("migrate: %s QEMU: %s: %s", q->who, cmd,
				d ? json_object_get_string(d) : "error");
			err = -EIO;
			goto out;
		}
		/* an event ({"event": ...}): not ours */
		qmp_event(q, ans);
	}
out:
	json_object_put(ans);
	json_object_put(req);
	return err;
}

int cli_qmp_wait(struct cli_qmp *q, int ms)
{
	struct json_object *o = NULL;
	int save = q->timeout_ms, ret;

	q->timeout_ms = ms;
	ret = qmp_line(q, &o);
	q->timeout_ms = save;
	if (!ret)
		qmp_event(q, o);
	json_object_put(o);
	if (ret == -ETIMEDOUT)
		return 0;
	return ret ? ret : 1;
}

const char *cli_qmp_str(struct json_object *o, const char *key)
{
	struct json_object *v;

	if (!o || !json_object_object_get_ex(o, key, &v) ||
	    !json_object_is_type(v, json_type_string))
		return "";
	return json_object_get_string(v);
}

uint64_t cli_qmp_u64(struct json_object *o, const char *path)
{
	char key[64];
	const char *dot;

	while (o && (dot = strchr(path, '.'))) {
		snprintf(key, sizeof(key), "%.*s", (int)(dot - path), path);
		if (!json_object_object_get_ex(o, key, &o))
			return 0;
		path = dot + 1;
	}
	if (!o || !json_object_object_get_ex(o, path, &o) ||
	    !json_object_is_type(o, json_type_int))
		return 0;
	return (uint64_t)json_object_get_int64(o);
}
