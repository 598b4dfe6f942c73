// SPDX-License-Identifier: MIT
/*
 * Cluster keys (auth.h): roles and statuses by name, key generation and
 * derivation (HKDF-SHA256), and the key file, written and read.
 */
#define LOG_PREFIX "auth: "
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>

#include "auth_int.h"

#define AUTH_FILE_MAX 4096

/* ---- names, roles, statuses ---- */

const char *auth_role_name(enum auth_role r)
{
	switch (r) {
	case AUTH_ROLE_CLUSTER:
		return "cluster";
	case AUTH_ROLE_ADMIN:
		return "admin";
	case AUTH_ROLE_NODE:
		return "node";
	case AUTH_ROLE_PEER:
		return "peer";
	default:
		return "none";
	}
}

enum auth_role auth_role_parse(const char *s)
{
	for (int r = AUTH_ROLE_CLUSTER; r <= AUTH_ROLE_PEER; r++)
		if (!strcmp(s, auth_role_name(r)))
			return r;
	return AUTH_ROLE_NONE;
}

const char *auth_status_str(int st)
{
	switch (st) {
	case AUTH_OK:
		return "ok";
	case AUTH_E_KEY:
		return "unknown key (another cluster key?)";
	case AUTH_E_EXPIRED:
		return "the key has expired (rolled over)";
	case AUTH_E_PEER:
		return "not a member known here";
	case AUTH_E_ROLE:
		return "role not accepted here";
	case AUTH_E_PROOF:
		return "wrong key (the proof does not verify)";
	case AUTH_E_BUSY:
		return "too many connections";
	case AUTH_E_PROTO:
		return "malformed handshake";
	case AUTH_E_FLAGS:
		return "the server requires encryption, which the client did "
		       "not ask for (an older farpage?)";
	case AUTH_E_VERSION:
		return "handshake version not spoken here (this farpage "
		       "speaks version 2, with ephemeral keys)";
	default:
		return "unknown status";
	}
}

static void auth_hex(const uint8_t *p, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", p[i]);
}

void auth_id_hex(const uint8_t id[AUTH_ID_LEN], char *buf)
{
	auth_hex(id, AUTH_ID_LEN, buf);
}

bool auth_name_ok(const char *s)
{
	size_t n = strnlen(s, AUTH_NAME_MAX);

	if (n == 0 || n >= AUTH_NAME_MAX || !strcmp(s, ".") || !strcmp(s, ".."))
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '.' || c == '_' ||
		      c == '-'))
			return false;
	}
	return true;
}

/* ---- keys ---- */

int auth_hkdf(const uint8_t *ikm, size_t ikm_len, const void *salt,
	      size_t salt_len, const void *info, size_t info_len, uint8_t *out,
	      size_t out_len)
{
	EVP_PKEY_CTX *pc = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
	int ok;

	if (!pc)
		return -ENOMEM;
	ok = EVP_PKEY_derive_init(pc) > 0 &&
	     EVP_PKEY_CTX_set_hkdf_md(pc, EVP_sha256()) > 0 &&
	     EVP_PKEY_CTX_set1_hkdf_salt(pc, salt, (int)salt_len) > 0 &&
	     EVP_PKEY_CTX_set1_hkdf_key(pc, ikm, (int)ikm_len) > 0 &&
	     EVP_PKEY_CTX_add1_hkdf_info(pc, info, (int)info_len) > 0 &&
	     EVP_PKEY_derive(pc, out, &out_len) > 0;
	EVP_PKEY_CTX_free(pc);
	return ok ? 0 : -EIO;
}

int auth_key_generate(struct auth_key *k, int64_t not_after)
{
	memset(k, 0, sizeof(*k));
	if (RAND_bytes(k->secret, sizeof(k->secret)) != 1 ||
	    RAND_bytes(k->id, sizeof(k->id)) != 1)
		return -EIO;
	k->role = AUTH_ROLE_CLUSTER;
	k->not_after = not_after;
	return 0;
}

/* Derives from the cluster secret with label @info (@len bytes). */
static int auth_derive(const struct auth_key *c, const char *info, size_t len,
		       uint8_t out[AUTH_KEY_LEN])
{
	static const char salt[] = "farpage key v1";

	return auth_hkdf(c->secret, sizeof(c->secret), salt, sizeof(salt) - 1,
			 info, len, out, AUTH_KEY_LEN);
}

