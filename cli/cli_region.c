// SPDX-License-Identifier: MIT
/*
 * farpage region create|list|show|delete|writers|readers|lease-break|rebuild:
 * region management through the coordinator.
 */
#include "cli.h"
#include "fp_json.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "evl.h"
#include "util.h"

#define CLI_CHUNK_SIZE_MIN (2u << 20) /* msg.h: MSG_F_CHUNK_SIZE */

static const char cli_region_usage[] =
	"usage: farpage region create NAME --size SIZE [--chunk-size SIZE]\n"
	"                             [--nodes ID,ID,... | --owners "
	"ID,ID,...]\n"
	"                             [--writers NODE,NODE,...] "
	"[--readers NODE,NODE,...]\n"
	"                             [--replicas N] [--coherent]\n"
	"       farpage region list\n"
	"       farpage region show NAME\n"
	"       farpage region delete NAME\n"
	"       farpage region writers NAME NODE,NODE,...|any\n"
	"       farpage region readers NAME NODE,NODE,...|any\n"
	"       farpage region lease-break NAME\n"
	"       farpage region rebuild NAME\n"
	"\n"
	"Sizes take K/M/G/T suffixes (powers of 1024), e.g. 64M, 1G.\n"
	"'farpage region SUBCOMMAND --help' describes a subcommand.\n";

static const char cli_region_create_usage[] =
	"usage: farpage region create NAME --size SIZE [--chunk-size SIZE]\n"
	"                             [--nodes ID,ID,... | --owners "
	"ID,ID,...]\n"
	"                             [--writers NODE,NODE,...] "
	"[--readers NODE,NODE,...]\n"
	"                             [--wait SECONDS] [--replicas N]\n"
	"                             [--coherent]\n"
	"\n"
	"Creates region NAME and prints its chunk map. The pool space of a\n"
	"deleted region comes back once its owner has cleared it (every node\n"
	"must first have seen the delete, so that no guest still mapping it\n"
	"reads another region's bytes): until then creating waits.\n"
	"\n"
	"  --size SIZE        region size in bytes (K/M/G/T suffixes)\n"
	"  --chunk-size SIZE  chunk size, a power of two >= 2M\n"
	"                     (default: the coordinator's)\n"
	"  --nodes LIST       interleave the chunks across these node ids\n"
	"                     (default: the coordinator's placement)\n"
	"  --owners LIST      owner node id of each chunk, in order\n"
	"  --writers LIST     the only nodes (names or ids, joined already)\n"
	"                     whose agents may map it writable (take its\n"
	"                     write lease); default: any node that may\n"
	"                     read it\n"
	"  --readers LIST     the only nodes (names or ids, joined already)\n"
	"                     whose agents may look it up and map it, besides\n"
	"                     the writers; default: any node\n"
	"  --replicas N       copies of every chunk, 1..3, on distinct nodes\n"
	"                     (distinct zones when enough nodes have one);\n"
	"                     default 1; not with --owners\n"
	"  --coherent         every node that may write it maps it writable\n"
	"                     at once, each page kept coherent by its owner\n"
	"                     (no write lease; one replica; docs/design.md,\n"
	"                     coherent/)\n"
	"  --wait SECONDS     how long to wait for space being cleared\n"
	"                     (default 15; 0: fail at once)\n"
	"  --help             this text\n";

static const char cli_region_rebuild_usage[] =
	"usage: farpage region rebuild NAME [--wait SECONDS]\n"
	"\n"
	"Starts rebuilding every missing replica of a replicated region now\n"
	"(the coordinator also does it on its own, a few copies per node at\n"
	"a time); 'farpage region show' and 'farpage status' show progress.\n"
	"\n"
	"  --wait SECONDS  then wait until every replica is in sync (exit 0),\n"
	"                  at most SECONDS (exit 1, saying what is left); a\n"
	"                  chunk with no replica in sync fails at once. On a\n"
	"                  terminal a progress line counts the replicas in\n"
	"                  sync (not with --quiet)\n";

static const char cli_region_list_usage[] =
	"usage: farpage region list [--json]\n"
	"\n"
	"Lists the regions: name, size, chunk size, chunks, epoch.\n"
	"\n"
	"  --json   print them as one JSON object (docs/cli.md)\n";

