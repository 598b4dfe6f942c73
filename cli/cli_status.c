// SPDX-License-Identifier: MIT
/*
 * farpage status: the coordinator's nodes (with the per-peer transport
 * figures of their last heartbeat) and regions (with their chunk maps), as
 * tables or as JSON.
 */
#include "cli.h"
#include "fp_json.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static const char cli_status_usage[] =
	"usage: farpage status [--json]\n"
	"\n"
	"Shows the coordinator's nodes (id, name, data address, pool size,\n"
	"up/DOWN/gone, lease left; per peer the transport and read counters "
	"of\n"
	"the node's last heartbeat) and regions (size, chunk size, epoch,\n"
	"chunks per owner node, the chunk -> owner map, writers, readers).\n"
	"\n"
	"  --json   print the same as one JSON object\n"
	"  --help   this text\n";

/* Everything status prints, fetched before anything is printed. */
struct cli_status {
	struct msg nodes;   /* MSG_T_NODES */
	struct msg regions; /* MSG_T_REGIONS */
	struct msg *maps;   /* MSG_T_REGION per entry of regions */
	uint32_t n_maps;
};

static void cli_status_fini(struct cli_status *st)
{
	for (uint32_t i = 0; i < st->n_maps; i++)
		msg_fini(&st->maps[i]);
	free(st->maps);
	msg_fini(&st->regions);
	msg_fini(&st->nodes);
}

static int cli_status_fetch(const struct cli *c, struct cli_status *st)
{
	struct msg req;
	char what[32 + MSG_NAME_MAX];
	int ret;

	memset(st, 0, sizeof(*st));
	msg_init(&req, MSG_T_NODE_LIST);
	ret = cli_coord_call(c, "status: node list", &req, &st->nodes,
			     MSG_T_NODES);
	if (ret < 0)
		return ret;
	msg_init(&req, MSG_T_REGION_LIST);
	ret = cli_coord_call(c, "status: region list", &req, &st->regions,
			     MSG_T_REGIONS);
	if (ret < 0)
		return ret;
	if (st->regions.n_regions) {
		st->maps = calloc(st->regions.n_regions, sizeof(*st->maps));
		if (!st->maps) {
			cli_err("status: %s", strerror(ENOMEM));
			return -ENOMEM;
		}
	}
	for (uint32_t i = 0; i < st->regions.n_regions; i++) {
		const char *name = st->regions.regions[i].name;

		msg_init(&req, MSG_T_REGION_GET);
		msg_strset(req.name, sizeof(req.name), name);
		req.want_repl = 1;
		snprintf(what, sizeof(what), "status: region %s", name);
		ret = cli_coord_call(c, what, &req, &st->maps[i], MSG_T_REGION);
		st->n_maps = i + 1;
		if (ret < 0)
			return ret;
	}
	return 0;
}

static void cli_status_lease_str(const struct msg_node *n, char *buf,
				 size_t len)
{
	if (!n->up)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%llu.%llus",
			 (unsigned long long)(n->lease_ms / 1000),
			 (unsigned long long)(n->lease_ms % 1000 / 100));
}

static void cli_status_text(const struct cli *c, const struct cli_status *st)
{
	const struct msg *nodes = &st->nodes;
	char size[32], chunk[32], lease[32];
	uint32_t lost;

	printf("coordinator %s\n\n", c->coordinator);
	printf("nodes (%u", nodes->n_nodes);
	if (nodes->n_gone)
		printf(", %u gone", nodes->n_gone);
	printf("):\n");
	if (nodes->n_nodes || nodes->n_gone)
		printf("  %4s  %-16s %-22s %-10s %-5s %s\n", "ID", "NAME",
		       "DATA ADDRESS", "POOL", "STATE", "LEASE");
	for (uint32_t i = 0; i < nodes->n_nodes; i++) {
		const struct msg_node *n = &nodes->nodes[i];

		cli_status_lease_str(n, lease, sizeof(lease));
		printf("  %4llu  %-16s %-22s %-10s %-5s %s\n",
		       (unsigned long long)n->id, n->name, n->data_addr,
		       cli_size_str(n->pool_size, size, sizeof(size)),
		       n->up ? "up" : "DOWN", lease);
		for (uint32_t j = 0; j < n->n_peers; j++) {
			const struct msg_peer *p = &n->peers[j];

			printf("        peer %-4llu %-6s reads %-10llu "
			       "bytes %-10s errors %-6llu posted %llu\n",
			       (unsigned long long)p->node, p->transport,
			       (unsigned long long)p->reads,
			       cli_size_str(p->bytes, size, sizeof(size)),
			       (unsigned long long)p->errors,
			       (unsigned long long)p->posted);
			if (p->writes || p->werrors)
				printf("        %-11s writes %-9llu bytes "
				       "%-10s "
				       "errors %llu\n",
				       "", (unsigned long long)p->writes,
				       cli_size_str(p->wbytes, size,
						    sizeof(size)),
				       (unsigned long long)p->werrors);
		}
	}

	for (uint32_t i = 0; i < nodes->n_gone; i++) {
		const struct msg_node *n = &nodes->gone[i];

		printf("  %4llu  %-16s %-22s %-10s %-5s %s\n",
		       (unsigned long long)n->id, n->name, n->data_addr,
		       cli_size_str(n->pool_size, size, sizeof(size)), "gone",
		       "-");
	}

	printf("\nregions (%u):\n", st->n_maps);
	if (st->n_maps)
		printf("  %-16s %-10s %-10s %7s %6s\n", "NAME", "SIZE", "CHUNK",
		       "CHUNKS", "EPOCH");
	for (uint32_t i = 0; i < st->n_maps; i++) {
		const struct msg *r = &st->maps[i];
		uint32_t R = r->replicas ? (uint32_t)r->replicas : 1;

		printf("  %-16s %-10s %-10s %7u %6llu\n", r->name,
		       cli_size_str(r->size, size, sizeof(size)),
		       cli_size_str(r->chunk_size, chunk, sizeof(chunk)),
		       r->n_chunks / R, (unsigned long long)r->epoch);
		if (R > 1) {
			uint32_t l, m, b;
			const char *h = cli_repl_health(r, &l, &m, &b);

			printf("      replicas: %u, health %s: %u missing, %u "
			       "rebuilding, %u of %u in sync, %u chunks "
			       "lost\n",
			       R, h, m, b, r->n_chunks - m - b, r->n_chunks, l);
		}
		cli_chunks_print(stdout, "      ", r->chunks, r->n_chunks);
		cli_writers_print(stdout, "      ", r, nodes);
		cli_readers_print(stdout, "      ", r, nodes);
		lost = cli_region_lost(&st->nodes, r);
		if (lost)
			printf("      LOST: %u chunks: their owner restarted "
			       "since; recreate the region\n",
			       lost);
	}
}

