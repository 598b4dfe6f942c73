// SPDX-License-Identifier: MIT
/*
 * The coordinator's public face (coord.h): the tables made and recovered,
 * requests authorized and dispatched to their handlers (coord_on.h), the
 * figures for /metrics. The tables themselves live in the files of
 * coord_int.h: every change is one change record, applied, then logged;
 * recovery applies the same records, so live and recovered state cannot
 * differ.
 */
#define LOG_PREFIX "coord: "
#include "coord.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coord_int.h"
#include "coord_on.h"
#include "log.h"
#include "msg.h"
#include "util.h"

/*
 * The tables' identity: read from @dir's COORD_CID_FILE, or made and
 * written there (durably: file and directory synced) the first time.
 */
static int coord_cid_load(const char *dir, uint64_t *cid)
{
	char path[4096], tmp[4104], buf[32];
	int fd, dfd, ret;
	ssize_t n;

	snprintf(path, sizeof(path), "%s/%s", dir, COORD_CID_FILE);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		buf[n > 0 ? n : 0] = '\0';
		if (n != 17 || buf[16] != '\n' ||
		    sscanf(buf, "%16" SCNx64, cid) != 1 || !*cid) {
			log_err("%s: not a cluster id (16 hex digits)", path);
			return -EBADMSG;
		}
		return 0;
	}
	if (errno != ENOENT)
		return -errno;
	ret = util_random_u64(cid);
	if (ret)
		return ret;
	snprintf(buf, sizeof(buf), "%016" PRIx64 "\n", *cid);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	if (write(fd, buf, 17) != 17 || fsync(fd)) {
		ret = errno ? -errno : -EIO;
		close(fd);
		return ret;
	}
	close(fd);
	if (rename(tmp, path))
		return -errno;
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	ret = fsync(dfd) ? -errno : 0;
	close(dfd);
	return ret;
}

int coord_create(const struct coord_cfg *cfg, uint64_t now_ms,
		 struct coord **out)
{
	struct coord *c;
	int ret;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->lease_ms = cfg->lease_ms ? cfg->lease_ms : COORD_LEASE_MS_DEFAULT;
	c->sync_ms = cfg->sync_timeout_ms ? cfg->sync_timeout_ms
					  : COORD_SYNC_MS_DEFAULT;
	c->snapshot_every = cfg->snapshot_every ? cfg->snapshot_every
						: COORD_SNAPSHOT_EVERY_DEFAULT;
	c->grant_key = cfg->grant_key;
	c->grant_key_arg = cfg->grant_key_arg;
	c->grant_ttl_ms = cfg->grant_ttl_ms ? cfg->grant_ttl_ms
					    : COORD_GRANT_TTL_MS_DEFAULT;
	/* Changes with every restart: agents re-read the node table. */
	ret = util_random_u64(&c->ngen);
	if (ret)
		goto err;
	/* Task ids of another run of the coordinator are never reused:
	 * a node's report of one it has not made is ignored. */
	ret = util_random_u64(&c->task_last);
	if (ret)
		goto err;
	c->task_last &= ~(UINT64_C(0xffffffff));
	if (cfg->etcd) {
		c->store = &coord_store_etcd;
		ret = c->store->open(c, cfg);
		if (ret)
			goto err;
	} else if (cfg->data_dir) {
		c->store = &coord_store_wal;
		ret = c->store->open(c, cfg);
		if (ret)
			goto err;
		ret = coord_cid_load(cfg->data_dir, &c->cid);
		if (ret) {
			log_errno(ret, "cluster id in %s", cfg->data_dir);
			goto err;
		}
	} else {
		ret = util_random_u64(&c->cid);
		if (ret)
			goto err;
	}
	/* With several coordinators it leads once elected (coord_lead.c). */
	c->leads = !c->store || !c->store->lead;
	ret = coord_recovered(c, now_ms);
	if (ret)
		goto err;
	if (c->store)
		log_info("recovered %u nodes, %u regions, %u endpoints; "
			 "cluster id %016llx",
			 c->n_nodes, c->n_regions, c->n_eps,
			 (unsigned long long)c->cid);
	*out = c;
	return 0;
err:
	coord_destroy(c);
	return ret;
}

int coord_check(const char *data_dir, unsigned int flags,
		struct wal_report *rep)
{
	struct coord_cfg cfg = { 0 }; /* in memory: the records apply here */
	struct coord *c;
	int ret;

	ret = coord_create(&cfg, 0, &c);
	if (ret)
		return ret;
	ret = coord_store_wal.check(
		c, &(struct coord_cfg){ .data_dir = data_dir }, flags, rep);
	coord_destroy(c);
	return ret;
}

