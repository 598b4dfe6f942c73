// SPDX-License-Identifier: MIT
/*
 * farpage-coordinator --import DATA_DIR --store etcd://...: the tables of
 * a data directory copied into etcd once (coord.h coord_import()). The
 * directory is read as --check reads it (the WAL store's check(),
 * nothing in it changes); the prefix must hold nothing; P"meta" is made
 * with the directory's cluster id (agents then carry on with the ids they
 * have), and the tables are written through the etcd store's own
 * snapshot(), so a coordinator started on the prefix loads them as it
 * loads any snapshot. They are then read back through the store's check()
 * and compared record for record with the directory's.
 */
#define LOG_PREFIX "coord: "
#include "coord_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "etcd.h"
#include "log.h"
#include "msg.h"
#include "wal.h"

/* The tables as the records coord_records_dump() emits, each msg_encode()d
 * with its length before it. */
struct cim_dump {
	uint8_t *p;
	size_t len, cap;
	uint64_t records, bytes; /* records, and their encoded bytes */
};

static int cim_emit(void *arg, const struct msg *rec)
{
	struct cim_dump *d = arg;
	uint8_t *p, *np;
	size_t len, cap;
	int ret;

	ret = msg_encode(rec, &p, &len);
	if (ret)
		return ret;
	if (d->len + sizeof(len) + len > d->cap) {
		cap = d->cap ? d->cap : 4096;
		while (cap < d->len + sizeof(len) + len)
			cap *= 2;
		np = realloc(d->p, cap);
		if (!np) {
			free(p);
			return -ENOMEM;
		}
		d->p = np;
		d->cap = cap;
	}
	memcpy(d->p + d->len, &len, sizeof(len));
	memcpy(d->p + d->len + sizeof(len), p, len);
	d->len += sizeof(len) + len;
	d->records++;
	d->bytes += len;
	free(p);
	return 0;
}

/*
 * The cluster id of @dir's COORD_CID_FILE, read only: 0 in *@cid if there
 * is none (a fresh one is made then), -EBADMSG if it is not one.
 */
static int cim_cid_read(const char *dir, uint64_t *cid)
{
	char path[4096], buf[32];
	ssize_t n;
	int fd;

	*cid = 0;
	snprintf(path, sizeof(path), "%s/%s", dir, COORD_CID_FILE);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	if (n != 17 || buf[16] != '\n' || sscanf(buf, "%16" SCNx64, cid) != 1 ||
	    !*cid) {
		log_err("%s: not a cluster id (16 hex digits)", path);
		return -EBADMSG;
	}
	return 0;
}

/* Tables in memory only (no store), for the records to apply to. */
static int cim_tables(struct coord **out)
{
	struct coord_cfg mem = { 0 };

	return coord_create(&mem, 0, out);
}

/*
 * Reads @dir as --check does into fresh tables *@out, and its cluster id
 * into (*out)->cid. -EBADMSG if start-up would refuse it (@wrep says
 * why).
 */
static int cim_wal_read(const char *dir, struct coord_import_report *rep,
			struct wal_report *wrep, struct coord **out)
{
	struct coord *c;
	uint64_t cid;
	int ret;

	ret = cim_tables(&c);
	if (ret)
		return ret;
	ret = coord_store_wal.check(c, &(struct coord_cfg){ .data_dir = dir },
				    0, wrep);
	if (!ret && wrep->state == WAL_STATE_BAD)
		ret = -EBADMSG;
	if (!ret)
		ret = cim_cid_read(dir, &cid);
	if (ret) {
		coord_destroy(c);
		return ret;
	}
	rep->cid_made = !cid;
	if (cid)
		c->cid = cid;
	rep->cid = c->cid;
	*out = c;
	return 0;
}

/* What the prefix holds: rep->held (keys) and the first of them. */
static int cim_prefix_held(struct etcd *e, const char *prefix,
			   struct coord_import_report *rep)
{
	char meta[COORD_ETCD_PREFIX_MAX + 8];
	struct etcd_kvs kvs;
	int ret;

	ret = etcd_get(e, prefix, strlen(prefix), ETCD_PREFIX, 1, 0, &kvs);
	if (ret)
		return ret;
	rep->held = kvs.count;
	if (kvs.n)
		snprintf(rep->held_key, sizeof(rep->held_key), "%s",
			 (const char *)kvs.kv[0].key);
	etcd_kvs_fini(&kvs);
	if (!rep->held)
		return 0;
	snprintf(meta, sizeof(meta), "%smeta", prefix);
	ret = etcd_get(e, meta, strlen(meta), 0, 0, 0, &kvs);
	if (ret)
		return ret;
	if (kvs.n)
		snprintf(rep->held_meta, sizeof(rep->held_meta), "%.*s",
			 (int)kvs.kv[0].value_len,
			 (const char *)kvs.kv[0].value);
	etcd_kvs_fini(&kvs);
	return 0;
}

/*
 * Makes P"meta" naming cluster @cid, if the prefix is empty: -EEXIST (and
 * what is there in @rep) if it is not.
 */