/* The JSON object of `status --json` (NULL: no memory). */
static struct json_object *cli_status_json_obj(const char *coordinator,
					       const struct cli_status *st)
{
	struct json_object *o = json_object_new_object(), *nodes, *regions;
	struct json_object *gone;
	int err = 0;

	if (!o)
		return NULL;
	err |= fp_json_set_str(o, "coordinator", coordinator);
	nodes = json_object_new_array();
	err |= fp_json_set(o, "nodes", nodes);
	for (uint32_t i = 0; i < st->nodes.n_nodes && !err; i++)
		err |= fp_json_push(nodes,
				    cli_json_node(&st->nodes.nodes[i], 0));

	regions = json_object_new_array();
	err |= fp_json_set(o, "regions", regions);
	for (uint32_t i = 0; i < st->n_maps && !err; i++)
		err |= fp_json_push(
			regions,
			cli_json_region(
				&st->maps[i],
				cli_region_lost(&st->nodes, &st->maps[i])));
	/* Forgotten nodes: their ids are never given again. */
	gone = json_object_new_array();
	err |= fp_json_set(o, "gone", gone);
	for (uint32_t i = 0; i < st->nodes.n_gone && !err; i++)
		err |= fp_json_push(gone, cli_json_node(&st->nodes.gone[i], 1));
	if (err) {
		json_object_put(o);
		return NULL;
	}
	return o;
}

/*
 * Prints @o as one JSON object in the layout scripts read line by line (a
 * line per node and per region, as in docs/cli.md); every value is printed
 * by json-c.
 */
static int cli_status_json_print(struct json_object *o)
{
	static const char *const lists[] = { "nodes", "regions", "gone" };
	const size_t n_lists = sizeof(lists) / sizeof(lists[0]);
	struct json_object *v;
	const char *t;

	if (!json_object_object_get_ex(o, "coordinator", &v))
		return -EINVAL;
	t = fp_json_text(v);
	if (!t)
		return -ENOMEM;
	printf("{\n  \"coordinator\": %s,\n", t);
	for (size_t l = 0; l < n_lists; l++) {
		size_t n;

		if (!json_object_object_get_ex(o, lists[l], &v))
			return -EINVAL;
		n = json_object_array_length(v);
		printf("  \"%s\": [\n", lists[l]);
		for (size_t i = 0; i < n; i++) {
			t = fp_json_text(json_object_array_get_idx(v, i));
			if (!t)
				return -ENOMEM;
			printf("    %s%s\n", t, i + 1 < n ? "," : "");
		}
		printf("  ]%s\n", l + 1 < n_lists ? "," : "");
	}
	printf("}\n");
	return fflush(stdout) || ferror(stdout) ? -EIO : 0;
}

static int cli_status_json(const struct cli *c, const struct cli_status *st)
{
	struct json_object *o = cli_status_json_obj(c->coordinator, st);
	int ret;

	if (!o) {
		cli_err("status: %s", strerror(ENOMEM));
		return -ENOMEM;
	}
	ret = cli_status_json_print(o);
	json_object_put(o);
	if (ret < 0)
		cli_err("status: writing the JSON: %s", strerror(-ret));
	return ret;
}

int cli_status_run(const struct cli *c, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct cli_status st;
	int json = 0, ret;

	while ((ret = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (ret) {
		case 'j':
			json = 1;
			break;
		case 'h':
			fputs(cli_status_usage, stdout);
			return CLI_EXIT_OK;
		default:
			return cli_getopt_err(cli_status_usage, "status", ret,
					      argv);
		}
	}
	if (optind < argc)
		return cli_usage_err(cli_status_usage,
				     "status: unexpected argument '%s'",
				     argv[optind]);

	ret = cli_status_fetch(c, &st);
	if (!ret) {
		if (json)
			ret = cli_status_json(c, &st);
		else
			cli_status_text(c, &st);
	}
	cli_status_fini(&st);
	return ret < 0 ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
