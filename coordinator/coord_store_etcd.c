// SPDX-License-Identifier: MIT
/*
 * The coordinator's store in etcd (docs/design.md "The coordinator's
 * store"), one coordinator per prefix P for now: the change records are
 * the keys P"log/<seq>" (16 hex digits, from 1, no gaps), P"head" names
 * the last ("<seq> <coordinator id>", 16 hex digits each) and P"meta" the
 * format and cluster id. A change is one txn that compares P"head"'s
 * mod_revision with the one this coordinator last wrote or read and puts
 * both keys; it returns once etcd committed it, so coord_sync() has
 * nothing left to do. Recovery reads the log at one revision and applies
 * it through coord_record_apply(). A snapshot (every --snapshot-every
 * records) is P"snap" naming parts P"part/<nonce>/<n>"; recovery applies
 * it, then the records after it. A record over COORD_ETCD_INLINE_MAX is
 * written in parts first, its log key naming them. --check reads it all
 * without writing. After each snapshot, etcd's history up to the
 * snapshot before it is compacted (cse_compact()).
 */
#define LOG_PREFIX "coord: "
#include "coord_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include <openssl/crypto.h>

#include "coord_etcd_int.h"
#include "evl.h"
#include "etcd.h"
#include "etcd_elect.h"
#include "frame.h"
#include "log.h"
#include "msg.h"
#include "util.h"

/* A larger record, and a snapshot, are written in parts of this: well
 * under etcd's 1.5-MiB request limit with the keys and P"head" beside
 * them, read one at a time. */
#define COORD_ETCD_PART_MAX (UINT32_C(1) << 20)
/* A record up to this is written inline: a group of 256 log keys, a
 * third larger in base64, is read in one answer of at most 64 MiB. */
#define COORD_ETCD_INLINE_MAX (UINT32_C(128) << 10)
/* The value of a log key whose record is in parts starts with a NUL
 * (a change record, a CBOR map, never does). */
#define COORD_ETCD_PARTS_FMT "farpage-parts %016" PRIx64 " %" PRIu64 " %zu %08x"
/* Start-up tries again this long on errors a member that is starting
 * or catching up gives (a restarted member answers once it caught up),
 * pausing between tries. */
#define COORD_ETCD_OPEN_MS  8000u
#define COORD_ETCD_RETRY_MS 200u
/* One etcd request, at most (the client's default is 5000). */
#define COORD_ETCD_TIMEOUT_MS 3000u
/* Log keys read per range: those sharing all but the last two digits. */
#define COORD_ETCD_GROUP_SHIFT 8u

/* A snapshot: its records, each a big-endian u32 length and the
 * msg_encode()d record, cut into parts of at most COORD_ETCD_PART_MAX. */
struct cse_buf {
	uint8_t *p;
	size_t len, cap;
};

/* The cluster id P"meta" (@key, read into @kvs) holds. */
static int cse_meta_parse(const char *key, const struct etcd_kvs *kvs,
			  uint64_t *cid)
{
	unsigned int version;

	if (!kvs || kvs->n != 1 ||
	    sscanf((const char *)kvs->kv[0].value,
		   "farpage-coordinator store %u cluster %16" SCNx64, &version,
		   cid) != 2 ||
	    !*cid) {
		log_err("etcd: %s is not a farpage coordinator's", key);
		return -EBADMSG;
	}
	if (version != COORD_ETCD_VERSION) {
		log_err("etcd: %s: store version %u, this coordinator reads %u",
			key, version, COORD_ETCD_VERSION);
		return -EBADMSG;
	}
	return 0;
}

/*
 * The cluster id of P"meta", made with a fresh one if there is none and
 * @make is set (else -ENOENT).
 */