int auth_key_derive(const struct auth_key *c, enum auth_role role,
		    const char *name, struct auth_key *out)
{
	char info[16 + AUTH_NAME_MAX];
	int n;

	if (role == c->role &&
	    (role != AUTH_ROLE_NODE || (name && !strcmp(name, c->name)))) {
		*out = *c;
		return 0;
	}
	if (c->role != AUTH_ROLE_CLUSTER)
		return -EPERM;
	if (role == AUTH_ROLE_ADMIN)
		n = snprintf(info, sizeof(info), "admin");
	else if (role == AUTH_ROLE_NODE && name && auth_name_ok(name))
		n = snprintf(info, sizeof(info), "node%c%s", 0, name);
	else
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	out->role = role;
	memcpy(out->id, c->id, sizeof(out->id));
	out->not_after = c->not_after;
	if (role == AUTH_ROLE_NODE)
		snprintf(out->name, sizeof(out->name), "%s", name);
	return auth_derive(c, info, (size_t)n, out->secret);
}

int auth_pair_key(const struct auth_key *c, const char *a, const char *b,
		  uint8_t out[AUTH_KEY_LEN])
{
	char info[8 + 2 * AUTH_NAME_MAX];
	int n;

	if (c->role != AUTH_ROLE_CLUSTER)
		return -EPERM;
	if (!auth_name_ok(a) || !auth_name_ok(b))
		return -EINVAL;
	if (strcmp(a, b) > 0) {
		const char *t = a;

		a = b;
		b = t;
	}
	n = snprintf(info, sizeof(info), "pair%c%s%c%s", 0, a, 0, b);
	return auth_derive(c, info, (size_t)n, out);
}

static int auth_unhex(const char *s, uint8_t *out, size_t n)
{
	if (strlen(s) != 2 * n)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		unsigned int v = 0;

		for (int j = 0; j < 2; j++) {
			char c = s[2 * i + j];

			v <<= 4;
			if (c >= '0' && c <= '9')
				v |= (unsigned int)(c - '0');
			else if (c >= 'a' && c <= 'f')
				v |= (unsigned int)(c - 'a' + 10);
			else if (c >= 'A' && c <= 'F')
				v |= (unsigned int)(c - 'A' + 10);
			else
				return -EINVAL;
		}
		out[i] = (uint8_t)v;
	}
	return 0;
}

int auth_key_save(const char *path, const struct auth_key *k, bool force)
{
	char secret[2 * AUTH_KEY_LEN + 1], id[2 * AUTH_ID_LEN + 1];
	char text[512];
	int fd, n, ret = 0;
	ssize_t w;

	auth_hex(k->secret, sizeof(k->secret), secret);
	auth_hex(k->id, sizeof(k->id), id);
	n = snprintf(text, sizeof(text),
		     "# farpage %s key: a secret, keep it mode 0600\n"
		     "farpage-key 1\nrole %s\nid %s\n%s%s%ssecret %s\n",
		     auth_role_name(k->role), auth_role_name(k->role), id,
		     k->role == AUTH_ROLE_NODE ? "name " : "",
		     k->role == AUTH_ROLE_NODE ? k->name : "",
		     k->role == AUTH_ROLE_NODE ? "\n" : "", secret);
	if (k->not_after)
		n += snprintf(text + n, sizeof(text) - (size_t)n,
			      "not-after %lld\n", (long long)k->not_after);
	fd = open(path,
		  O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW |
			  (force ? O_TRUNC : O_EXCL),
		  0600);
	if (fd < 0)
		return -errno;
	/* An existing file keeps its mode on O_TRUNC: make it 0600. */
	if (fchmod(fd, 0600))
		ret = -errno;
	for (int off = 0; !ret && off < n; off += (int)w) {
		w = write(fd, text + off, (size_t)(n - off));
		if (w < 0 && errno == EINTR) {
			w = 0;
			continue;
		}
		if (w <= 0)
			ret = w < 0 ? -errno : -EIO;
	}
	if (!ret && fsync(fd))
		ret = -errno;
	if (close(fd) && !ret)
		ret = -errno;
	OPENSSL_cleanse(text, sizeof(text));
	OPENSSL_cleanse(secret, sizeof(secret));
	return ret;
}

