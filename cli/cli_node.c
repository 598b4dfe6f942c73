// SPDX-License-Identifier: MIT
/*
 * farpage node list|forget: the coordinator's node table, and removing a
 * node that is gone for good.
 */
#include "cli.h"
#include "fp_json.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static const char cli_node_usage[] =
	"usage: farpage node list [--json]\n"
	"       farpage node forget NAME\n"
	"\n"
	"'farpage node SUBCOMMAND --help' describes a subcommand. The\n"
	"node agent itself is farpage-node(8).\n";

static const char cli_node_list_usage[] =
	"usage: farpage node list [--json]\n"
	"\n"
	"Lists the coordinator's nodes: id, name, data address, pool size,\n"
	"state (up, DOWN, or gone: forgotten, its id never given again).\n"
	"\n"
	"  --json   print them as one JSON object (docs/cli.md)\n";

static const char cli_node_forget_usage[] =
	"usage: farpage node forget NAME\n"
	"\n"
	"Removes node NAME, gone for good, from the coordinator's tables: its\n"
	"endpoints, pair keys and pool reservations go, the other agents drop\n"
	"it at their next node list, and a new agent may join as NAME (a new\n"
	"node, with a new id). Refused while the node owns a chunk of a\n"
	"region or is one of a region's writers or readers (the regions are\n"
	"named), and while it is up: stop its agent and wait until the\n"
	"coordinator has it DOWN (no heartbeat for a lease). Needs the admin\n"
	"key.\n";

/* node list --json: {"nodes": [...], "gone": [...]} as in status. */
static int cli_node_list_json(const struct msg *rep)
{
	struct json_object *o = json_object_new_object(), *a, *g;
	int err = 0;

	if (!o)
		return cli_json_out("node list", NULL);
	a = json_object_new_array();
	err |= fp_json_set(o, "nodes", a);
	for (uint32_t i = 0; i < rep->n_nodes && !err; i++)
		err |= fp_json_push(a, cli_json_node(&rep->nodes[i], 0));
	g = json_object_new_array();
	err |= fp_json_set(o, "gone", g);
	for (uint32_t i = 0; i < rep->n_gone && !err; i++)
		err |= fp_json_push(g, cli_json_node(&rep->gone[i], 1));
	if (err) {
		json_object_put(o);
		o = NULL;
	}
	return cli_json_out("node list", o);
}

static int cli_node_list(const struct cli *c, int argc, char **argv)
{
	struct msg req, rep;
	char size[32];
	int ret, json = 0;

	ret = cli_help_json(cli_node_list_usage, "node list", argc, argv,
			    &json);
	if (ret >= 0)
		return ret;
	if (optind < argc)
		return cli_usage_err(cli_node_list_usage,
				     "node list: unexpected argument '%s'",
				     argv[optind]);
	msg_init(&req, MSG_T_NODE_LIST);
	if (cli_coord_call(c, "node list", &req, &rep, MSG_T_NODES) < 0) {
		msg_fini(&rep);
		return CLI_EXIT_FAIL;
	}
	if (json) {
		ret = cli_node_list_json(&rep);
		msg_fini(&rep);
		return ret;
	}
	printf("%4s  %-16s %-22s %-10s %s\n", "ID", "NAME", "DATA ADDRESS",
	       "POOL", "STATE");
	for (uint32_t i = 0; i < rep.n_nodes; i++) {
		const struct msg_node *n = &rep.nodes[i];

		printf("%4llu  %-16s %-22s %-10s %s\n",
		       (unsigned long long)n->id, n->name, n->data_addr,
		       cli_size_str(n->pool_size, size, sizeof(size)),
		       n->up ? "up" : "DOWN");
	}
	for (uint32_t i = 0; i < rep.n_gone; i++) {
		const struct msg_node *n = &rep.gone[i];

		printf("%4llu  %-16s %-22s %-10s %s\n",
		       (unsigned long long)n->id, n->name, n->data_addr,
		       cli_size_str(n->pool_size, size, sizeof(size)), "gone");
	}
	msg_fini(&rep);
	return CLI_EXIT_OK;
}

static int cli_node_forget(const struct cli *c, int argc, char **argv)
{
	char what[32 + MSG_NAME_MAX];
	struct msg req, rep;
	int ret;

	ret = cli_help_only(cli_node_forget_usage, "node forget", argc, argv);
	if (ret >= 0)
		return ret;
	if (argc - optind < 1)
		return cli_usage_err(cli_node_forget_usage,
				     "node forget: missing node name");
	if (argc - optind > 1)
		return cli_usage_err(cli_node_forget_usage,
				     "node forget: unexpected argument '%s'",
				     argv[optind + 1]);
	if (!msg_name_is_valid(argv[optind]))
		return cli_usage_err(cli_node_forget_usage,
				     "node forget: '%s' is not a node name "
				     "(1-63 of A-Z a-z 0-9 . _ -)",
				     argv[optind]);
	msg_init(&req, MSG_T_NODE_FORGET);
	msg_strset(req.name, sizeof(req.name), argv[optind]);
	snprintf(what, sizeof(what), "node forget %s", req.name);
	ret = cli_coord_call(c, what, &req, &rep, MSG_T_OK);
	msg_fini(&rep);
	if (ret < 0)
		return CLI_EXIT_FAIL;
	printf("node %s forgotten: its name is free for a new node\n",
	       req.name);
	return CLI_EXIT_OK;
}

int cli_node_run(const struct cli *c, int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*run)(const struct cli *c, int argc, char **argv);
	} subs[] = {
		{ "list", cli_node_list },
		{ "forget", cli_node_forget },
	};

	if (argc < 2)
		return cli_usage_err(cli_node_usage,
				     "node: missing subcommand");
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fputs(cli_node_usage, stdout);
		return CLI_EXIT_OK;
	}
	for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++)
		if (!strcmp(argv[1], subs[i].name))
			return subs[i].run(c, argc - 1, argv + 1);
	return cli_usage_err(cli_node_usage, "node: unknown subcommand '%s'",
			     argv[1]);
}
