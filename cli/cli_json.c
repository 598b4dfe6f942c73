// SPDX-License-Identifier: MIT
/*
 * The CLI's JSON objects (json-c, through fp_json): a node, a region, a
 * region's chunk records, one for every command that prints them with
 * --json (docs/cli.md, "JSON output"), so that each is built one way.
 */
#include "cli.h"
#include "fp_json.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

uint32_t cli_region_lost(const struct msg *nodes, const struct msg *r)
{
	uint32_t lost = 0;

	/* Replicated: a restarted owner's replicas are MISSING (health). */
	if (r->replicas > 1)
		return 0;
	for (uint32_t i = 0; i < r->n_chunks; i++) {
		const struct msg_chunk *ch = &r->chunks[i];

		if (!ch->inst)
			continue;
		for (uint32_t j = 0; j < nodes->n_nodes; j++) {
			const struct msg_node *n = &nodes->nodes[j];

			if (n->id == ch->node && n->instance != ch->inst) {
				lost++;
				break;
			}
		}
	}
	return lost;
}

struct json_object *cli_json_node(const struct msg_node *n, int gone)
{
	struct json_object *o = json_object_new_object(), *peers;
	int err = 0;

	if (!o)
		return NULL;
	err |= fp_json_set_u64(o, "id", n->id);
	err |= fp_json_set_str(o, "name", n->name);
	err |= fp_json_set_str(o, "data_addr", n->data_addr);
	err |= fp_json_set_u64(o, "pool_size", n->pool_size);
	err |= fp_json_set_bool(o, "up", n->up);
	if (gone)
		err |= fp_json_set_bool(o, "gone", 1);
	err |= fp_json_set_u64(o, "lease_ms", n->lease_ms);
	peers = json_object_new_array();
	err |= fp_json_set(o, "peers", peers);
	for (uint32_t j = 0; j < n->n_peers && !err; j++) {
		const struct msg_peer *p = &n->peers[j];
		struct json_object *q = json_object_new_object();

		err |= fp_json_push(peers, q);
		if (err)
			break;
		err |= fp_json_set_u64(q, "node", p->node);
		err |= fp_json_set_str(q, "transport", p->transport);
		err |= fp_json_set_u64(q, "reads", p->reads);
		err |= fp_json_set_u64(q, "bytes", p->bytes);
		err |= fp_json_set_u64(q, "errors", p->errors);
		err |= fp_json_set_u64(q, "posted", p->posted);
		err |= fp_json_set_u64(q, "writes", p->writes);
		err |= fp_json_set_u64(q, "wbytes", p->wbytes);
		err |= fp_json_set_u64(q, "werrors", p->werrors);
	}
	if (err) {
		json_object_put(o);
		return NULL;
	}
	return o;
}

struct json_object *cli_json_region(const struct msg *r, uint32_t lost)
{
	struct json_object *o, *per, *owners, *writers, *readers;
	uint64_t *ids, *counts;
	uint32_t n_ids;
	int err = 0;