static int cse_meta(struct coord_store_etcd *s, uint64_t *cid, int make)
{
	char key[COORD_ETCD_KEY_MAX], val[96];
	size_t klen = cse_key(s, key, "meta");
	struct etcd_txn_resp r;
	struct etcd_kvs kvs;
	int ret;

	if (!make) {
		ret = etcd_get(s->e, key, klen, 0, 0, 0, &kvs);
		if (ret)
			return cse_err(s, ret, key);
		ret = kvs.n ? cse_meta_parse(key, &kvs, cid) : -ENOENT;
		etcd_kvs_fini(&kvs);
		return ret;
	}
	ret = util_random_u64(cid);
	if (ret)
		return ret;
	snprintf(val, sizeof(val), COORD_ETCD_META_FMT, COORD_ETCD_VERSION,
		 *cid);
	ret = etcd_txn(s->e,
		       &(struct etcd_cmp){ .key = key,
					   .key_len = klen,
					   .target = ETCD_CMP_CREATE,
					   .result = ETCD_CMP_EQ },
		       1,
		       &(struct etcd_op){ .type = ETCD_OP_PUT,
					  .key = key,
					  .key_len = klen,
					  .value = val,
					  .value_len = strlen(val) },
		       1,
		       &(struct etcd_op){ .type = ETCD_OP_GET,
					  .key = key,
					  .key_len = klen },
		       1, &r);
	if (ret)
		return cse_err(s, ret, key);
	if (r.succeeded)
		log_info("etcd: %s made: new tables, cluster id %016" PRIx64,
			 key, *cid);
	else
		ret = cse_meta_parse(key, r.n == 1 ? &r.resp[0].kvs : NULL,
				     cid);
	etcd_txn_resp_fini(&r);
	return ret;
}

/* Reads part @i of P@base at @rev onto @b. */
static int cse_part_read(struct coord_store_etcd *s, const char *base,
			 uint64_t i, int64_t rev, struct cse_buf *b)
{
	char key[COORD_ETCD_KEY_MAX];
	size_t klen = cse_key(s, key, "%s/%08" PRIx64, base, i);
	struct etcd_kvs kvs;
	int ret;

	ret = etcd_get(s->e, key, klen, 0, 0, rev, &kvs);
	if (ret)
		return cse_err(s, ret, key);
	ret = -EBADMSG;
	if (kvs.n != 1) {
		log_err("etcd: %s is missing", key);
	} else if (b->len + kvs.kv[0].value_len <= b->cap) {
		memcpy(b->p + b->len, kvs.kv[0].value, kvs.kv[0].value_len);
		b->len += kvs.kv[0].value_len;
		ret = 0;
	} else {
		log_err("etcd: %s: longer than its list says", key);
	}
	etcd_kvs_fini(&kvs);
	return ret;
}

/* Reads the @parts parts of P@base at @rev, @len bytes with CRC @crc,
 * into b->p (malloc()ed; the caller frees it). */
static int cse_parts_read(struct coord_store_etcd *s, const char *base,
			  uint64_t parts, size_t len, uint32_t crc, int64_t rev,
			  struct cse_buf *b)
{
	int ret = 0;

	memset(b, 0, sizeof(*b));
	if (parts != (len + COORD_ETCD_PART_MAX - 1) / COORD_ETCD_PART_MAX) {
		log_err("etcd: %s%s: %zu bytes are not %" PRIu64 " parts",
			s->prefix, base, len, parts);
		return -EBADMSG;
	}
	b->cap = len;
	b->p = malloc(len ? len : 1);
	if (!b->p)
		return -ENOMEM;
	for (uint64_t i = 0; !ret && i < parts; i++)
		ret = cse_part_read(s, base, i, rev, b);
	if (!ret &&
	    (b->len != len ||
	     (uint32_t)crc32(crc32(0L, Z_NULL, 0), b->p, (uInt)len) != crc)) {
		log_err("etcd: %s%s: the parts do not read back whole",
			s->prefix, base);
		ret = -EBADMSG;
	}
	return ret;
}

/* Decodes log key @kv (record @seq, read at @rev) into @rec. */
static int cse_record_read(struct coord_store_etcd *s, const struct etcd_kv *kv,
			   uint64_t seq, int64_t rev, struct msg *rec)
{
	struct cse_buf b;
	uint64_t id, parts;
	unsigned int crc;
	char base[64];
	size_t len;
	int ret;

	if (kv->value_len && kv->value[0])
		return msg_decode(kv->value, kv->value_len, rec) ? -EBADMSG : 0;
	if (kv->value_len < 2 ||
	    sscanf((const char *)kv->value + 1,
		   "farpage-parts %16" SCNx64 " %" SCNu64 " %zu %8x", &id,
		   &parts, &len, &crc) != 4)
		return -EBADMSG;
	snprintf(base, sizeof(base), "rpart/%016" PRIx64 "/%016" PRIx64, seq,
		 id);
	ret = cse_parts_read(s, base, parts, len, crc, rev, &b);
	if (!ret && msg_decode(b.p, b.len, rec))
		ret = -EBADMSG;
	free(b.p);
	return ret;
}