static const char cli_region_show_usage[] =
	"usage: farpage region show [--json] NAME\n"
	"\n"
	"Prints region NAME's writers and readers and its full chunk map: for\n"
	"every chunk its offset in the region, its owner node and its offset\n"
	"in that node's pool.\n"
	"\n"
	"  --json   print the same as one JSON object (docs/cli.md)\n";

static const char cli_region_delete_usage[] =
	"usage: farpage region delete NAME\n"
	"\n"
	"Deletes region NAME.\n";

static const char cli_region_writers_usage[] =
	"usage: farpage region writers NAME NODE,NODE,...|any\n"
	"\n"
	"Sets the nodes (names or ids, joined already) whose agents may map\n"
	"region NAME writable, or 'any' node. A mapping that holds the write\n"
	"lease on a node no longer allowed loses it at once (as with\n"
	"lease-break). Needs the admin key.\n";

static const char cli_region_readers_usage[] =
	"usage: farpage region readers NAME NODE,NODE,...|any\n"
	"\n"
	"Sets the nodes (names or ids, joined already) whose agents may look\n"
	"region NAME up, and so map it and get the grants to read its pages,\n"
	"besides its writers; or 'any' node. A node taken out keeps the\n"
	"grants it holds until they expire (the coordinator's\n"
	"--grant-ttl-ms); its agent's next lookup is refused. Needs the\n"
	"admin key.\n";

static const char cli_region_lease_break_usage[] =
	"usage: farpage region lease-break NAME\n"
	"\n"
	"Ends the write lease of region NAME at once: the mapping that\n"
	"held it can no longer write (its next flush fails, then every\n"
	"write to it is SIGBUS) and another can take it. Needs the admin\n"
	"key.\n";

/*
 * Checks the @n_args positional arguments left after the options (0, or 1
 * region name). Returns -1 to go on, or the exit code to return.
 */
static int cli_region_pos(const char *usage, const char *cmd, int argc,
			  char **argv, int n_args)
{
	if (argc - optind < n_args)
		return cli_usage_err(usage, "%s: missing region name", cmd);
	if (argc - optind > n_args)
		return cli_usage_err(usage, "%s: unexpected argument '%s'", cmd,
				     argv[optind + n_args]);
	if (n_args && !msg_name_is_valid(argv[optind]))
		return cli_usage_err(usage,
				     "%s: '%s' is not a region name "
				     "(1-63 of A-Z a-z 0-9 . _ -)",
				     cmd, argv[optind]);
	return -1;
}

/*
 * Parses a subcommand that takes only --help (and --json if @json is not
 * NULL) and @n_args positional arguments. Returns -1 to go on, or the exit
 * code to return.
 */
static int cli_region_args_json(const char *usage, const char *cmd, int argc,
				char **argv, int n_args, int *json)
{
	int ret = cli_help_json(usage, cmd, argc, argv, json);

	if (ret >= 0)
		return ret;
	return cli_region_pos(usage, cmd, argc, argv, n_args);
}

static int cli_region_args(const char *usage, const char *cmd, int argc,
			   char **argv, int n_args)
{
	return cli_region_args_json(usage, cmd, argc, argv, n_args, NULL);
}

/*
 * A subcommand of one region name that is one call of @type to the
 * coordinator, answered OK: parses it (cli_region_args()), asks, and
 * leaves the name in @req->name and the answer in *@rep (the caller
 * msg_fini()s it). Returns -1 to go on, or the exit code to return.
 */
static int cli_region_name_call(const struct cli *c, const char *usage,
				const char *cmd, int argc, char **argv,
				enum msg_type type, struct msg *req,
				struct msg *rep)
{
	char what[32 + MSG_NAME_MAX];
	int ret = cli_region_args(usage, cmd, argc, argv, 1);

	if (ret >= 0)
		return ret;
	msg_init(req, type);
	msg_strset(req->name, sizeof(req->name), argv[optind]);
	snprintf(what, sizeof(what), "%s %s", cmd, req->name);
	if (cli_coord_call(c, what, req, rep, MSG_T_OK) < 0) {
		msg_fini(rep);
		return CLI_EXIT_FAIL;
	}
	return -1;
}