/* One "key value" line into @k; @seen collects which keys came. */
static int auth_key_line(char *line, struct auth_key *k, unsigned int *seen,
			 char *why, size_t why_len)
{
	static const char *const keys[] = {
		"farpage-key", "role", "id", "name", "secret", "not-after"
	};
	char *val = strchr(line, ' ');
	unsigned int i;

	if (!val) {
		snprintf(why, why_len, "line \"%.40s\" has no value", line);
		return -EINVAL;
	}
	*val++ = 0;
	for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (!strcmp(line, keys[i]))
			break;
	if (i == sizeof(keys) / sizeof(keys[0]) || (*seen & (1u << i))) {
		snprintf(why, why_len, "%s \"%.40s\"",
			 i == sizeof(keys) / sizeof(keys[0]) ? "unknown field"
							     : "repeated field",
			 line);
		return -EINVAL;
	}
	*seen |= 1u << i;
	switch (i) {
	case 0:
		if (strcmp(val, "1")) {
			snprintf(why, why_len,
				 "key file version \"%.20s\" (this farpage "
				 "reads version 1)",
				 val);
			return -EINVAL;
		}
		return 0;
	case 1:
		k->role = auth_role_parse(val);
		if (k->role == AUTH_ROLE_NONE || k->role == AUTH_ROLE_PEER) {
			snprintf(why, why_len, "bad role \"%.20s\"", val);
			return -EINVAL;
		}
		return 0;
	case 2:
		if (auth_unhex(val, k->id, sizeof(k->id))) {
			snprintf(why, why_len, "bad id (16 hex digits)");
			return -EINVAL;
		}
		return 0;
	case 3:
		if (!auth_name_ok(val)) {
			snprintf(why, why_len, "bad node name");
			return -EINVAL;
		}
		snprintf(k->name, sizeof(k->name), "%s", val);
		return 0;
	case 4:
		if (auth_unhex(val, k->secret, sizeof(k->secret))) {
			snprintf(why, why_len, "bad secret (64 hex digits)");
			return -EINVAL;
		}
		return 0;
	default: {
		char *end;
		long long v;

		errno = 0;
		v = strtoll(val, &end, 10);
		if (errno || *end || v <= 0) {
			snprintf(why, why_len, "bad not-after");
			return -EINVAL;
		}
		k->not_after = v;
		return 0;
	}
	}
}

int auth_key_load(const char *path, struct auth_key *k, char *why,
		  size_t why_len)
{
	char text[AUTH_FILE_MAX + 1], *line, *save = NULL;
	unsigned int seen = 0, need;
	struct stat st;
	ssize_t n;
	int fd, ret = 0;

	memset(k, 0, sizeof(*k));
	snprintf(why, why_len, "%s", "");
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		snprintf(why, why_len, "%s", strerror(errno));
		return ret;
	}
	if (fstat(fd, &st)) {
		ret = -errno;
	} else if (!S_ISREG(st.st_mode)) {
		snprintf(why, why_len, "not a regular file");
		ret = -EINVAL;
	} else if (st.st_mode & 077) {
		snprintf(why, why_len,
			 "mode %03o lets others read it: chmod 600 it",
			 st.st_mode & 0777);
		ret = -EPERM;
	}
	n = ret ? 0 : read(fd, text, sizeof(text));
	if (!ret && n < 0)
		ret = -errno;
	close(fd);
	if (!ret && n > AUTH_FILE_MAX) {
		snprintf(why, why_len, "longer than %d bytes", AUTH_FILE_MAX);
		ret = -EINVAL;
	}
	if (ret) {
		if (!why[0])
			snprintf(why, why_len, "%s", strerror(-ret));
		return ret;
	}
	text[n] = 0;
	if (memchr(text, 0, (size_t)n)) {
		snprintf(why, why_len, "a NUL byte in the file");
		return -EINVAL;
	}
	for (line = strtok_r(text, "\n", &save); line && !ret;
	     line = strtok_r(NULL, "\n", &save)) {
		size_t len = strlen(line);

		/* CRLF line ends (a file edited on Windows), trailing blanks */
		while (len && (line[len - 1] == '\r' || line[len - 1] == ' ' ||
			       line[len - 1] == '\t'))
			line[--len] = 0;
		if (line[0] == '#' || !line[0])
			continue;
		ret = auth_key_line(line, k, &seen, why, why_len);
	}
	OPENSSL_cleanse(text, sizeof(text));
	if (ret)
		goto fail;
	/* farpage-key, role, id, secret; name exactly for node keys */
	need = 1u | 1u << 1 | 1u << 2 | 1u << 4;
	if ((seen & need) != need) {
		snprintf(why, why_len,
			 "a field is missing (version, role, "
			 "id and secret are needed)");
		ret = -EINVAL;
	} else if ((k->role == AUTH_ROLE_NODE) != !!(seen & (1u << 3))) {
		snprintf(why, why_len,
			 k->role == AUTH_ROLE_NODE
				 ? "a node key needs its name"
				 : "only node keys have a name");
		ret = -EINVAL;
	}
	if (!ret)
		return 0;
fail:
	OPENSSL_cleanse(k, sizeof(*k));
	return ret;
}
