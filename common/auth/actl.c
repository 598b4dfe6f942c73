// SPDX-License-Identifier: MIT
/* Control connections with their session (actl.h). */
#define LOG_PREFIX "ctl: "
#include "actl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"
#include "frame.h"
#include "net.h"

const char *actl_key_default(enum auth_role role)
{
	switch (role) {
	case AUTH_ROLE_ADMIN:
		return AUTH_DIR "/admin.key";
	case AUTH_ROLE_NODE:
		return AUTH_DIR "/node.key";
	default:
		return AUTH_DIR "/cluster.key";
	}
}

int actl_cred_client(const struct actl_cred *c, enum auth_role role,
		     const char *name, struct auth_client_cfg *out)
{
	struct auth_key k;
	int ret;

	memset(out, 0, sizeof(*out));
	ret = auth_key_derive(&c->key, role, name, &k);
	if (ret)
		return -EPERM;
	out->role = role;
	out->name = role == AUTH_ROLE_NODE ? name : NULL;
	/* Control frames carry pair keys, MRs and endpoints: always
	 * encrypted, and a server that does not grant it is refused. */
	out->flags = AUTH_F_ENCRYPT;
	memcpy(out->id, k.id, sizeof(out->id));
	memcpy(out->key, k.secret, sizeof(out->key));
	memset(&k, 0, sizeof(k));
	return 0;
}

/*
 * What to do about a missing key file @path of @role. Only the cluster key
 * is made where it is used: the others are derived from it on the
 * coordinator's host and copied (a `farpage keygen` elsewhere would make a
 * new cluster).
 */
static void actl_key_hint(enum auth_role role, const char *name,
			  const char *path, char *why, size_t why_len)
{
	char how[240];

	if (role == AUTH_ROLE_CLUSTER)
		snprintf(how, sizeof(how),
			 "make the cluster key with `farpage keygen` on this "
			 "host");
	else if (role == AUTH_ROLE_NODE)
		snprintf(how, sizeof(how),
			 "on the coordinator's host make it with `farpage "
			 "keygen --role node --name %s -o %s.key`, then copy "
			 "it here as %s (mode 0600)",
			 name ? name : "NAME", name ? name : "NAME",
			 actl_key_default(role));
	else
		snprintf(how, sizeof(how),
			 "on the coordinator's host make it with `farpage "
			 "keygen --role admin -o admin.key`, then copy it here "
			 "as %s (mode 0600)",
			 actl_key_default(role));
	snprintf(why, why_len,
		 "no key file %s: %s (docs/security.md); or pass --key-file, "
		 "or run the whole cluster with --insecure",
		 path, how);
}

int actl_cred_load(struct actl_cred *c, const char *path, enum auth_role role,
		   const char *name, char *why, size_t why_len)
{
	const char *env = getenv("FARPAGE_KEY_FILE");
	struct auth_client_cfg cc;
	char err[160];
	int ret;

	memset(c, 0, sizeof(*c));
	if (!path && env && env[0])
		path = env;
	if (!path) {
		path = actl_key_default(role);
		/* On the coordinator's host the cluster key does for all. */
		if (access(path, F_OK) &&
		    !access(actl_key_default(AUTH_ROLE_CLUSTER), F_OK))
			path = actl_key_default(AUTH_ROLE_CLUSTER);
	}
	snprintf(c->path, sizeof(c->path), "%s", path);
	ret = auth_key_load(path, &c->key, err, sizeof(err));
	if (ret == -ENOENT) {
		actl_key_hint(role, name, path, why, why_len);
		return ret;
	}
	if (ret) {
		snprintf(why, why_len, "key file %s: %s", path, err);
		return ret;
	}
	/* A client stops using its key at its end (the coordinator has it
	 * too, but cannot know the end of a derived key given its own). */
	if (role != AUTH_ROLE_CLUSTER && c->key.not_after &&
	    time(NULL) > c->key.not_after) {
		time_t t = (time_t)c->key.not_after;
		struct tm tm;
		char when[32] = "?";

		if (gmtime_r(&t, &tm))
			strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC",
				 &tm);
		snprintf(why, why_len,
			 "key file %s: the key expired at %s (not-after "
			 "%lld): use the key that replaced it "
			 "(docs/security.md, key rollover)",
			 path, when, (long long)c->key.not_after);
		memset(&c->key, 0, sizeof(c->key));
		return -EKEYEXPIRED;
	}
	if (role == AUTH_ROLE_CLUSTER && c->key.role != AUTH_ROLE_CLUSTER)
		ret = -EPERM;
	else if (role != AUTH_ROLE_CLUSTER)
		ret = actl_cred_client(c, role, name, &cc);
	memset(&cc, 0, sizeof(cc));
	if (ret) {
		snprintf(
			why, why_len,
			"key file %s holds the %s key%s%s; this needs %s%s%s%s",
			path, auth_role_name(c->key.role),
			c->key.role == AUTH_ROLE_NODE ? " of node " : "",
			c->key.role == AUTH_ROLE_NODE ? c->key.name : "",
			role == AUTH_ROLE_CLUSTER ? "the cluster key" : "the ",
			role == AUTH_ROLE_CLUSTER ? "" : auth_role_name(role),
			role == AUTH_ROLE_NODE ? " key of node " : "",
			role == AUTH_ROLE_NODE && name ? name
			: role == AUTH_ROLE_ADMIN ? " key (or the cluster key)"
						  : "");
		memset(&c->key, 0, sizeof(c->key));
		return -EPERM;
	}
	return 0;
}