static void cli_region_summary(const struct msg *r)
{
	char size[32], chunk[32];
	uint32_t R = r->replicas ? (uint32_t)r->replicas : 1;

	printf("region %s: %s in %u chunks of %s, epoch %llu%s\n", r->name,
	       cli_size_str(r->size, size, sizeof(size)), r->n_chunks / R,
	       cli_size_str(r->chunk_size, chunk, sizeof(chunk)),
	       (unsigned long long)r->epoch,
	       r->rflags & MSG_REGION_COHERENT ? ", coherent" : "");
	if (R > 1) {
		uint32_t lost, missing, rebuilding;
		const char *h =
			cli_repl_health(r, &lost, &missing, &rebuilding);

		printf("  replicas: %u (rgen %llu), health %s: %u missing, "
		       "%u rebuilding, %u chunks lost\n",
		       R, (unsigned long long)r->rgen, h, missing, rebuilding,
		       lost);
		return; /* the per-owner summary mixes replicas: see show */
	}
	cli_chunks_print(stdout, "  ", r->chunks, r->n_chunks);
}

/* Prints "<indent><label>: a (1), b (2)", or "any node" if @n is 0. */
static void cli_ids_print(FILE *f, const char *indent, const char *label,
			  const uint64_t *ids, uint32_t n,
			  const struct msg *nodes)
{
	fprintf(f, "%s%s: ", indent, label);
	if (!n)
		fprintf(f, "any node");
	for (uint32_t i = 0; i < n; i++) {
		const char *name = NULL;

		for (uint32_t j = 0; nodes && j < nodes->n_nodes; j++)
			if (nodes->nodes[j].id == ids[i])
				name = nodes->nodes[j].name;
		if (name)
			fprintf(f, "%s%s (%llu)", i ? ", " : "", name,
				(unsigned long long)ids[i]);
		else
			fprintf(f, "%s%llu", i ? ", " : "",
				(unsigned long long)ids[i]);
	}
	fputc('\n', f);
}

void cli_writers_print(FILE *f, const char *indent, const struct msg *r,
		       const struct msg *nodes)
{
	cli_ids_print(f, indent, "writers", r->writers, r->n_writers, nodes);
}

void cli_readers_print(FILE *f, const char *indent, const struct msg *r,
		       const struct msg *nodes)
{
	cli_ids_print(f, indent, "readers", r->readers, r->n_readers, nodes);
}

/* The node table, for names; on failure the node list is empty. */
static void cli_region_nodes(const struct cli *c, const char *what,
			     struct msg *nodes)
{
	struct msg req;

	msg_init(&req, MSG_T_NODE_LIST);
	if (cli_coord_call(c, what, &req, nodes, MSG_T_NODES) < 0) {
		msg_fini(nodes);
		msg_init(nodes, MSG_T_NODES);
	}
}

/*
 * Prints region @r's writers (@readers 0) or readers line, with the
 * nodes' names if it names any (the node table asked for them).
 */
static void cli_region_acl_print(const struct cli *c, const char *what,
				 const char *indent, const struct msg *r,
				 int readers)
{
	struct msg nodes;

	msg_init(&nodes, MSG_T_NONE);
	if (readers ? r->n_readers : r->n_writers)
		cli_region_nodes(c, what, &nodes);
	if (readers)
		cli_readers_print(stdout, indent, r, &nodes);
	else
		cli_writers_print(stdout, indent, r, &nodes);
	msg_fini(&nodes);
}

/*
 * Parses node list @arg (--writers, --readers): node ids, or names of
 * nodes in the node table (asked of the coordinator if a name is given).
 * Returns 0 with the ids, -EINVAL (usage, said) or another -errno (said).
 */
