/* SPDX-License-Identifier: MIT */
/*
 * Control connections over TCP with their session: the blocking calls of
 * ctl.h, each frame sealed and encrypted (auth.h) when the connection has a
 * session.
 * Sealed frame: the 4-byte length header (authenticated), the CBOR payload
 * (encrypted), a 16-byte tag; the length counts payload and tag.
 */
#ifndef COMMON_ACTL_H
#define COMMON_ACTL_H

#include "auth.h"
#include "msg.h"

/* Who this process is on the cluster's TCP connections. */
struct actl_cred {
	bool insecure;	     /* no handshake at all (--insecure) */
	struct auth_key key; /* as loaded (cluster, admin or node) */
	char path[256];	     /* where it came from, for messages */
};

struct actl {
	int fd;
	struct auth_sess *sess; /* NULL: plain frames */
};

/*
 * Loads the key for a client of @role (ADMIN for the CLI, NODE for agent
 * @name) from @path, or from $FARPAGE_KEY_FILE, or from the role's default
 * under AUTH_DIR. A cluster key serves any role. A client's key (@role not
 * CLUSTER) whose not-after has passed is refused: -EKEYEXPIRED. Returns 0,
 * or -errno with a complete message in @why.
 */
int actl_cred_load(struct actl_cred *c, const char *path, enum auth_role role,
		   const char *name, char *why, size_t why_len);

/* The default key file of a role: AUTH_DIR "/<role>.key". */
const char *actl_key_default(enum auth_role role);

/*
 * The handshake config for @role from @c (ADMIN or NODE @name), asking for
 * AUTH_F_ENCRYPT: a server that does not grant it fails the handshake.
 * Returns 0, or -EPERM if @c's key cannot act in that role.
 */
int actl_cred_client(const struct actl_cred *c, enum auth_role role,
		     const char *name, struct auth_client_cfg *out);

/*
 * Connects to @addr and authenticates as @role (@name for NODE) within
 * @timeout_ms. Returns 0, or -EACCES (refused: @why says why), or as
 * net_connect().
 */
int actl_connect(const char *addr, const struct actl_cred *c,
		 enum auth_role role, const char *name, int timeout_ms,
		 struct actl *out, char *why, size_t why_len);
void actl_close(struct actl *a);

int actl_send(struct actl *a, const struct msg *m);
int actl_recv(struct actl *a, struct msg *m, int timeout_ms);
/* As ctl_call(). */
int actl_call(struct actl *a, const struct msg *req, struct msg *rep,
	      int timeout_ms);

/*
 * An encoded payload as a whole frame, sealed if @s (NULL: plain): returns
 * a malloc()ed buffer of header + payload (+ tag) in *@out (*@out_len
 * bytes). Returns 0, -EMSGSIZE, -ENOMEM or -EIO.
 */
int actl_seal_frame(struct auth_sess *s, const uint8_t *payload, size_t len,
		    uint8_t **out, size_t *out_len);
/* @m encoded, then as actl_seal_frame(). */
int actl_encode_frame(struct auth_sess *s, const struct msg *m, uint8_t **out,
		      size_t *out_len);

/*
 * Opens a sealed frame's payload (@len bytes after its header @hdr) in
 * place; the message is the first *@msg_len bytes. Returns 0 or -EBADMSG.
 */
int actl_open_frame(struct auth_sess *s, const uint8_t hdr[4], uint8_t *buf,
		    size_t len, size_t *msg_len);

#endif