int actl_connect(const char *addr, const struct actl_cred *c,
		 enum auth_role role, const char *name, int timeout_ms,
		 struct actl *out, char *why, size_t why_len)
{
	struct auth_client_cfg cc;
	int ret;

	out->fd = -1;
	out->sess = NULL;
	snprintf(why, why_len, "%s", "");
	ret = net_connect(addr, timeout_ms, &out->fd);
	if (ret)
		return ret;
	if (c->insecure)
		return 0;
	ret = actl_cred_client(c, role, name, &cc);
	if (!ret)
		ret = auth_client_run(out->fd, &cc, timeout_ms, &out->sess, why,
				      why_len);
	memset(&cc, 0, sizeof(cc));
	if (ret) {
		close(out->fd);
		out->fd = -1;
	}
	return ret;
}

void actl_close(struct actl *a)
{
	if (a->fd >= 0)
		close(a->fd);
	a->fd = -1;
	auth_sess_free(a->sess);
	a->sess = NULL;
}

int actl_seal_frame(struct auth_sess *s, const uint8_t *payload, size_t len,
		    uint8_t **out, size_t *out_len)
{
	size_t total = len + (s ? AUTH_TAG_LEN : 0);
	struct iovec iov;
	uint8_t *b;

	if (!len || total > FRAME_MAX)
		return -EMSGSIZE;
	b = malloc(FRAME_HDR_LEN + total);
	if (!b)
		return -ENOMEM;
	frame_hdr_put(b, (uint32_t)total);
	memcpy(b + FRAME_HDR_LEN, payload, len);
	iov = (struct iovec){ .iov_base = b + FRAME_HDR_LEN, .iov_len = len };
	if (s &&
	    auth_seal(s, b, FRAME_HDR_LEN, &iov, 1, b + FRAME_HDR_LEN + len)) {
		free(b);
		return -EIO;
	}
	*out = b;
	*out_len = FRAME_HDR_LEN + total;
	return 0;
}

int actl_open_frame(struct auth_sess *s, const uint8_t hdr[4], uint8_t *buf,
		    size_t len, size_t *msg_len)
{
	struct iovec iov;

	if (len <= AUTH_TAG_LEN)
		return -EBADMSG;
	iov = (struct iovec){ .iov_base = buf, .iov_len = len - AUTH_TAG_LEN };
	if (auth_open(s, hdr, FRAME_HDR_LEN, &iov, 1, buf + len - AUTH_TAG_LEN))
		return -EBADMSG;
	*msg_len = len - AUTH_TAG_LEN;
	return 0;
}

int actl_encode_frame(struct auth_sess *s, const struct msg *m, uint8_t **out,
		      size_t *out_len)
{
	uint8_t *buf;
	size_t len;
	int ret;

	ret = msg_encode(m, &buf, &len);
	if (ret)
		return ret;
	ret = actl_seal_frame(s, buf, len, out, out_len);
	free(buf);
	return ret;
}

int actl_send(struct actl *a, const struct msg *m)
{
	uint8_t *frame;
	size_t flen;
	int ret;

	ret = actl_encode_frame(a->sess, m, &frame, &flen);
	if (ret)
		return ret;
	/* ctl_send_raw() frames it: pass what follows the header. */
	ret = ctl_send_raw(a->fd, frame + FRAME_HDR_LEN, flen - FRAME_HDR_LEN,
			   NULL, 0);
	free(frame);
	return ret;
}

int actl_recv(struct actl *a, struct msg *m, int timeout_ms)
{
	uint8_t hdr[FRAME_HDR_LEN], *buf;
	size_t len, mlen;
	int ret;

	msg_init(m, MSG_T_NONE);
	if (!a->sess)
		return ctl_recv(a->fd, m, NULL, NULL, timeout_ms);
	ret = ctl_recv_raw(a->fd, &buf, &len, NULL, NULL, timeout_ms);
	if (ret)
		return ret;
	frame_hdr_put(hdr, (uint32_t)len);
	ret = actl_open_frame(a->sess, hdr, buf, len, &mlen);
	if (!ret)
		ret = msg_decode(buf, mlen, m);
	free(buf);
	return ret;
}

int actl_call(struct actl *a, const struct msg *req, struct msg *rep,
	      int timeout_ms)
{
	int ret;

	msg_init(rep, MSG_T_NONE);
	ret = actl_send(a, req);
	if (ret)
		return ret;
	ret = actl_recv(a, rep, timeout_ms);
	if (ret)
		return ret;
	if (rep->type == MSG_T_ERROR)
		return -(int)rep->err;
	return 0;
}
