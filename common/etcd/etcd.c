/* SPDX-License-Identifier: MIT */
/* The etcd client handle: its endpoints, one POST to the gateway with
 * failover to the next endpoint, auth tokens, and what each failure means
 * for the request's outcome. */
#define LOG_PREFIX "etcd: "
#include "etcd_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <json-c/json.h>

#include "log.h"

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_ret;

static void curl_init(void)
{
	curl_init_ret = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int etcd_fail(struct etcd *e, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(e->err, sizeof(e->err), fmt, ap);
	va_end(ap);
	return err;
}

enum etcd_outcome etcd_err_outcome(int err)
{
	switch (err) {
	case -ECONNREFUSED:
	case -EAGAIN:
	case -EBUSY:
	case -EMSGSIZE:
	case -ENOSPC:
	case -EACCES:
	case -ESTALE:
	case -ENOENT:
	case -EINVAL:
	case -ENOMEM:
		return ETCD_NOT_APPLIED;
	default:
		return ETCD_UNKNOWN_OUTCOME;
	}
}

const char *etcd_last_error(const struct etcd *e)
{
	return e->err;
}

const char *etcd_endpoint(const struct etcd *e)
{
	return e->ep[e->cur];
}

unsigned etcd_set_timeout(struct etcd *e, unsigned ms)
{
	unsigned old = e->timeout_ms;

	e->timeout_ms = ms ? ms : e->timeout_cfg_ms;
	return old;
}

static char *dup_opt(const char *s, int *bad)
{
	char *d;

	if (!s || !*s)
		return NULL;
	d = strdup(s);
	if (!d)
		*bad = 1;
	return d;
}

/* One endpoint of the list, [s, s + n), as "scheme://host:port". */
static int ep_add(struct etcd *e, const char *s, size_t n, int tls)
{
	const char *scheme = tls ? "https://" : "http://";
	char *u;

	while (n && (*s == ' ' || *s == '\t'))
		s++, n--;
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '/'))
		n--;
	if (!n)
		return 0;
	if (memmem(s, n, "://", 3)) {
		if (!(n > 7 && !strncmp(s, "http://", 7)) &&
		    !(n > 8 && !strncmp(s, "https://", 8)))
			return -EINVAL;
		scheme = "";
	}
	if (n > 1024)
		return -EINVAL;
	u = malloc(strlen(scheme) + n + 1);
	if (!u)
		return -ENOMEM;
	sprintf(u, "%s%.*s", scheme, (int)n, s);
	e->ep[e->nep++] = u;
	return 0;
}

static int ep_parse(struct etcd *e, const char *list)
{
	const char *p, *c;
	size_t n = 1;
	int ret;

	for (p = list; *p; p++)
		n += *p == ',';
	e->ep = calloc(n, sizeof(*e->ep));
	if (!e->ep)
		return -ENOMEM;
	for (p = list;; p = c + 1) {
		c = strchr(p, ',');
		ret = ep_add(e, p, c ? (size_t)(c - p) : strlen(p),
			     e->ca_file != NULL);
		if (ret)
			return ret;
		if (!c)
			break;
	}
	return e->nep ? 0 : -EINVAL;
}

int etcd_create(const struct etcd_cfg *cfg, struct etcd **out)
{
	struct etcd *e;
	int bad = 0, ret;

	if (!cfg->endpoints)
		return -EINVAL;
	pthread_once(&curl_once, curl_init);
	if (curl_init_ret != CURLE_OK)
		return -ENOMEM;
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->ca_file = dup_opt(cfg->ca_file, &bad);
	e->cert_file = dup_opt(cfg->cert_file, &bad);
	e->key_file = dup_opt(cfg->key_file, &bad);
	e->user = dup_opt(cfg->user, &bad);
	e->password = dup_opt(cfg->password, &bad);
	e->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : 5000;
	e->timeout_cfg_ms = e->timeout_ms;
	e->connect_ms =
		cfg->connect_timeout_ms ? cfg->connect_timeout_ms : 1000;
	ret = bad ? -ENOMEM : ep_parse(e, cfg->endpoints);
	if (ret) {
		if (ret == -EINVAL)
			log_err("bad endpoint list \"%s\"", cfg->endpoints);
		goto err;
	}
	e->curl = curl_easy_init();
	if (!e->curl) {
		ret = -ENOMEM;
		goto err;
	}
	*out = e;
	return 0;
err:
	etcd_destroy(e);
	return ret;
}