int coord_check_etcd(const struct coord_cfg *cfg, struct coord_etcd_report *rep)
{
	struct coord_cfg mem = { 0 }; /* in memory: the records apply here */
	struct coord *c;
	int ret;

	memset(rep, 0, sizeof(*rep));
	ret = coord_create(&mem, 0, &c);
	if (ret)
		return ret;
	ret = coord_store_etcd.check(c, cfg, 0, rep);
	if (!ret && rep->found) {
		rep->nodes = c->n_nodes;
		rep->regions = c->n_regions;
		rep->endpoints = c->n_eps;
	}
	coord_destroy(c);
	return ret;
}

int coord_recovered(struct coord *c, uint64_t now_ms)
{
	/* Leases are not durable: give recovered nodes one to heartbeat. */
	for (uint32_t i = 0; i < c->n_nodes; i++) {
		if (c->nodes[i].gone)
			continue;
		c->nodes[i].lease_end = now_ms + c->lease_ms;
		c->nodes[i].was_up = 1;
	}
	return coord_repl_recover(c);
}

void coord_destroy(struct coord *c)
{
	if (!c)
		return;
	if (c->store)
		c->store->close(c->store_arg);
	coord_tables_free(c);
	free(c);
}

int coord_msg_is_request(enum msg_type type)
{
	switch (type) {
	case MSG_T_NODE_JOIN:
	case MSG_T_HEARTBEAT:
	case MSG_T_NODE_LIST:
	case MSG_T_REGION_CREATE:
	case MSG_T_REGION_GET:
	case MSG_T_REGION_LIST:
	case MSG_T_REGION_DELETE:
	case MSG_T_ENDPOINT_PUT:
	case MSG_T_ENDPOINT_GET:
	case MSG_T_MR_PUT:
	case MSG_T_WRITE_LEASE:
	case MSG_T_WRITE_RELEASE:
	case MSG_T_REGION_WRITERS:
	case MSG_T_REGION_READERS:
	case MSG_T_LEASE_BREAK:
	case MSG_T_NODE_FORGET:
	case MSG_T_REGION_REBUILD:
		return 1;
	default:
		return 0;
	}
}

int coord_authorize(const struct coord *c, enum coord_role role,
		    const char *name, const struct msg *req, struct msg *rep)
{
	const struct coord_node *n;

	msg_init(rep, MSG_T_NONE);
	switch (req->type) {
	case MSG_T_NODE_JOIN:
	case MSG_T_HEARTBEAT:
	case MSG_T_ENDPOINT_PUT:
	case MSG_T_MR_PUT:
	case MSG_T_WRITE_LEASE:
	case MSG_T_WRITE_RELEASE:
		break; /* a node's own business: below */
	case MSG_T_REGION_CREATE:
	case MSG_T_REGION_DELETE:
	case MSG_T_REGION_WRITERS:
	case MSG_T_REGION_READERS:
	case MSG_T_LEASE_BREAK:
	case MSG_T_NODE_FORGET:
		if (role == COORD_ROLE_NODE) {
			msg_error(rep, -EACCES,
				  "node %s: %s needs the admin key", name,
				  msg_type_name(req->type));
			return -EACCES;
		}
		return 0;
	case MSG_T_REGION_GET:
		/* The layout, and with it the read grants, only to the
		 * region's readers; the admin key reads every layout. */
		if (role == COORD_ROLE_NODE)
			return coord_acl_read_check(c, name, req, rep);
		return 0;
	default:
		return 0; /* lookups: anyone authenticated */
	}
	if (role == COORD_ROLE_ANY)
		return 0;
	if (role != COORD_ROLE_NODE) {
		msg_error(rep, -EACCES,
			  "%s is for node keys, not the admin key",
			  msg_type_name(req->type));
		return -EACCES;
	}
	if (req->type == MSG_T_NODE_JOIN) {
		if (strcmp(req->name, name)) {
			msg_error(rep, -EACCES,
				  "the key of node %s cannot join as %s", name,
				  req->name);
			return -EACCES;
		}
		return 0;
	}
	/* Only for its own node id. An id the tables do not have is the
	 * handler's to refuse (ENOENT: the agent joins again). */
	n = coord_node_slot(c, req->node);
	if (n && n->gone) {
		/* Its name's key now belongs to a new node, if any: nothing
		 * of the old one may come back (ESTALE: join again). */
		int err = req->type == MSG_T_HEARTBEAT ? -ESTALE : -EACCES;

		msg_error(rep, err, "node %llu (%s) was forgotten; join again",
			  (unsigned long long)req->node, n->name);
		return err;
	}
	if (n && strcmp(n->name, name)) {
		/* A heartbeat of an id that is another node's now (tables
		 * made anew): ESTALE, as for another instance, and the
		 * agent joins again. */
		int err = req->type == MSG_T_HEARTBEAT ? -ESTALE : -EACCES;

		msg_error(rep, err,
			  "the key of node %s cannot act for node %llu (%s)",
			  name, (unsigned long long)req->node, n->name);
		return err;
	}
	return 0;
}