/* Applies the records of one group (@kvs, in key order, read at @rev)
 * from s->seq on. */
static int cse_apply_group(struct coord_store_etcd *s, struct coord *c,
			   const struct etcd_kvs *kvs, int64_t rev,
			   uint64_t last)
{
	char why[MSG_TEXT_MAX];
	struct msg rec;
	uint64_t seq;
	int ret;

	for (size_t i = 0; i < kvs->n; i++) {
		const struct etcd_kv *kv = &kvs->kv[i];
		const char *k = (const char *)kv->key + strlen(s->prefix);

		if (sscanf(k, "log/%16" SCNx64, &seq) == 1 && seq <= s->seq)
			continue; /* in the snapshot or read already */
		if (sscanf(k, "log/%16" SCNx64, &seq) != 1 ||
		    seq != s->seq + 1 || seq > last) {
			log_err("etcd: %s at revision %" PRId64
				": record %" PRIu64
				" expected (the head names %" PRIu64 ")",
				(const char *)kv->key, kv->mod_rev, s->seq + 1,
				last);
			return -EBADMSG;
		}
		ret = cse_record_read(s, kv, seq, rev, &rec);
		if (ret) {
			log_err("etcd: %s: not a change record",
				(const char *)kv->key);
			return ret;
		}
		ret = coord_record_apply(c, &rec, why, sizeof(why));
		msg_fini(&rec);
		if (ret) {
			log_err("etcd: %s: record does not apply: %s",
				(const char *)kv->key,
				why[0] ? why : log_strerror(ret));
			return -EBADMSG;
		}
		s->seq = seq;
	}
	return 0;
}

/* Applies the records of snapshot @b (@len bytes) to @c. */
static int cse_snap_apply(struct coord *c, const uint8_t *b, size_t len)
{
	char why[MSG_TEXT_MAX];
	struct msg rec;
	size_t off = 0;
	uint32_t n;
	int ret;

	while (off < len) {
		if (len - off < 4)
			return -EBADMSG;
		n = (uint32_t)b[off] << 24 | (uint32_t)b[off + 1] << 16 |
		    (uint32_t)b[off + 2] << 8 | b[off + 3];
		off += 4;
		if (n > len - off || msg_decode(b + off, n, &rec))
			return -EBADMSG;
		ret = coord_record_apply(c, &rec, why, sizeof(why));
		msg_fini(&rec);
		if (ret) {
			log_err("etcd: a snapshot record does not apply: %s",
				why[0] ? why : log_strerror(ret));
			return -EBADMSG;
		}
		off += n;
	}
	return 0;
}

/*
 * Reads P"snap" at @rev (none: nothing to do) and applies its records;
 * s->seq becomes the last record it holds (at most @last).
 */
static int cse_snap_load(struct coord_store_etcd *s, struct coord *c,
			 int64_t rev, uint64_t last)
{
	char key[COORD_ETCD_KEY_MAX];
	size_t klen = cse_key(s, key, "snap");
	uint64_t seq, epoch, nonce, parts;
	struct cse_buf b = { 0 };
	struct etcd_kvs kvs;
	unsigned int crc;
	char base[48];
	size_t len;
	int ret, got;

	ret = etcd_get(s->e, key, klen, 0, 0, rev, &kvs);
	if (ret)
		return cse_err(s, ret, key);
	if (!kvs.n) {
		etcd_kvs_fini(&kvs);
		return 0; /* none yet */
	}
	got = sscanf((const char *)kvs.kv[0].value,
		     "%16" SCNx64 " %16" SCNx64 " %16" SCNx64 " %" SCNu64
		     " %zu %8x",
		     &seq, &epoch, &nonce, &parts, &len, &crc);
	s->snap_rev = kvs.kv[0].mod_rev;
	etcd_kvs_fini(&kvs);
	if (got != 6 || seq > last || !nonce) {
		log_err("etcd: %s: not a snapshot (or beyond the head)", key);
		return -EBADMSG;
	}
	snprintf(base, sizeof(base), "part/%016" PRIx64, nonce);
	ret = cse_parts_read(s, base, parts, len, crc, rev, &b);
	if (!ret)
		ret = cse_snap_apply(c, b.p, b.len);
	free(b.p);
	if (ret)
		return ret;
	if (epoch > c->epoch)
		c->epoch = epoch;
	s->seq = s->snap_seq = seq;
	s->snap_nonce = nonce;
	return 0;
}