void etcd_destroy(struct etcd *e)
{
	size_t i;

	if (!e)
		return;
	if (e->curl)
		curl_easy_cleanup(e->curl);
	for (i = 0; i < e->nep; i++)
		free(e->ep[i]);
	free(e->ep);
	free(e->ca_file);
	free(e->cert_file);
	free(e->key_file);
	free(e->user);
	free(e->password);
	free(e->token);
	free(e->buf);
	free(e);
}

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
	struct etcd *e = arg;
	size_t len = size * n, cap;
	char *b;

	if (len > ETCD_RESP_MAX - e->len)
		return 0; /* curl then fails with CURLE_WRITE_ERROR */
	if (e->len + len + 1 > e->cap) {
		cap = e->cap ? e->cap : 4096;
		while (cap < e->len + len + 1)
			cap *= 2;
		b = realloc(e->buf, cap);
		if (!b)
			return 0;
		e->buf = b;
		e->cap = cap;
	}
	memcpy(e->buf + e->len, p, len);
	e->len += len;
	e->buf[e->len] = '\0';
	return len;
}

int etcd_curl_setup(struct etcd *e, void *curl, const char *url)
{
	CURLcode c;

	c = curl_easy_setopt(curl, CURLOPT_URL, url);
	if (!c)
		c = curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	if (!c)
		c = curl_easy_setopt(curl, CURLOPT_TCP_NODELAY, 1L);
	if (!c)
		c = curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
	if (!c)
		c = curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
				     (long)e->connect_ms);
	if (!c && e->ca_file)
		c = curl_easy_setopt(curl, CURLOPT_CAINFO, e->ca_file);
	if (!c && e->cert_file)
		c = curl_easy_setopt(curl, CURLOPT_SSLCERT, e->cert_file);
	if (!c && e->key_file)
		c = curl_easy_setopt(curl, CURLOPT_SSLKEY, e->key_file);
	if (c)
		return etcd_fail(e, -EINVAL, "curl option: %s",
				 curl_easy_strerror(c));
	return 0;
}

/* What a failed transfer means: -ECONNREFUSED if the request cannot have
 * reached etcd (the next endpoint may be tried), else an unknown outcome. */
static int curl_err(struct etcd *e, CURLcode c, const char *url)
{
	curl_off_t pre = 0;

	switch (c) {
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CACERT_BADFILE:
		return etcd_fail(e, -ECONNREFUSED, "%s: %s (not sent)", url,
				 curl_easy_strerror(c));
	case CURLE_OPERATION_TIMEDOUT:
		/* timed out connecting: nothing was sent */
		curl_easy_getinfo(e->curl, CURLINFO_PRETRANSFER_TIME_T, &pre);
		if (!pre)
			return etcd_fail(e, -ECONNREFUSED,
					 "%s: connect timed out (not sent)",
					 url);
		return etcd_fail(e, -ETIMEDOUT,
				 "%s: no answer in %u ms (outcome unknown)",
				 url, e->timeout_ms);
	case CURLE_WRITE_ERROR:
		return etcd_fail(e, -EBADMSG, "%s: answer over %u bytes", url,
				 ETCD_RESP_MAX);
	case CURLE_OUT_OF_MEMORY:
		return etcd_fail(e, -ENOMEM, "%s: out of memory", url);
	default:
		return etcd_fail(e, -ECONNRESET, "%s: %s (outcome unknown)",
				 url, curl_easy_strerror(c));
	}
}

