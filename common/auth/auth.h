/* SPDX-License-Identifier: MIT */
/*
 * Cluster keys, the mutual handshake every TCP connection starts with, and
 * the authenticated records that follow it (docs/security.md).
 *
 * Keys. A cluster key (random, made by `farpage keygen`) is held by the
 * coordinator. Every other key is derived from it with HKDF-SHA256: the
 * admin key, one node key per node name, and one pair key per pair of node
 * names (which only the coordinator hands out, to those two nodes).
 *
 * Handshake, version 2 (fixed-size binary messages, "FPA1" and the
 * version byte first):
 *
 *   client -> server  HELLO   role, key id, name, target, flags, nonce_c,
 *                             eph_c
 *   server -> client  CHALL   status, flags, nonce_s, eph_s, proof_s
 *   client -> server  PROOF   proof_c
 *   server -> client  DONE    status
 *
 * proof_s = HMAC(K, "farpage server" || HELLO || CHALL without its proof),
 * proof_c = HMAC(K, "farpage client" || HELLO || CHALL), where K is the key
 * of the identity HELLO claims. Fresh nonces on both sides: a recorded
 * handshake replayed proves nothing. eph_c and eph_s are fresh X25519
 * public keys, inside what both proofs cover; their private halves are
 * freed once their shared secret DH is computed. Per-direction AES-256-GCM
 * keys come from HKDF(K || DH, nonce_c || nonce_s, transcript): with K
 * alone (a key stolen later) a recorded session does not open. A peer of
 * another version is refused, naming both versions.
 *
 * Records. After DONE every message is sealed: AES-256-GCM over the
 * message's header as additional data and its body, encrypted or (with
 * AUTH_F_ENCRYPT off) only authenticated, with a 16-byte tag. The nonce is
 * the direction's IV xor a record counter: a tampered, dropped, reordered or
 * replayed record fails to open, and the connection is closed.
 */
#ifndef COMMON_AUTH_H
#define COMMON_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#define AUTH_MAGIC "FPA1" /* every handshake message starts so */
/* and then this byte; 2: ephemeral X25519 keys (forward secrecy) */
#define AUTH_VERSION   2
#define AUTH_KEY_LEN   32
#define AUTH_ID_LEN    8
#define AUTH_NONCE_LEN 32
#define AUTH_TAG_LEN   16
#define AUTH_EPH_LEN   32 /* an X25519 public key, and their secret */
#define AUTH_NAME_MAX  64 /* bytes incl. NUL, as MSG_NAME_MAX */
#define AUTH_KEYS_MAX  4  /* cluster keys a server accepts at once */
#define AUTH_DIR       "/etc/farpage"

#define AUTH_HELLO_LEN 208
#define AUTH_CHALL_LEN 104
#define AUTH_PROOF_LEN 40
#define AUTH_DONE_LEN  8

enum auth_role {
	AUTH_ROLE_NONE = 0,
	AUTH_ROLE_CLUSTER = 1, /* the coordinator's key: everything */
	AUTH_ROLE_ADMIN = 2,   /* CLI: regions, status */
	AUTH_ROLE_NODE = 3,    /* an agent at the coordinator, own id only */
	AUTH_ROLE_PEER = 4,    /* an agent at another agent's page server */
};

/* Handshake status codes (CHALL and DONE). */
enum auth_status {
	AUTH_OK = 0,
	AUTH_E_KEY = 1,	    /* no key with that id here */
	AUTH_E_EXPIRED = 2, /* the key's rollover period is over */
	AUTH_E_PEER = 3,    /* no pair key for that peer (not a member) */
	AUTH_E_ROLE = 4,    /* role not served here */
	AUTH_E_PROOF = 5,   /* the client's proof is wrong */
	AUTH_E_BUSY = 6,    /* too many connections */
	AUTH_E_PROTO = 7,   /* malformed handshake */
	AUTH_E_FLAGS = 8,   /* the client did not ask for what we require */
	AUTH_E_VERSION = 9, /* another handshake version */
};

/* Handshake flags. */
#define AUTH_F_ENCRYPT 0x1 /* encrypt record bodies, not only authenticate */

struct auth_key {
	enum auth_role role;
	uint8_t id[AUTH_ID_LEN]; /* the cluster key's id */
	uint8_t secret[AUTH_KEY_LEN];
	char name[AUTH_NAME_MAX]; /* node keys: the node's name */
	int64_t not_after;	  /* Unix seconds; 0 = no end */
};

/* ---- keys ---- */