int coord_handle(struct coord *c, const struct msg *req, struct msg *rep,
		 uint64_t now_ms)
{
	int fatal = 0;

	msg_init(rep, MSG_T_NONE);
	switch (req->type) {
	case MSG_T_NODE_JOIN:
		coord_on_join(c, req, rep, now_ms, &fatal);
		break;
	case MSG_T_HEARTBEAT:
		coord_on_heartbeat(c, req, rep, now_ms, &fatal);
		break;
	case MSG_T_NODE_LIST:
		coord_on_node_list(c, rep, now_ms);
		break;
	case MSG_T_REGION_CREATE:
		coord_on_region_create(c, req, rep, now_ms, &fatal);
		break;
	case MSG_T_REGION_GET:
		coord_on_region_get(c, req, rep);
		break;
	case MSG_T_REGION_LIST:
		coord_on_region_list(c, rep);
		break;
	case MSG_T_REGION_DELETE:
		coord_on_region_delete(c, req, rep, &fatal);
		break;
	case MSG_T_ENDPOINT_PUT:
		coord_on_endpoint_put(c, req, rep, &fatal);
		break;
	case MSG_T_ENDPOINT_GET:
		coord_on_endpoint_get(c, req, rep);
		break;
	case MSG_T_MR_PUT:
		coord_on_mr_put(c, req, rep, &fatal);
		break;
	case MSG_T_WRITE_LEASE:
		coord_on_write_lease(c, req, rep, now_ms, &fatal);
		break;
	case MSG_T_WRITE_RELEASE:
		coord_on_write_release(c, req, rep, &fatal);
		break;
	case MSG_T_REGION_WRITERS:
	case MSG_T_REGION_READERS:
		coord_on_region_acl(c, req, rep, &fatal);
		break;
	case MSG_T_LEASE_BREAK:
		coord_on_lease_break(c, req, rep, &fatal);
		break;
	case MSG_T_NODE_FORGET:
		coord_on_node_forget(c, req, rep, now_ms, &fatal);
		break;
	case MSG_T_REGION_REBUILD:
		coord_on_region_rebuild(c, req, rep, now_ms, &fatal);
		break;
	default:
		return -EPROTO;
	}
	/* Handler errors are in rep; only a log failure is ours to return. */
	if (fatal) {
		msg_fini(rep);
		return fatal;
	}
	return 0;
}

void coord_figures(struct coord *c, struct coord_figures *out)
{
	memset(out, 0, sizeof(*out));
	for (uint32_t i = 0; i < c->n_nodes; i++) {
		if (c->nodes[i].gone)
			continue;
		if (c->nodes[i].was_up)
			out->nodes_up++;
		else
			out->nodes_down++;
	}
	out->regions = c->n_regions;
	out->lease_expiries = c->lease_expiries;
	out->sync_lapses = c->sync_lapses;
	/* Counted again only when nodes or regions changed. */
	if (!c->lost_valid || c->lost_ngen != c->ngen ||
	    c->lost_epoch != c->epoch) {
		c->lost = 0;
		c->r_missing = c->r_rebuilding = c->r_unsynced = 0;
		for (uint32_t i = 0; i < c->n_regions; i++) {
			const struct coord_region *r = c->regions[i];
			uint32_t lost, missing, rebuilding;

			if (r->replicas > 1) {
				coord_repl_health(r, &lost, &missing,
						  &rebuilding);
				c->r_missing += missing;
				c->r_rebuilding += rebuilding;
				c->r_unsynced += lost;
				continue;
			}
			for (uint32_t k = 0; k < r->n_chunks; k++) {
				const struct msg_chunk *ch = &r->chunks[k];
				const struct coord_node *n =
					coord_node_find(c, ch->node);

				c->lost += n && ch->inst &&
					   ch->inst != n->instance;
			}
		}
		c->lost_ngen = c->ngen;
		c->lost_epoch = c->epoch;
		c->lost_valid = 1;
	}
	out->chunks_lost = c->lost;
	out->replicas_missing = c->r_missing;
	out->replicas_rebuilding = c->r_rebuilding;
	out->chunks_unsynced = c->r_unsynced;
	out->rebuilds_done = c->tasks_done;
	out->rebuilds_failed = c->tasks_failed;
}