/* One POST of body to url; the answer parsed into *resp. */
static int post_once(struct etcd *e, const char *url, const char *body,
		     size_t len, int auth, struct json_object **resp)
{
	struct curl_slist *h = NULL, *h2;
	char hdr[1024];
	long status = 0;
	CURLcode c;
	int ret;

	curl_easy_reset(e->curl);
	ret = etcd_curl_setup(e, e->curl, url);
	if (ret)
		return ret;
	h = curl_slist_append(NULL, "Content-Type: application/json");
	if (h && auth && e->token) {
		snprintf(hdr, sizeof(hdr), "Authorization: %s", e->token);
		h2 = curl_slist_append(h, hdr);
		h = h2 ? h2 : (curl_slist_free_all(h), NULL);
	}
	if (!h)
		return etcd_fail(e, -ENOMEM, "out of memory");
	e->len = 0;
	curl_easy_setopt(e->curl, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(e->curl, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(e->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
	curl_easy_setopt(e->curl, CURLOPT_TIMEOUT_MS, (long)e->timeout_ms);
	curl_easy_setopt(e->curl, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e->curl, CURLOPT_WRITEDATA, e);
	c = curl_easy_perform(e->curl);
	curl_slist_free_all(h);
	if (c != CURLE_OK)
		return curl_err(e, c, url);
	curl_easy_getinfo(e->curl, CURLINFO_RESPONSE_CODE, &status);
	ret = etcd_resp_parse(e->buf ? e->buf : "", e->len, status, resp,
			      e->err, sizeof(e->err));
	if (ret == -EBADMSG)
		log_warn("%s: %s", url, e->err);
	return ret;
}

int etcd_auth(struct etcd *e)
{
	struct json_object *req, *resp = NULL, *t;
	int ret = -ENOMEM;

	free(e->token);
	e->token = NULL;
	req = json_object_new_object();
	if (!req ||
	    json_object_object_add(req, "name",
				   json_object_new_string(e->user)) ||
	    json_object_object_add(
		    req, "password",
		    json_object_new_string(e->password ? e->password : "")))
		goto out;
	ret = etcd_call(e, "/v3/auth/authenticate", req,
			ETCD_CALL_NOAUTH | ETCD_CALL_IDEMPOTENT, &resp);
	e->auth_off = 0;
	if (ret == -EPROTO && strstr(e->err, "authentication is not enabled")) {
		e->auth_off = 1; /* requests go without a token */
		ret = 0;
	}
	if (ret || !resp)
		goto out;
	if (!json_object_object_get_ex(resp, "token", &t) ||
	    !json_object_is_type(t, json_type_string) ||
	    json_object_get_string_len(t) == 0 ||
	    json_object_get_string_len(t) > 900 ||
	    strpbrk(json_object_get_string(t), "\r\n")) {
		ret = etcd_fail(e, -EBADMSG, "authenticate: no usable token");
		goto out;
	}
	e->token = strdup(json_object_get_string(t));
	ret = e->token ? 0 : -ENOMEM;
out:
	json_object_put(resp);
	json_object_put(req);
	return ret;
}

/* Whether an error leaves the request for the next endpoint to try. */
static int err_tries_next(int err, unsigned flags)
{
	if (err == -ECONNREFUSED || err == -EAGAIN)
		return 1; /* not sent, or that member has no leader */
	return (flags & ETCD_CALL_IDEMPOTENT) &&
	       (err == -ETIMEDOUT || err == -ECONNRESET);
}

int etcd_call(struct etcd *e, const char *path, struct json_object *req,
	      unsigned flags, struct json_object **resp)
{
	const char *body;
	size_t len, i;
	char url[1200];
	int auth = e->user && !(flags & ETCD_CALL_NOAUTH), renewed = 0;
	int ret = -ECONNREFUSED;

	*resp = NULL;
	body = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
	if (!body)
		return etcd_fail(e, -ENOMEM, "out of memory");
	len = strlen(body);
	if (auth && !e->token && !e->auth_off) {
		ret = etcd_auth(e);
		if (ret)
			return ret;
	}
	for (i = 0; i < e->nep; i++) {
		snprintf(url, sizeof(url), "%s%s", e->ep[e->cur], path);
		ret = post_once(e, url, body, len, auth, resp);
		if (ret == -EACCES && auth && !renewed &&
		    (strstr(e->err, "invalid auth token") ||
		     strstr(e->err, "user name is empty"))) {
			/* the token expired (--auth-token-ttl), or auth was
			 * enabled since: a new token, and once more */
			renewed = 1;
			ret = etcd_auth(e);
			if (ret)
				return ret;
			i--;
			continue;
		}
		if (!err_tries_next(ret, flags))
			break;
		log_dbg("%s: %s", e->ep[e->cur], e->err);
		e->cur = (e->cur + 1) % e->nep;
	}
	/* after an unknown outcome the next call starts elsewhere: this
	 * member may be cut off */
	if (ret == -ETIMEDOUT || ret == -ECONNRESET)
		e->cur = (e->cur + 1) % e->nep;
	return ret;
}