static int cli_nodes_parse(const struct cli *c, const char *usage,
			   const char *opt, const char *arg, uint64_t **out,
			   uint32_t *n_out)
{
	struct msg nodes;
	uint64_t *ids;
	char *copy, *tok, *save;
	uint32_t cnt = 1, n = 0;
	int ret = 0, have_nodes = 0;

	msg_init(&nodes, MSG_T_NONE);
	for (const char *p = arg; *p; p++)
		cnt += *p == ',';
	ids = calloc(cnt, sizeof(*ids));
	copy = strdup(arg);
	if (!ids || !copy) {
		cli_err("%s: %s", opt, strerror(ENOMEM));
		ret = -ENOMEM;
		goto out;
	}
	for (tok = strtok_r(copy, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		uint64_t id = 0;

		if (tok[0] >= '0' && tok[0] <= '9') {
			if (util_u64_parse(tok, &id) < 0 || !id ||
			    id > UINT32_MAX) {
				cli_usage_err(usage,
					      "%s: '%s' is not a node id", opt,
					      tok);
				ret = -EINVAL;
				goto out;
			}
			ids[n++] = id;
			continue;
		}
		if (!msg_name_is_valid(tok)) {
			cli_usage_err(usage, "%s: '%s' is not a node name", opt,
				      tok);
			ret = -EINVAL;
			goto out;
		}
		if (!have_nodes) {
			struct msg req;

			msg_init(&req, MSG_T_NODE_LIST);
			ret = cli_coord_call(c, opt, &req, &nodes, MSG_T_NODES);
			if (ret < 0)
				goto out;
			have_nodes = 1;
		}
		for (uint32_t j = 0; j < nodes.n_nodes; j++)
			if (!strcmp(nodes.nodes[j].name, tok))
				id = nodes.nodes[j].id;
		if (!id) {
			cli_err("%s: no node named '%s' has joined", opt, tok);
			ret = -ENOENT;
			goto out;
		}
		ids[n++] = id;
	}
	if (!n) {
		cli_usage_err(usage, "%s: empty list of nodes", opt);
		ret = -EINVAL;
		goto out;
	}
	*out = ids;
	*n_out = n;
	ids = NULL;
out:
	msg_fini(&nodes);
	free(copy);
	free(ids);
	return ret;
}

int cli_region_get(const struct cli *c, const char *what, const char *name,
		   struct msg *rep)
{
	struct msg req;

	msg_init(&req, MSG_T_REGION_GET);
	msg_strset(req.name, sizeof(req.name), name);
	req.want_repl = 1;
	return cli_coord_call(c, what, &req, rep, MSG_T_REGION);
}

/*
 * One option of "region create" (@key as getopt_long() gave it) into @req
 * or *@wait_s. Returns -1 to go on, or the exit code after saying what is
 * wrong.
 */
static int cli_region_create_opt(const struct cli *c, const char *usage,
				 int key, const char *arg, struct msg *req,
				 uint64_t *wait_s)
{
	int ret, code = CLI_EXIT_USAGE;

	switch (key) {
	case 's':
		if (cli_opt_size(usage, "--size", arg, &req->size))
			return code;
		if (!req->size) {
			cli_usage_err(usage, "--size must not be 0");
			return code;
		}
		return -1;
	case 'c':
		if (cli_opt_size(usage, "--chunk-size", arg, &req->chunk_size))
			return code;
		if (req->chunk_size < CLI_CHUNK_SIZE_MIN ||
		    (req->chunk_size & (req->chunk_size - 1))) {
			cli_usage_err(usage,
				      "--chunk-size: %s is not a power "
				      "of two >= 2 MiB",
				      arg);
			return code;
		}
		return -1;
	case 'n':
		free(req->place);
		req->place = NULL;
		ret = cli_opt_ids(usage, "--nodes", arg, &req->place,
				  &req->n_place);
		if (ret < 0) {
			code = ret == -EINVAL ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
			return code;
		}
		return -1;
	case 'o':
		free(req->owners);
		req->owners = NULL;
		ret = cli_opt_ids(usage, "--owners", arg, &req->owners,
				  &req->n_owners);
		if (ret < 0) {
			code = ret == -EINVAL ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
			return code;
		}
		return -1;
	case 'W':
		free(req->writers);
		req->writers = NULL;
		ret = cli_nodes_parse(c, usage, "--writers", arg, &req->writers,
				      &req->n_writers);
		if (ret < 0) {
			code = ret == -EINVAL ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
			return code;
		}
		return -1;
	case 'r':
		free(req->readers);
		req->readers = NULL;
		ret = cli_nodes_parse(c, usage, "--readers", arg, &req->readers,
				      &req->n_readers);
		if (ret < 0) {
			code = ret == -EINVAL ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
			return code;
		}
		return -1;
	case 'R':
		if (cli_opt_u64(usage, "--replicas", arg, &req->replicas))
			return code;
		if (req->replicas < 1 || req->replicas > MSG_REPLICAS_MAX) {
			cli_usage_err(usage, "--replicas: 1 to %u",
				      MSG_REPLICAS_MAX);
			return code;
		}
		return -1;
	case 'C':
		req->rflags |= MSG_REGION_COHERENT;
		return -1;
	case 'w':
		if (cli_opt_u64(usage, "--wait", arg, wait_s))
			return code;
		if (*wait_s > 3600) {
			cli_usage_err(usage, "--wait: at most 3600");
			return code;
		}
		return -1;
	}
	return -1;
}

/* What "region create" refuses of its options together. Returns -1 to go
 * on, or CLI_EXIT_USAGE after saying what is wrong. */
static int cli_region_create_check(const char *usage, const struct msg *req)
{
	if (!req->size) {
		cli_usage_err(usage, "region create: --size is required");
		return CLI_EXIT_USAGE;
	}
	if (req->n_place && req->n_owners) {
		cli_usage_err(usage, "region create: give --nodes or --owners, "
				     "not both");
		return CLI_EXIT_USAGE;
	}
	if (req->replicas > 1 && req->n_owners) {
		cli_usage_err(usage, "region create: --owners places one "
				     "replica; not with --replicas");
		return CLI_EXIT_USAGE;
	}
	return -1;
}

static int cli_region_create(const struct cli *c, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "size", required_argument, NULL, 's' },
		{ "chunk-size", required_argument, NULL, 'c' },
		{ "nodes", required_argument, NULL, 'n' },
		{ "owners", required_argument, NULL, 'o' },
		{ "writers", required_argument, NULL, 'W' },
		{ "readers", required_argument, NULL, 'r' },
		{ "wait", required_argument, NULL, 'w' },
		{ "replicas", required_argument, NULL, 'R' },
		{ "coherent", no_argument, NULL, 'C' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *usage = cli_region_create_usage;
	uint64_t wait_s = 15;
	char what[32 + MSG_NAME_MAX];
	struct msg req, rep;
	int ret, code = CLI_EXIT_USAGE;

	msg_init(&req, MSG_T_REGION_CREATE);
	msg_init(&rep, MSG_T_NONE);
	while ((ret = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (ret == 'h') {
			fputs(usage, stdout);
			code = CLI_EXIT_OK;
			goto out;
		}
		if (ret == ':' || ret == '?') {
			cli_getopt_err(usage, "region create", ret, argv);
			goto out;
		}
		code = cli_region_create_opt(c, usage, ret, optarg, &req,
					     &wait_s);
		if (code >= 0)
			goto out;
		code = CLI_EXIT_USAGE;
	}
	ret = cli_region_pos(usage, "region create", argc, argv, 1);
	if (ret >= 0) {
		code = ret;
		goto out;
	}
	code = cli_region_create_check(usage, &req);
	if (code >= 0)
		goto out;
	if (req.replicas == 1)
		req.replicas = 0; /* the default: nothing new on the wire */
	msg_strset(req.name, sizeof(req.name), argv[optind]);

	code = CLI_EXIT_FAIL;
	snprintf(what, sizeof(what), "region create %s", req.name);
	if (cli_coord_call_wait(c, what, &req, &rep, MSG_T_NONE,
				(unsigned int)wait_s * 1000) < 0)
		goto out;
	if (rep.type != MSG_T_REGION) {
		/* Acknowledged without the map: fetch it. */
		msg_fini(&rep);
		if (cli_region_get(c, what, req.name, &rep) < 0)
			goto out;
	}
	printf("created ");
	cli_region_summary(&rep);
	cli_writers_print(stdout, "  ", &rep, NULL);
	cli_readers_print(stdout, "  ", &rep, NULL);
	code = CLI_EXIT_OK;
out:
	msg_fini(&rep);
	msg_fini(&req);
	return code;
}

/* region list --json: {"regions": [ brief, ... ]}. */
static int cli_region_list_json(const struct msg *rep)
{
	struct json_object *o = json_object_new_object(), *a;
	int err;

	if (!o)
		return cli_json_out("region list", NULL);
	a = json_object_new_array_ext((int)rep->n_regions);
	err = fp_json_set(o, "regions", a);
	for (uint32_t i = 0; i < rep->n_regions && !err; i++)
		err |= fp_json_push(a, cli_json_region_brief(&rep->regions[i]));
	if (err) {
		json_object_put(o);
		o = NULL;
	}
	return cli_json_out("region list", o);
}

static int cli_region_list(const struct cli *c, int argc, char **argv)
{
	char size[32], chunk[32];
	struct msg req, rep;
	int ret, json = 0;

	ret = cli_region_args_json(cli_region_list_usage, "region list", argc,
				   argv, 0, &json);
	if (ret >= 0)
		return ret;
	msg_init(&req, MSG_T_REGION_LIST);
	if (cli_coord_call(c, "region list", &req, &rep, MSG_T_REGIONS) < 0) {
		msg_fini(&rep);
		return CLI_EXIT_FAIL;
	}
	if (json) {
		ret = cli_region_list_json(&rep);
		msg_fini(&rep);
		return ret;
	}
	if (!rep.n_regions)
		printf("no regions\n");
	else
		printf("%-16s %-10s %-10s %7s %6s\n", "NAME", "SIZE", "CHUNK",
		       "CHUNKS", "EPOCH");
	for (uint32_t i = 0; i < rep.n_regions; i++) {
		const struct msg_region *r = &rep.regions[i];

		printf("%-16s %-10s %-10s %7llu %6llu\n", r->name,
		       cli_size_str(r->size, size, sizeof(size)),
		       cli_size_str(r->chunk_size, chunk, sizeof(chunk)),
		       (unsigned long long)cli_region_chunks(r),
		       (unsigned long long)r->epoch);
	}
	msg_fini(&rep);
	return CLI_EXIT_OK;
}

/* region show --json: the region's object as in status, with its
 * records. */
static int cli_region_show_json(const struct cli *c, const char *what,
				const struct msg *r)
{
	struct json_object *o;
	struct msg req, nodes;

	msg_init(&req, MSG_T_NODE_LIST);
	if (cli_coord_call(c, what, &req, &nodes, MSG_T_NODES) < 0) {
		msg_fini(&nodes);
		return CLI_EXIT_FAIL;
	}
	o = cli_json_region(r, cli_region_lost(&nodes, r));
	msg_fini(&nodes);
	if (o && cli_json_region_records(o, r)) {
		json_object_put(o);
		o = NULL;
	}
	return cli_json_out(what, o);
}

static int cli_region_show(const struct cli *c, int argc, char **argv)
{
	char what[32 + MSG_NAME_MAX];
	struct msg rep;
	int ret, json = 0;

	ret = cli_region_args_json(cli_region_show_usage, "region show", argc,
				   argv, 1, &json);
	if (ret >= 0)
		return ret;
	snprintf(what, sizeof(what), "region show %s", argv[optind]);
	if (cli_region_get(c, what, argv[optind], &rep) < 0) {
		msg_fini(&rep);
		return CLI_EXIT_FAIL;
	}
	if (json) {
		ret = cli_region_show_json(c, what, &rep);
		msg_fini(&rep);
		return ret;
	}
	cli_region_summary(&rep);
	cli_region_acl_print(c, what, "  ", &rep, 0);
	cli_region_acl_print(c, what, "  ", &rep, 1);
	if (rep.replicas > 1) {
		uint32_t R = (uint32_t)rep.replicas, k = 0;

		printf("\n%7s  %-18s %7s %6s  %-18s %s\n", "CHUNK",
		       "REGION OFFSET", "REPLICA", "NODE", "POOL OFFSET",
		       "STATE");
		for (uint32_t i = 0; i < rep.n_chunks; i++)
			printf("%7u  0x%-16llx %7u %6llu  0x%-16llx %s\n",
			       i / R,
			       (unsigned long long)((i / R) * rep.chunk_size),
			       i % R, (unsigned long long)rep.chunks[i].node,
			       (unsigned long long)rep.chunks[i].off,
			       cli_rstate_name(&rep, i, &k));
		msg_fini(&rep);
		return CLI_EXIT_OK;
	}
	printf("\n%7s  %-18s %6s  %s\n", "CHUNK", "REGION OFFSET", "OWNER",
	       "POOL OFFSET");
	for (uint32_t i = 0; i < rep.n_chunks; i++)
		printf("%7u  0x%-16llx %6llu  0x%llx\n", i,
		       (unsigned long long)(i * rep.chunk_size),
		       (unsigned long long)rep.chunks[i].node,
		       (unsigned long long)rep.chunks[i].off);
	msg_fini(&rep);
	return CLI_EXIT_OK;
}

static int cli_region_delete(const struct cli *c, int argc, char **argv)
{
	struct msg req, rep;
	int ret;

	ret = cli_region_name_call(c, cli_region_delete_usage, "region delete",
				   argc, argv, MSG_T_REGION_DELETE, &req, &rep);
	if (ret >= 0)
		return ret;
	msg_fini(&rep);
	printf("deleted region %s\n", req.name);
	return CLI_EXIT_OK;
}

/* region writers|readers NAME NODE,...|any (@readers 0|1). */
static int cli_region_acl(const struct cli *c, int argc, char **argv,
			  int readers)
{
	const char *usage =
		readers ? cli_region_readers_usage : cli_region_writers_usage;
	const char *cmd = readers ? "region readers" : "region writers";
	char what[32 + MSG_NAME_MAX];
	struct msg req, rep;
	int ret, code;

	ret = cli_help_only(usage, cmd, argc, argv);
	if (ret >= 0)
		return ret;
	if (argc - optind < 2)
		return cli_usage_err(
			usage, "%s: want NAME and NODE,NODE,... or 'any'", cmd);
	if (argc - optind > 2)
		return cli_usage_err(usage, "%s: unexpected argument '%s'", cmd,
				     argv[optind + 2]);
	if (!msg_name_is_valid(argv[optind]))
		return cli_usage_err(usage,
				     "%s: '%s' is not a region name (1-63 of "
				     "A-Z a-z 0-9 . _ -)",
				     cmd, argv[optind]);
	msg_init(&req, readers ? MSG_T_REGION_READERS : MSG_T_REGION_WRITERS);
	msg_init(&rep, MSG_T_NONE);
	msg_strset(req.name, sizeof(req.name), argv[optind]);
	snprintf(what, sizeof(what), "%s %s", cmd, req.name);
	if (strcmp(argv[optind + 1], "any")) {
		if (readers)
			ret = cli_nodes_parse(c, usage, what, argv[optind + 1],
					      &req.readers, &req.n_readers);
		else
			ret = cli_nodes_parse(c, usage, what, argv[optind + 1],
					      &req.writers, &req.n_writers);
		if (ret < 0) {
			code = ret == -EINVAL ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
			goto out;
		}
	}
	code = CLI_EXIT_FAIL;
	if (cli_coord_call(c, what, &req, &rep, MSG_T_OK) < 0)
		goto out;
	msg_fini(&rep);
	if (cli_region_get(c, what, req.name, &rep) < 0)
		goto out;
	printf("region %s: ", req.name);
	cli_region_acl_print(c, what, "", &rep, readers);
	code = CLI_EXIT_OK;
out:
	msg_fini(&rep);
	msg_fini(&req);
	return code;
}

static int cli_region_writers(const struct cli *c, int argc, char **argv)
{
	return cli_region_acl(c, argc, argv, 0);
}

static int cli_region_readers(const struct cli *c, int argc, char **argv)
{
	return cli_region_acl(c, argc, argv, 1);
}

static int cli_region_lease_break(const struct cli *c, int argc, char **argv)
{
	struct msg req, rep;
	int ret;

	ret = cli_region_name_call(c, cli_region_lease_break_usage,
				   "region lease-break", argc, argv,
				   MSG_T_LEASE_BREAK, &req, &rep);
	if (ret >= 0)
		return ret;
	if (rep.wgen)
		printf("region %s: write lease broken (generation now %llu)\n",
		       req.name, (unsigned long long)rep.wgen);
	else
		printf("region %s: no write lease was held\n", req.name);
	msg_fini(&rep);
	return CLI_EXIT_OK;
}

/*
 * region rebuild --wait: polls the region until every replica is in sync
 * (0), for at most @wait_s seconds; a progress line on a terminal.
 */
static int cli_region_rebuild_wait(const struct cli *c, const char *name,
				   uint64_t wait_s)
{
	uint64_t end = evl_now_ms() + wait_s * 1000;
	char what[32 + MSG_NAME_MAX];
	uint32_t lost = 0, missing = 0, rb = 0;
	struct cli_progress pr = { 0 };
	struct msg rep;

	snprintf(what, sizeof(what), "rebuild %s", name);
	for (;;) {
		if (cli_region_get(c, what, name, &rep) < 0) {
			msg_fini(&rep);
			cli_progress_end(&pr);
			return CLI_EXIT_FAIL;
		}
		cli_repl_health(&rep, &lost, &missing, &rb);
		if (!pr.what)
			cli_progress_start_unit(&pr, c, what, rep.n_chunks,
						"replicas in sync",
						rep.chunk_size);
		cli_progress_set(&pr, rep.n_chunks - missing - rb);
		msg_fini(&rep);
		if (lost || (!missing && !rb) || evl_now_ms() >= end)
			break;
		usleep(500 * 1000);
	}
	cli_progress_end(&pr);
	if (lost) {
		cli_err("%s: %u chunks have no replica in sync: nothing to "
			"rebuild them from",
			what, lost);
		return CLI_EXIT_FAIL;
	}
	if (missing || rb) {
		cli_err("%s: after %llu s, %u replicas still missing and %u "
			"rebuilding",
			what, (unsigned long long)wait_s, missing, rb);
		return CLI_EXIT_FAIL;
	}
	printf("region %s: every replica in sync\n", name);
	return CLI_EXIT_OK;
}

static int cli_region_rebuild(const struct cli *c, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "wait", required_argument, NULL, 'w' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *usage = cli_region_rebuild_usage;
	char what[32 + MSG_NAME_MAX];
	uint64_t wait_s = 0;
	struct msg req, rep;
	int ret, wait = 0;

	while ((ret = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (ret == 'h') {
			fputs(usage, stdout);
			return CLI_EXIT_OK;
		}
		if (ret != 'w')
			return cli_getopt_err(usage, "region rebuild", ret,
					      argv);
		if (cli_opt_u64(usage, "--wait", optarg, &wait_s))
			return CLI_EXIT_USAGE;
		wait = 1;
	}
	ret = cli_region_pos(usage, "region rebuild", argc, argv, 1);
	if (ret >= 0)
		return ret;
	msg_init(&req, MSG_T_REGION_REBUILD);
	msg_strset(req.name, sizeof(req.name), argv[optind]);
	snprintf(what, sizeof(what), "region rebuild %s", req.name);
	if (cli_coord_call(c, what, &req, &rep, MSG_T_OK) < 0) {
		msg_fini(&rep);
		return CLI_EXIT_FAIL;
	}
	msg_fini(&rep);
	printf("region %s: rebuilding its missing replicas\n", req.name);
	return wait ? cli_region_rebuild_wait(c, req.name, wait_s)
		    : CLI_EXIT_OK;
}

int cli_region_run(const struct cli *c, int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*run)(const struct cli *c, int argc, char **argv);
	} subs[] = {
		{ "create", cli_region_create },
		{ "list", cli_region_list },
		{ "show", cli_region_show },
		{ "delete", cli_region_delete },
		{ "writers", cli_region_writers },
		{ "readers", cli_region_readers },
		{ "lease-break", cli_region_lease_break },
		{ "rebuild", cli_region_rebuild },
	};

	if (argc < 2)
		return cli_usage_err(cli_region_usage,
				     "region: missing subcommand");
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fputs(cli_region_usage, stdout);
		return CLI_EXIT_OK;
	}
	for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++)
		if (!strcmp(argv[1], subs[i].name))
			return subs[i].run(c, argc - 1, argv + 1);
	return cli_usage_err(cli_region_usage,
			     "region: unknown subcommand '%s'", argv[1]);
}