/* The first log group still in etcd at @rev: where trimming starts. */
static int cse_trim_first(struct coord_store_etcd *s, int64_t rev)
{
	char key[COORD_ETCD_KEY_MAX];
	size_t klen = cse_key(s, key, "log/");
	struct etcd_kvs kvs;
	uint64_t seq;
	int ret;

	ret = etcd_get(s->e, key, klen, ETCD_PREFIX, 1, rev, &kvs);
	if (ret)
		return cse_err(s, ret, key);
	s->trim_group = s->seq >> COORD_ETCD_GROUP_SHIFT;
	if (kvs.n == 1 &&
	    sscanf((const char *)kvs.kv[0].key + strlen(s->prefix),
		   "log/%16" SCNx64, &seq) == 1)
		s->trim_group = seq >> COORD_ETCD_GROUP_SHIFT;
	etcd_kvs_fini(&kvs);
	return 0;
}

/* Reads P"head" and every record up to it, at one revision, into @c. */
static int cse_load(struct coord_store_etcd *s, struct coord *c)
{
	char key[COORD_ETCD_KEY_MAX];
	size_t klen = cse_key(s, key, "head");
	struct etcd_kvs kvs;
	uint64_t last = 0, who = 0;
	unsigned int old;
	int64_t rev;
	int ret;

	/* Small: an etcd without quorum is found out quickly. */
	old = etcd_set_timeout(s->e, COORD_ETCD_SHORT_MS);
	ret = etcd_get(s->e, key, klen, 0, 0, 0, &kvs);
	etcd_set_timeout(s->e, old);
	if (ret)
		return cse_err(s, ret, key);
	rev = kvs.rev;
	if (kvs.n == 1) {
		s->head_rev = kvs.kv[0].mod_rev;
		if (sscanf((const char *)kvs.kv[0].value,
			   "%16" SCNx64 " %16" SCNx64, &last, &who) != 2) {
			log_err("etcd: %s: not a head", key);
			etcd_kvs_fini(&kvs);
			return -EBADMSG;
		}
	}
	etcd_kvs_fini(&kvs);
	s->load_rev = rev;
	ret = cse_snap_load(s, c, rev, last);
	if (ret)
		return ret;
	for (uint64_t g = (s->seq + 1) >> COORD_ETCD_GROUP_SHIFT;
	     !ret && g <= last >> COORD_ETCD_GROUP_SHIFT; g++) {
		klen = cse_key(s, key, "log/%014" PRIx64, g);
		ret = etcd_get(s->e, key, klen, ETCD_PREFIX, 0, rev, &kvs);
		if (ret)
			return cse_err(s, ret, key);
		ret = cse_apply_group(s, c, &kvs, rev, last);
		etcd_kvs_fini(&kvs);
	}
	if (!ret && s->seq != last) {
		log_err("etcd: %slog/ ends at record %" PRIu64
			"; the head names %" PRIu64,
			s->prefix, s->seq, last);
		ret = -EBADMSG;
	}
	if (!ret)
		ret = cse_trim_first(s, rev);
	if (!ret && s->snap_nonce)
		log_info("etcd: a snapshot of %" PRIu64 " records and %" PRIu64
			 " records after it under %s read at revision %" PRId64
			 " (the last written by coordinator %016" PRIx64 ")",
			 s->snap_seq, last - s->snap_seq, s->prefix, rev, who);
	else if (!ret)
		log_info("etcd: %" PRIu64 " records under %s read at revision "
			 "%" PRId64 " (the last written by coordinator "
			 "%016" PRIx64 ")",
			 last, s->prefix, rev, who);
	return ret;
}

/*
 * A follower's catch-up: the records after s->seq up to the head, at the
 * head's revision. -ESTALE when they are not all there any more (a
 * snapshot trimmed them) or one does not apply: the tables are then
 * read again whole (cse_reload()).
 */