static int cim_meta_make(const struct coord_cfg *cfg, const char *prefix,
			 uint64_t cid, struct coord_import_report *rep)
{
	struct etcd_cfg ecfg = { .endpoints = cfg->etcd };
	char key[COORD_ETCD_PREFIX_MAX + 8], val[96];
	struct etcd_txn_resp r;
	struct etcd *e;
	int ret;

	ret = etcd_create(&ecfg, &e);
	if (ret)
		return ret;
	ret = cim_prefix_held(e, prefix, rep);
	if (ret) {
		log_err("etcd (%s): %s: %s (%s)", etcd_endpoint(e), prefix,
			etcd_last_error(e), log_strerror(ret));
		goto out;
	}
	if (rep->held) {
		ret = -EEXIST;
		goto out;
	}
	snprintf(key, sizeof(key), "%smeta", prefix);
	snprintf(val, sizeof(val), COORD_ETCD_META_FMT, COORD_ETCD_VERSION,
		 cid);
	/* Made only if no one made it since the prefix read empty. */
	ret = etcd_txn(e,
		       &(struct etcd_cmp){ .key = key,
					   .key_len = strlen(key),
					   .target = ETCD_CMP_CREATE,
					   .result = ETCD_CMP_EQ },
		       1,
		       &(struct etcd_op){ .type = ETCD_OP_PUT,
					  .key = key,
					  .key_len = strlen(key),
					  .value = val,
					  .value_len = strlen(val) },
		       1, NULL, 0, &r);
	if (ret) {
		log_err("etcd (%s): %s: %s (%s)", etcd_endpoint(e), key,
			etcd_last_error(e), log_strerror(ret));
		goto out;
	}
	if (!r.succeeded) {
		ret = cim_prefix_held(e, prefix, rep);
		if (!ret)
			ret = -EEXIST;
	}
	etcd_txn_resp_fini(&r);
out:
	etcd_destroy(e);
	return ret;
}

/* Writes the tables of @c as the snapshot of the (empty) etcd store. */
static int cim_etcd_write(struct coord *c, const struct coord_cfg *cfg)
{
	uint64_t cid = c->cid;
	int ret;

	ret = coord_store_etcd.open(c, cfg);
	if (ret)
		return ret;
	c->store = &coord_store_etcd;
	if (c->store->records(c->store_arg)) {
		log_err("etcd: changes were written under the prefix since "
			"the import made its meta: a coordinator runs there");
		return -ESTALE;
	}
	if (c->cid != cid) {
		log_err("etcd: the store reads cluster id %016" PRIx64
			", not the %016" PRIx64 " just written",
			c->cid, cid);
		return -EBADMSG;
	}
	return c->store->snapshot(c->store_arg, c);
}

/* Reads the prefix back as a coordinator would and compares it with @d. */
static int cim_verify(const struct coord_cfg *cfg, const struct cim_dump *d,
		      uint64_t cid)
{
	struct coord_etcd_report er = { 0 };
	struct cim_dump got = { 0 };
	struct coord *c;
	int ret;

	ret = cim_tables(&c);
	if (ret)
		return ret;
	ret = coord_store_etcd.check(c, cfg, 0, &er);
	if (!ret)
		ret = coord_records_dump(c, cim_emit, &got);
	if (!ret && (!er.found || c->cid != cid || got.len != d->len ||
		     memcmp(got.p, d->p, d->len))) {
		log_err("etcd: the tables read back differ from the data "
			"directory's (%" PRIu64 " records, %" PRIu64
			" bytes; want %" PRIu64 ", %" PRIu64 ")",
			got.records, got.bytes, d->records, d->bytes);
		ret = -EIO;
	}
	free(got.p);
	coord_destroy(c);
	return ret;
}

int coord_import(const char *data_dir, const struct coord_cfg *cfg,
		 struct coord_import_report *rep, struct wal_report *wrep)
{
	const char *prefix =
		cfg->etcd_prefix ? cfg->etcd_prefix : COORD_ETCD_PREFIX_DEFAULT;
	struct cim_dump d = { 0 };
	struct coord *c = NULL;
	int ret;

	memset(rep, 0, sizeof(*rep));
	memset(wrep, 0, sizeof(*wrep));
	if (!cfg->etcd || !*prefix || strlen(prefix) >= COORD_ETCD_PREFIX_MAX)
		return -EINVAL;
	ret = cim_wal_read(data_dir, rep, wrep, &c);
	if (ret)
		return ret;
	rep->nodes = c->n_nodes;
	rep->regions = c->n_regions;
	rep->endpoints = c->n_eps;
	ret = coord_records_dump(c, cim_emit, &d);
	if (ret)
		goto out;
	rep->records = d.records;
	rep->bytes = d.bytes;
	ret = cim_meta_make(cfg, prefix, c->cid, rep);
	if (ret)
		goto out;
	rep->written = 1;
	ret = cim_etcd_write(c, cfg);
	if (!ret)
		ret = cim_verify(cfg, &d, rep->cid);
out:
	free(d.p);
	coord_destroy(c);
	return ret;
}