/* A new random cluster key. Returns 0 or -errno. */
int auth_key_generate(struct auth_key *k, int64_t not_after);

/*
 * The @role key (ADMIN, or NODE for @name) derived from cluster key @c; a
 * copy if @c already is that key. Returns 0, -EINVAL for a bad name or
 * role, -EPERM if @c is another derived key.
 */
int auth_key_derive(const struct auth_key *c, enum auth_role role,
		    const char *name, struct auth_key *out);

/* HKDF-SHA256 of @ikm with @salt and @info into @out (@out_len bytes).
 * Returns 0 or -ENOMEM/-EIO. */
int auth_hkdf(const uint8_t *ikm, size_t ikm_len, const void *salt,
	      size_t salt_len, const void *info, size_t info_len, uint8_t *out,
	      size_t out_len);

/* The pair key of nodes @a and @b (order does not matter). */
int auth_pair_key(const struct auth_key *c, const char *a, const char *b,
		  uint8_t out[AUTH_KEY_LEN]);

/*
 * Writes @k to @path, mode 0600, refusing an existing file unless @force.
 * Returns 0 or -errno.
 */
int auth_key_save(const char *path, const struct auth_key *k, bool force);

/*
 * Reads a key file. A file that others may read or write, a malformed line
 * or a missing field fails with -EINVAL/-EPERM and a reason in @why.
 * Returns 0 or -errno.
 */
int auth_key_load(const char *path, struct auth_key *k, char *why,
		  size_t why_len);

/* "cluster", "admin", "node", "peer". */
const char *auth_role_name(enum auth_role r);
/* Parses those names; AUTH_ROLE_NONE if none. */
enum auth_role auth_role_parse(const char *s);
/* Human text for a handshake status. */
const char *auth_status_str(int st);
/* The key id as 16 hex digits into @buf (>= 17 bytes). */
void auth_id_hex(const uint8_t id[AUTH_ID_LEN], char *buf);

/* ---- sessions: records after the handshake ---- */

struct auth_sess;

/* Peer identity, as proven by the handshake. */
enum auth_role auth_sess_role(const struct auth_sess *s);
const char *auth_sess_name(const struct auth_sess *s);
bool auth_sess_encrypts(const struct auth_sess *s);
void auth_sess_free(struct auth_sess *s);

/*
 * Seals one outgoing record in place: @aad authenticated, the @n buffers of
 * @iov encrypted (or only authenticated), the tag into @tag. Returns 0 or
 * -EIO.
 */
int auth_seal(struct auth_sess *s, const void *aad, size_t aad_len,
	      const struct iovec *iov, int n, uint8_t tag[AUTH_TAG_LEN]);
/* Opens one incoming record in place. -EBADMSG if it does not verify
 * (the bytes in @iov are then garbage; the connection must end). */
int auth_open(struct auth_sess *s, const void *aad, size_t aad_len,
	      const struct iovec *iov, int n, const uint8_t tag[AUTH_TAG_LEN]);

/*
 * Seals one outgoing record whose body is read from @in and written,
 * encrypted (or, with encryption off, copied and only authenticated), to
 * @out: one pass over the bytes instead of a copy and a seal in place.
 * The tag covers what was written to @out, even if @in changes meanwhile.
 * @in and @out must not overlap. Returns 0 or -EIO.
 */
int auth_seal_to(struct auth_sess *s, const void *aad, size_t aad_len,
		 const void *in, void *out, size_t len,
		 uint8_t tag[AUTH_TAG_LEN]);
/*
 * Opens one incoming record as its body arrives, from where it was
 * received into its destination: begin with the additional data, update
 * with each piece of the body in order (@in decrypted, or copied, to @out;
 * they must not overlap), end with the tag. Until end returns 0 the bytes
 * in the destination are not to be trusted; -EBADMSG from end: the record
 * does not verify (the connection must end). Nothing else may be opened
 * on @s between begin and end. begin and update return 0 or -EIO.
 */
int auth_open_begin(struct auth_sess *s, const void *aad, size_t aad_len);
int auth_open_update(struct auth_sess *s, const void *in, void *out,
		     size_t len);
int auth_open_end(struct auth_sess *s, const uint8_t tag[AUTH_TAG_LEN]);

/*
 * Opening records on another thread. The session's thread parses the
 * stream: it takes each such record's number in stream order
 * (auth_open_skip: the record is not opened on @s), and an opener, its
 * own cipher context on the session's receiving key, opens it by that
 * number on any one thread. Records opened on @s and by openers may
 * interleave; each is opened once.
 */