static int cse_follow(void *arg, struct coord *c)
{
	struct coord_store_etcd *s = arg;
	char key[COORD_ETCD_KEY_MAX];
	size_t klen = cse_key(s, key, "head");
	uint64_t last = 0, who;
	struct etcd_kvs kvs;
	unsigned int old;
	int64_t rev, mod;
	int ret;

	/* Not logged here: the caller says once that it cannot follow. The
	 * head is small: an etcd without quorum is found out quickly. */
	old = etcd_set_timeout(s->e, COORD_ETCD_FOLLOWER_MS);
	ret = etcd_get(s->e, key, klen, 0, 0, 0, &kvs);
	etcd_set_timeout(s->e, old);
	if (ret)
		return ret;
	rev = kvs.rev;
	mod = kvs.n == 1 ? kvs.kv[0].mod_rev : 0;
	if (kvs.n == 1 && sscanf((const char *)kvs.kv[0].value,
				 "%16" SCNx64 " %16" SCNx64, &last, &who) != 2)
		mod = -1;
	etcd_kvs_fini(&kvs);
	if (mod == s->head_rev)
		return 0;
	if (mod < 0 || last < s->seq)
		return -ESTALE;
	for (uint64_t g = (s->seq + 1) >> COORD_ETCD_GROUP_SHIFT;
	     !ret && g <= last >> COORD_ETCD_GROUP_SHIFT; g++) {
		klen = cse_key(s, key, "log/%014" PRIx64, g);
		ret = etcd_get(s->e, key, klen, ETCD_PREFIX, 0, rev, &kvs);
		if (ret)
			return ret;
		ret = cse_apply_group(s, c, &kvs, rev, last);
		etcd_kvs_fini(&kvs);
	}
	if (ret || s->seq != last)
		return -ESTALE;
	s->head_rev = mod;
	return 0;
}

static int cse_reload(void *arg, struct coord *c)
{
	struct coord_store_etcd *s = arg;

	s->seq = s->snap_seq = s->snap_nonce = 0;
	s->head_rev = s->snap_rev = 0;
	return cse_load(s, c);
}

static void cse_close(void *arg)
{
	struct coord_store_etcd *s = arg;

	if (!s)
		return;
	cse_lead_end(s);
	etcd_destroy(s->e);
	free(s);
}

