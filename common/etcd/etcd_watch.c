/* SPDX-License-Identifier: MIT */
/* Watch: one streaming POST to /v3/watch, its newline-separated messages
 * parsed as they arrive, reopened from the next revision when it breaks. */
#define LOG_PREFIX "etcd: "
#include "etcd_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include <json-c/json.h>

#include "log.h"

struct watch {
	struct etcd *e;
	struct etcd_watch_args *a;
	int64_t next_rev; /* the first revision not yet delivered */
	int created;	  /* this stream's watch was created */
	int ret;	  /* why the stream ended; 0 = it just broke */
	int done;	  /* ret is final: no reopening */
	char *buf;	  /* bytes of an unfinished message */
	size_t len;
	size_t cap;
};

/* Delivers a message's events past next_rev (a reopened stream may repeat
 * the ones of the revision it restarted at). */
static int watch_deliver(struct watch *w, struct etcd_watch_msg *m)
{
	size_t i = 0;
	int ret;

	while (i < m->n && m->ev[i].kv.mod_rev < w->next_rev)
		i++;
	if (i == m->n)
		return 0;
	ret = w->a->fn(w->a->arg, m->ev + i, m->n - i);
	w->next_rev = m->ev[m->n - 1].kv.mod_rev + 1;
	return ret;
}

static int watch_msg(struct watch *w, const char *p, size_t n)
{
	struct etcd_watch_msg m;
	struct json_object *o;
	int ret;

	ret = etcd_resp_parse(p, n, 0, &o, w->e->err, sizeof(w->e->err));
	if (ret)
		return ret;
	ret = etcd_json_watch(o, &m);
	json_object_put(o);
	if (ret) {
		etcd_events_free(m.ev, m.n);
		return etcd_fail(w->e, ret, "malformed watch message");
	}
	if (m.canceled) {
		w->a->compact_rev = m.compact_rev;
		ret = m.compact_rev
			      ? etcd_fail(w->e, -ESTALE,
					  "watch from %lld: compacted up to "
					  "%lld",
					  (long long)w->next_rev,
					  (long long)m.compact_rev)
			      /* e.g. an expired token: -EACCES, reopened */
			      : etcd_fail(w->e, etcd_err_map(2, m.reason),
					  "watch canceled: %s", m.reason);
	} else if (m.created) {
		w->created = 1;
		if (!w->next_rev)
			w->next_rev = m.rev + 1;
	} else {
		ret = watch_deliver(w, &m);
	}
	etcd_events_free(m.ev, m.n);
	return ret;
}

static size_t on_stream(char *p, size_t size, size_t n, void *arg)
{
	struct watch *w = arg;
	size_t len = size * n, start = 0, i, cap;
	char *b;

	if (len > ETCD_RESP_MAX - w->len) {
		w->ret =
			etcd_fail(w->e, -EBADMSG, "watch message over %u bytes",
				  ETCD_RESP_MAX);
		w->done = 1;
		return 0;
	}
	if (w->len + len > w->cap) {
		cap = w->cap ? w->cap : 4096;
		while (cap < w->len + len)
			cap *= 2;
		b = realloc(w->buf, cap);
		if (!b) {
			w->ret = -ENOMEM;
			w->done = 1;
			return 0;
		}
		w->buf = b;
		w->cap = cap;
	}
	memcpy(w->buf + w->len, p, len);
	w->len += len;
	for (i = 0; i < w->len; i++) {
		if (w->buf[i] != '\n')
			continue;
		if (i > start) {
			w->ret = watch_msg(w, w->buf + start, i - start);
			if (w->ret) {
				/* no leader at this member, or an expired
				 * token: reopen (elsewhere); else final */
				w->done =
					w->ret != -EAGAIN && w->ret != -EACCES;
				return 0;
			}
		}
		start = i + 1;
	}
	memmove(w->buf, w->buf + start, w->len - start);
	w->len -= start;
	return len;
}

static int on_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut,
		       curl_off_t un)
{
	struct watch *w = arg;

	if (w->a->stop && __atomic_load_n(w->a->stop, __ATOMIC_ACQUIRE)) {
		w->done = 1;
		return 1;
	}
	return 0;
}

static int watch_body(struct watch *w, char **body)
{
	struct etcd_watch_args *a = w->a;
	struct json_object *req, *c;
	const char *s;
	int ret = -ENOMEM;

	req = json_object_new_object();
	c = json_object_new_object();
	if (!req || !c || json_object_object_add(req, "create_request", c)) {
		json_object_put(c);
		goto out;
	}
	ret = etcd_json_add_bytes(c, "key", a->key_len ? a->key : "",
				  a->key_len ? a->key_len : 1);
	if (!ret && a->prefix)
		ret = etcd_json_add_prefix_end(c, a->key, a->key_len);
	if (!ret && w->next_rev)
		ret = etcd_json_add_i64(c, "start_revision", w->next_rev);
	if (ret)
		goto out;
	s = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
	*body = s ? strdup(s) : NULL;
	ret = *body ? 0 : -ENOMEM;
out:
	json_object_put(req);
	return ret;
}