	if (cli_chunks_count(r->chunks, r->n_chunks, &ids, &counts, &n_ids))
		return NULL;
	o = json_object_new_object();
	if (!o)
		goto out;
	err |= fp_json_set_str(o, "name", r->name);
	err |= fp_json_set_u64(o, "size", r->size);
	err |= fp_json_set_u64(o, "chunk_size", r->chunk_size);
	err |= fp_json_set_u64(o, "epoch", r->epoch);
	per = json_object_new_object();
	err |= fp_json_set(o, "chunks_per_node", per);
	for (uint32_t j = 0; j < n_ids && !err; j++) {
		char id[24];

		snprintf(id, sizeof(id), "%llu", (unsigned long long)ids[j]);
		err |= fp_json_set_u64(per, id, counts[j]);
	}
	owners = json_object_new_array_ext((int)r->n_chunks);
	err |= fp_json_set(o, "owners", owners);
	for (uint32_t j = 0; j < r->n_chunks && !err; j++)
		err |= fp_json_push(owners,
				    json_object_new_uint64(r->chunks[j].node));
	writers = json_object_new_array_ext((int)r->n_writers);
	err |= fp_json_set(o, "writers", writers);
	for (uint32_t j = 0; j < r->n_writers && !err; j++)
		err |= fp_json_push(writers,
				    json_object_new_uint64(r->writers[j]));
	readers = json_object_new_array_ext((int)r->n_readers);
	err |= fp_json_set(o, "readers", readers);
	for (uint32_t j = 0; j < r->n_readers && !err; j++)
		err |= fp_json_push(readers,
				    json_object_new_uint64(r->readers[j]));
	err |= fp_json_set_u64(o, "lost_chunks", lost);
	if (r->replicas > 1) {
		uint32_t l, m, b;
		const char *h = cli_repl_health(r, &l, &m, &b);

		err |= fp_json_set_u64(o, "replicas", r->replicas);
		err |= fp_json_set_u64(o, "rgen", r->rgen);
		err |= fp_json_set_str(o, "health", h);
		err |= fp_json_set_u64(o, "replicas_missing", m);
		err |= fp_json_set_u64(o, "replicas_rebuilding", b);
		err |= fp_json_set_u64(o, "replicas_in_sync",
				       r->n_chunks - m - b);
		err |= fp_json_set_u64(o, "chunks_lost", l);
	}
	if (err) {
		json_object_put(o);
		o = NULL;
	}
out:
	free(ids);
	free(counts);
	return o;
}

struct json_object *cli_json_region_brief(const struct msg_region *r)
{
	struct json_object *o = json_object_new_object();
	uint64_t R = r->replicas ? r->replicas : 1;
	int err = 0;

	if (!o)
		return NULL;
	err |= fp_json_set_str(o, "name", r->name);
	err |= fp_json_set_u64(o, "size", r->size);
	err |= fp_json_set_u64(o, "chunk_size", r->chunk_size);
	err |= fp_json_set_u64(o, "chunks", cli_region_chunks(r));
	err |= fp_json_set_u64(o, "epoch", r->epoch);
	err |= fp_json_set_u64(o, "replicas", R);
	if (err) {
		json_object_put(o);
		return NULL;
	}
	return o;
}

const char *cli_rstate_name(const struct msg *r, uint32_t i, uint32_t *k)
{
	uint32_t R = (uint32_t)r->replicas;
	uint64_t s = MSG_RS_SYNC;

	while (*k < r->n_rstates &&
	       r->rstates[*k].chunk * R + r->rstates[*k].replica < i)
		(*k)++;
	if (*k < r->n_rstates &&
	    r->rstates[*k].chunk * R + r->rstates[*k].replica == i)
		s = r->rstates[*k].state;
	return s == MSG_RS_SYNC	     ? "in-sync"
	       : s == MSG_RS_MISSING ? "missing"
				     : "rebuilding";
}

int cli_json_region_records(struct json_object *o, const struct msg *r)
{
	uint32_t R = r->replicas > 1 ? (uint32_t)r->replicas : 1, k = 0;
	struct json_object *a = json_object_new_array_ext((int)r->n_chunks);
	int err = fp_json_set(o, "records", a);

	for (uint32_t i = 0; i < r->n_chunks && !err; i++) {
		struct json_object *q = json_object_new_object();

		err |= fp_json_push(a, q);
		if (err)
			break;
		err |= fp_json_set_u64(q, "chunk", i / R);
		err |= fp_json_set_u64(q, "offset", (i / R) * r->chunk_size);
		err |= fp_json_set_u64(q, "replica", i % R);
		err |= fp_json_set_u64(q, "node", r->chunks[i].node);
		err |= fp_json_set_u64(q, "pool_offset", r->chunks[i].off);
		if (R > 1)
			err |= fp_json_set_str(q, "state",
					       cli_rstate_name(r, i, &k));
	}
	return err;
}

int cli_json_out(const char *cmd, struct json_object *o)
{
	int ret;

	if (!o) {
		cli_err("%s: %s", cmd, strerror(ENOMEM));
		return CLI_EXIT_FAIL;
	}
	ret = fp_json_print(stdout, o);
	json_object_put(o);
	if (ret < 0) {
		cli_err("%s: writing the JSON: %s", cmd, strerror(-ret));
		return CLI_EXIT_FAIL;
	}
	return CLI_EXIT_OK;
}