/* A store of @cfg, not read yet. */
static int cse_new(const struct coord_cfg *cfg, struct coord_store_etcd **out)
{
	const char *prefix =
		cfg->etcd_prefix ? cfg->etcd_prefix : COORD_ETCD_PREFIX_DEFAULT;
	/* A request ends within 3 s: the coordinator answers (a change not
	 * committed) before its clients' 5-s calls give up on it. */
	struct etcd_cfg ecfg = { .endpoints = cfg->etcd,
				 .ca_file = cfg->etcd_ca,
				 .cert_file = cfg->etcd_cert,
				 .key_file = cfg->etcd_key,
				 .user = cfg->etcd_user,
				 .timeout_ms = COORD_ETCD_TIMEOUT_MS };
	char pw[COORD_ETCD_PASSWORD_MAX];
	struct coord_store_etcd *s;
	int ret;

	if (!*prefix || strlen(prefix) >= COORD_ETCD_PREFIX_MAX)
		return -EINVAL;
	if (cfg->etcd_password_file) {
		ret = cse_password_read(cfg->etcd_password_file, pw,
					sizeof(pw));
		if (ret)
			return ret;
		ecfg.password = pw;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	snprintf(s->prefix, sizeof(s->prefix), "%s", prefix);
	s->ttl_s = cfg->leader_ttl_s ? cfg->leader_ttl_s
				     : COORD_LEADER_TTL_S_DEFAULT;
	s->compact = !cfg->etcd_keep_history;
	ret = util_random_u64(&s->id);
	if (!ret)
		ret = etcd_create(&ecfg, &s->e);
	OPENSSL_cleanse(pw, sizeof(pw)); /* the client has its copy */
	if (ret) {
		cse_close(s);
		return ret;
	}
	*out = s;
	return 0;
}

/* An error a member that is starting, catching up or cut off gives: the
 * next try goes to another member (etcd.c moves on after it). */
static int cse_transient(int err)
{
	return err == -ETIMEDOUT || err == -ECONNRESET ||
	       err == -ECONNREFUSED || err == -EAGAIN || err == -EBUSY;
}

static int cse_open(struct coord *c, const struct coord_cfg *cfg)
{
	uint64_t end = evl_now_ms() + COORD_ETCD_OPEN_MS;
	struct coord_store_etcd *s;
	int ret;

	ret = cse_new(cfg, &s);
	if (ret)
		return ret;
	for (;;) {
		ret = cse_meta(s, &c->cid, 1);
		if (!ret)
			ret = cse_load(s, c);
		if (!ret || !cse_transient(ret) || evl_now_ms() >= end)
			break;
		log_warn("etcd: the tables not read (%s): trying again",
			 log_strerror(ret));
		coord_tables_free(c);
		c->epoch = 0;
		c->wgen_last = 0;
		s->seq = s->snap_seq = s->snap_nonce = 0;
		s->head_rev = 0;
		nanosleep(&(struct timespec){ .tv_nsec = COORD_ETCD_RETRY_MS *
							 1000000L },
			  NULL);
	}
	if (ret) {
		cse_close(s);
		return ret;
	}
	log_info("etcd: tables under %s at %s; this coordinator is "
		 "%016" PRIx64,
		 s->prefix, cfg->etcd, s->id);
	c->store_arg = s;
	return 0;
}

/* Puts @b as parts P@base/<n>; *@parts: how many. */
static int cse_parts_put(struct coord_store_etcd *s, const char *base,
			 const struct cse_buf *b, uint64_t *parts)
{
	char key[COORD_ETCD_KEY_MAX];
	size_t klen, off, n;
	uint64_t i;
	int ret;

	for (i = 0, off = 0; off < b->len; i++, off += n) {
		n = b->len - off < COORD_ETCD_PART_MAX ? b->len - off
						       : COORD_ETCD_PART_MAX;
		klen = cse_key(s, key, "%s/%08" PRIx64, base, i);
		ret = etcd_put(s->e, key, klen, b->p + off, n, 0, NULL);
		if (ret)
			return cse_err(s, ret, key);
	}
	*parts = i;
	return 0;
}

/*
 * A record over COORD_ETCD_INLINE_MAX: its parts P"rpart/<seq>/<id>/<n>"
 * (named by no one until the txn commits; a coordinator that loses the
 * race for <seq> leaves its own, which trimming deletes), and in @list
 * the value that names them.
 */
static int cse_rec_parts(struct coord_store_etcd *s, const uint8_t *rec,
			 size_t len, char *list, size_t list_len)
{
	struct cse_buf b = { .p = (uint8_t *)rec, .len = len, .cap = len };
	char base[64];
	uint64_t parts = 0;
	int ret;

	snprintf(base, sizeof(base), "rpart/%016" PRIx64 "/%016" PRIx64,
		 s->seq + 1, s->id);
	ret = cse_parts_put(s, base, &b, &parts);
	if (ret)
		return ret;
	list[0] = '\0';
	snprintf(list + 1, list_len - 1, COORD_ETCD_PARTS_FMT, s->id, parts,
		 len,
		 (unsigned int)crc32(crc32(0L, Z_NULL, 0), rec, (uInt)len));
	return 0;
}

/*
 * Commits record @rec as the next one: P"log/<seq + 1>" and P"head" in
 * one txn, if P"head" is as this coordinator last saw it.
 */
static int cse_append(void *arg, const uint8_t *rec, size_t len)
{
	struct coord_store_etcd *s = arg;
	char hkey[COORD_ETCD_KEY_MAX], lkey[COORD_ETCD_KEY_MAX], head[40];
	size_t hlen = cse_key(s, hkey, "head");
	size_t llen = cse_key(s, lkey, "log/%016" PRIx64, s->seq + 1);
	struct etcd_cmp cmp[2] = { { .key = hkey,
				     .key_len = hlen,
				     .target = ETCD_CMP_MOD,
				     .result = ETCD_CMP_EQ,
				     .num = s->head_rev } };
	size_t ncmp = 1 + cse_fence(s, &cmp[1]);
	struct etcd_op ok[2] = {
		{ .type = ETCD_OP_PUT,
		  .key = lkey,
		  .key_len = llen,
		  .value = rec,
		  .value_len = len },
		{ .type = ETCD_OP_PUT, .key = hkey, .key_len = hlen },
	};
	struct etcd_op no = { .type = ETCD_OP_GET,
			      .key = hkey,
			      .key_len = hlen };
	struct etcd_txn_resp r;
	char list[96];
	int ret;

	if (s->el && ncmp == 1) {
		log_err("etcd: record %" PRIu64
			" not written: this coordinator "
			"no longer leads",
			s->seq + 1);
		return -ESTALE;
	}
	if (len > COORD_ETCD_INLINE_MAX) {
		ret = cse_rec_parts(s, rec, len, list, sizeof(list));
		if (ret)
			return ret;
		ok[0].value = list;
		ok[0].value_len = 1 + strlen(list + 1);
	}
	snprintf(head, sizeof(head), "%016" PRIx64 " %016" PRIx64, s->seq + 1,
		 s->id);
	ok[1].value = head;
	ok[1].value_len = strlen(head);
	ret = etcd_txn(s->e, cmp, ncmp, ok, 2, &no, 1, &r);
	if (ret) {
		log_err("etcd (%s): record %" PRIu64 " (%zu bytes) %s: %s (%s)",
			etcd_endpoint(s->e), s->seq + 1, len,
			etcd_err_outcome(ret) == ETCD_NOT_APPLIED
				? "not committed"
				: "of unknown outcome",
			etcd_last_error(s->e), log_strerror(ret));
		return ret;
	}
	if (!r.succeeded) {
		const struct etcd_kvs *kvs = r.n == 1 ? &r.resp[0].kvs : NULL;

		log_err("etcd: %s changed under this coordinator (now '%s' "
			"at revision %" PRId64 ", was record %" PRIu64
			" at %" PRId64 "), or it no longer leads: another "
			"coordinator writes there",
			hkey,
			kvs && kvs->n ? (const char *)kvs->kv[0].value : "",
			kvs && kvs->n ? kvs->kv[0].mod_rev : 0, s->seq,
			s->head_rev);
		etcd_txn_resp_fini(&r);
		return -ESTALE;
	}
	s->seq++;
	s->head_rev = r.rev;
	etcd_txn_resp_fini(&r);
	return 0;
}

/* append() committed each record: nothing is left to make durable. */
static int cse_sync(void *arg)
{
	return 0;
}

static uint64_t cse_records(const void *arg)
{
	const struct coord_store_etcd *s = arg;

	return s->seq - s->snap_seq;
}

static int cse_emit(void *arg, const struct msg *rec)
{
	struct cse_buf *b = arg;
	uint8_t *p, *np;
	size_t len, cap;
	int ret;

	ret = msg_encode(rec, &p, &len);
	if (ret)
		return ret;
	if (b->len + 4 + len > b->cap) {
		cap = b->cap ? b->cap : 4096;
		while (cap < b->len + 4 + len)
			cap *= 2;
		np = realloc(b->p, cap);
		if (!np) {
			free(p);
			return -ENOMEM;
		}
		b->p = np;
		b->cap = cap;
	}
	b->p[b->len] = (uint8_t)(len >> 24);
	b->p[b->len + 1] = (uint8_t)(len >> 16);
	b->p[b->len + 2] = (uint8_t)(len >> 8);
	b->p[b->len + 3] = (uint8_t)len;
	memcpy(b->p + b->len + 4, p, len);
	b->len += 4 + len;
	free(p);
	return 0;
}

/* Deletes prefix P@fmt...; a failure is only logged (nothing reads
 * what it leaves). */
__attribute__((format(printf, 2, 3))) static void
cse_drop(struct coord_store_etcd *s, const char *fmt, ...)
{
	char key[COORD_ETCD_KEY_MAX], rest[64];
	va_list ap;
	int64_t n;

	va_start(ap, fmt);
	vsnprintf(rest, sizeof(rest), fmt, ap);
	va_end(ap);
	n = etcd_delete(s->e, key, cse_key(s, key, "%s", rest), ETCD_PREFIX);
	if (n < 0)
		log_warn("etcd: %s not deleted: %s", key,
			 etcd_last_error(s->e));
}

/*
 * etcd keeps every revision of every key until its history is compacted,
 * and its database grows until then (to its quota, after which it takes
 * no write). The records a snapshot holds are deleted after it; the
 * revisions before the snapshot preceding it are read by no one here (a
 * reader that far behind reads the tables again: -ESTALE), so they go.
 * The compaction is etcd-wide: --etcd-keep-history leaves it to the
 * owner of a shared etcd. A failure is only logged (the next snapshot
 * tries again); -ESTALE: compacted that far already.
 */
static void cse_compact(struct coord_store_etcd *s)
{
	int ret;

	if (!s->compact || s->snap_rev <= 0)
		return;
	ret = etcd_compact(s->e, s->snap_rev);
	if (!ret)
		log_info("etcd: history before revision %" PRId64 " compacted",
			 s->snap_rev);
	else if (ret != -ESTALE)
		log_warn("etcd: history before revision %" PRId64
			 " not compacted: %s",
			 s->snap_rev, etcd_last_error(s->e));
}

/*
 * The tables as a snapshot of the records up to s->seq: its parts first
 * (under a fresh nonce, read by no one yet), then P"snap" naming them in
 * a txn that compares the head as a change does. Then the parts of the
 * one before and the log groups it holds whole are deleted.
 */
static int cse_snapshot(void *arg, struct coord *c)
{
	struct coord_store_etcd *s = arg;
	char hkey[COORD_ETCD_KEY_MAX], skey[COORD_ETCD_KEY_MAX], val[128];
	size_t hlen = cse_key(s, hkey, "head"), slen = cse_key(s, skey, "snap");
	struct etcd_cmp cmp[2] = { { .key = hkey,
				     .key_len = hlen,
				     .target = ETCD_CMP_MOD,
				     .result = ETCD_CMP_EQ,
				     .num = s->head_rev } };
	size_t ncmp = 1 + cse_fence(s, &cmp[1]);
	struct etcd_op put = { .type = ETCD_OP_PUT,
			       .key = skey,
			       .key_len = slen };
	struct cse_buf b = { 0 };
	struct etcd_txn_resp r;
	uint64_t nonce, parts = 0, old = s->snap_nonce;
	int64_t rev;
	char base[48];
	size_t len;
	int ret;

	ret = util_random_u64(&nonce);
	nonce |= 1; /* never 0: none */
	snprintf(base, sizeof(base), "part/%016" PRIx64, nonce);
	if (!ret)
		ret = coord_records_dump(c, cse_emit, &b);
	if (!ret)
		ret = cse_parts_put(s, base, &b, &parts);
	len = b.len;
	snprintf(
		val, sizeof(val),
		"%016" PRIx64 " %016" PRIx64 " %016" PRIx64 " %" PRIu64
		" %zu %08x",
		s->seq, c->epoch, nonce, parts, len,
		(unsigned int)(len ? crc32(crc32(0L, Z_NULL, 0), b.p, (uInt)len)
				   : crc32(0L, Z_NULL, 0)));
	free(b.p);
	if (ret)
		return ret;
	put.value = val;
	put.value_len = strlen(val);
	if (s->el && ncmp == 1)
		return -ESTALE; /* no longer leads */
	ret = etcd_txn(s->e, cmp, ncmp, &put, 1, NULL, 0, &r);
	if (ret)
		return cse_err(s, ret, skey);
	if (!r.succeeded) {
		log_err("etcd: %s changed under this coordinator while it "
			"wrote a snapshot: another coordinator writes there",
			hkey);
		etcd_txn_resp_fini(&r);
		return -ESTALE;
	}
	rev = r.rev;
	etcd_txn_resp_fini(&r);
	s->snap_seq = s->seq;
	s->snap_nonce = nonce;
	if (old)
		cse_drop(s, "part/%016" PRIx64 "/", old);
	for (; ((s->trim_group + 1) << COORD_ETCD_GROUP_SHIFT) - 1 <= s->seq;
	     s->trim_group++) {
		cse_drop(s, "log/%014" PRIx64, s->trim_group);
		cse_drop(s, "rpart/%014" PRIx64, s->trim_group);
	}
	log_info("etcd: snapshot of %" PRIu64 " records in %" PRIu64
		 " parts (%zu bytes) under %s",
		 s->seq, parts, len, s->prefix);
	cse_compact(s);
	s->snap_rev = rev;
	return 0;
}

/* --check: cse_open() without writing (no P"meta" made). */
static int cse_check(struct coord *c, const struct coord_cfg *cfg,
		     unsigned int flags, void *arg)
{
	struct coord_etcd_report *rep = arg;
	struct coord_store_etcd *s;
	int ret;

	ret = cse_new(cfg, &s);
	if (ret)
		return ret;
	ret = cse_meta(s, &c->cid, 0);
	rep->found = ret != -ENOENT;
	if (ret == -ENOENT)
		ret = 0;
	else if (!ret)
		ret = cse_load(s, c);
	if (!ret && rep->found) {
		rep->snap_records = s->snap_seq;
		rep->records = s->seq - s->snap_seq;
		rep->rev = s->load_rev;
	}
	cse_close(s);
	return ret;
}

const struct coord_store_ops coord_store_etcd = {
	.name = "etcd",
	.rec_max = FRAME_MAX,
	.open = cse_open,
	.append = cse_append,
	.sync = cse_sync,
	.records = cse_records,
	.snapshot = cse_snapshot,
	.close = cse_close,
	.check = cse_check,
	.lead = cse_lead,
	.follow = cse_follow,
	.reload = cse_reload,
};