/* One stream at the current endpoint, until it ends. Returns 0 when it
 * broke (reopen it), or why it must not be reopened. */
static int watch_stream(struct watch *w, CURL *curl)
{
	struct curl_slist *h = NULL, *h2;
	char url[1200], hdr[1024], *body = NULL;
	CURLcode c;
	int ret;

	ret = watch_body(w, &body);
	if (ret)
		return etcd_fail(w->e, ret, "out of memory");
	snprintf(url, sizeof(url), "%s/v3/watch", etcd_endpoint(w->e));
	curl_easy_reset(curl);
	ret = etcd_curl_setup(w->e, curl, url);
	h = curl_slist_append(NULL, "Content-Type: application/json");
	if (h && w->e->token) {
		snprintf(hdr, sizeof(hdr), "Authorization: %s", w->e->token);
		h2 = curl_slist_append(h, hdr);
		h = h2 ? h2 : (curl_slist_free_all(h), NULL);
	}
	if (!ret && !h)
		ret = etcd_fail(w->e, -ENOMEM, "out of memory");
	if (ret)
		goto out;
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_stream);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, w);
	curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(curl, CURLOPT_XFERINFODATA, w);
	/* a member that vanished without a FIN (power, partition) */
	curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(curl, CURLOPT_TCP_KEEPIDLE, 5L);
	curl_easy_setopt(curl, CURLOPT_TCP_KEEPINTVL, 2L);
	w->created = 0;
	w->ret = 0;
	w->len = 0;
	c = curl_easy_perform(curl);
	if (w->ret || w->done || c == CURLE_OK)
		ret = w->ret;
	else if (c == CURLE_COULDNT_CONNECT || c == CURLE_OPERATION_TIMEDOUT ||
		 c == CURLE_SSL_CONNECT_ERROR)
		ret = etcd_fail(w->e, -ECONNREFUSED, "%s: %s", url,
				curl_easy_strerror(c));
	else
		ret = etcd_fail(w->e, 0, "%s: %s", url, curl_easy_strerror(c));
out:
	curl_slist_free_all(h);
	free(body);
	return ret;
}

static void pause_ms(long ms)
{
	struct timespec ts = { ms / 1000, ms % 1000 * 1000000 };

	nanosleep(&ts, NULL);
}

int etcd_watch(struct etcd *e, struct etcd_watch_args *a)
{
	struct watch w = { .e = e, .a = a, .next_rev = a->start_rev };
	int64_t since = etcd_now_ms();
	size_t refused = 0;
	int renewed = 0;
	CURL *curl;
	int ret;

	a->compact_rev = 0;
	if (!a->fn || (!a->key_len && !a->prefix))
		return etcd_fail(e, -EINVAL, "watch: no callback or no key");
	curl = curl_easy_init();
	if (!curl)
		return etcd_fail(e, -ENOMEM, "out of memory");
	for (;;) {
		if (e->user && !e->token && !e->auth_off) {
			ret = etcd_auth(e);
			if (ret)
				break;
		}
		w.done = 0;
		ret = watch_stream(&w, curl);
		if (w.done || (ret && ret != -ECONNREFUSED && ret != -EAGAIN &&
			       ret != -EACCES))
			break;
		if (ret == -EACCES) {
			/* refused with a token just taken: not an expiry */
			if (!e->user || renewed)
				break;
			renewed = 1;
			free(e->token); /* expired: a new one next time */
			e->token = NULL;
			e->auth_off = 0;
		}
		if (w.created && ret != -EACCES)
			renewed = 0; /* the token worked */
		if (w.created) {
			refused = 0;
			since = etcd_now_ms();
		} else if (++refused >= e->nep * 3 &&
			   etcd_now_ms() - since > 2 * (int64_t)e->timeout_ms) {
			break; /* no stream for a while, the list tried */
		}
		log_dbg("watch at %s ended (%s), reopening from %lld",
			etcd_endpoint(e), e->err, (long long)w.next_rev);
		if (!w.created) {
			e->cur = (e->cur + 1) % e->nep;
			pause_ms(refused % e->nep ? 10 : 200);
		}
	}
	if (ret == -EAGAIN || (!ret && !w.done))
		ret = etcd_fail(e, -ECONNREFUSED, "watch: %s", e->err);
	curl_easy_cleanup(curl);
	free(w.buf);
	return ret;
}