struct auth_opener;

/* An opener of @s's incoming records. Returns 0, -ENOMEM or -EIO. */
int auth_opener_new(const struct auth_sess *s, struct auth_opener **out);
void auth_opener_free(struct auth_opener *o);
/* The next incoming record's number, taken. 0, or -EIO once the
 * counter has run out (the connection must end). */
int auth_open_skip(struct auth_sess *s, uint64_t *seq);
/* Opens record @seq in place: @aad authenticated, @buf's @len bytes
 * decrypted (or only authenticated). Returns 0, -EBADMSG if it does not
 * verify (@buf is then garbage) or -EIO. */
int auth_opener_open(struct auth_opener *o, uint64_t seq, const void *aad,
		     size_t aad_len, void *buf, size_t len,
		     const uint8_t tag[AUTH_TAG_LEN]);

/* ---- the handshake ---- */

/* What a client proves and asks for. */
struct auth_client_cfg {
	enum auth_role role;	   /* ADMIN, NODE or PEER */
	const char *name;	   /* NODE, PEER: our node name */
	const char *target;	   /* PEER: the node we connect to */
	uint8_t id[AUTH_ID_LEN];   /* ADMIN, NODE: the cluster key's id */
	uint8_t key[AUTH_KEY_LEN]; /* the key of that role/name (pair) */
	unsigned int flags;	   /* AUTH_F_* we ask for */
};

/* A server's view of a HELLO, to find the key it proves. */
struct auth_hello {
	enum auth_role role;
	uint8_t id[AUTH_ID_LEN];
	char name[AUTH_NAME_MAX];
	char target[AUTH_NAME_MAX];
	unsigned int flags;
};

/*
 * A server's key lookup: fills @key for the identity @h claims, or returns
 * an auth_status (not AUTH_OK) and may set a reason in @why.
 */
typedef int (*auth_lookup_fn)(void *arg, const struct auth_hello *h,
			      uint8_t key[AUTH_KEY_LEN], char *why,
			      size_t why_len);

struct auth_server_cfg {
	auth_lookup_fn lookup;
	void *arg;
	/*
	 * AUTH_F_* the session gets whatever the client asked for: a client
	 * that asked for less is upgraded (the page server's
	 * --page-encryption on).
	 */
	unsigned int flags;
	/*
	 * AUTH_F_* the client must ask for itself: a HELLO without them is
	 * refused with AUTH_E_FLAGS before any key is looked up (the
	 * coordinator: control frames are always encrypted).
	 */
	unsigned int require;
};

struct auth_hs;

/* Returns 0 or -ENOMEM. */
int auth_hs_client(const struct auth_client_cfg *cfg, struct auth_hs **out);
int auth_hs_server(const struct auth_server_cfg *cfg, struct auth_hs **out);
void auth_hs_free(struct auth_hs *h);

/* Bytes the handshake wants to receive next (0 once it sends or is done). */
size_t auth_hs_want(const struct auth_hs *h);
/*
 * Takes up to auth_hs_want() received bytes. Returns how many it took, or
 * a negative errno when the handshake failed (auth_hs_error() says why;
 * there may still be output to send: an error status for the peer).
 */
ssize_t auth_hs_input(struct auth_hs *h, const uint8_t *buf, size_t n);
/* Bytes to send now (0: none); auth_hs_sent() when they are gone. */
size_t auth_hs_output(const struct auth_hs *h, const uint8_t **buf);
void auth_hs_sent(struct auth_hs *h, size_t n);
/* True once both sides are proven and the last output is sent. */
bool auth_hs_done(const struct auth_hs *h);
/* True once it failed (output may remain: the status for the peer). */
bool auth_hs_failed(const struct auth_hs *h);
/* Why it failed (or ""), for the log. */
const char *auth_hs_error(const struct auth_hs *h);
/* What the peer claimed, once its HELLO arrived (server side). */
const struct auth_hello *auth_hs_hello(const struct auth_hs *h);
/* The session, once done (the handshake gives it up). */
struct auth_sess *auth_hs_take(struct auth_hs *h);

/*
 * Runs a client handshake on the blocking socket @fd within @timeout_ms.
 * Returns 0 and the session, or -EACCES (refused: @why says why), or
 * -ETIMEDOUT, -ECONNRESET, -errno.
 */
int auth_client_run(int fd, const struct auth_client_cfg *cfg, int timeout_ms,
		    struct auth_sess **out, char *why, size_t why_len);

#endif
