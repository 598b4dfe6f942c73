// SPDX-License-Identifier: MIT
/*
 * farpage: the command-line tool. Parses the global options, resolves their
 * defaults from the environment and runs one command (cli_<command>.c).
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stddef.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "addrlist.h"
#include "farpage.h"
#include "opts.h"
#include "util.h"

struct cli_cmd {
	const char *name;
	int (*run)(const struct cli *c, int argc, char **argv);
	const char *summary;
};

static const struct cli_cmd cli_cmds[] = {
	{ "status", cli_status_run,
	  "nodes, peers and regions as the coordinator sees them" },
	{ "region", cli_region_run, "create, list, show or delete regions" },
	{ "node", cli_node_run,
	  "list nodes, forget one that is gone for good" },
	{ "fill", cli_fill_run,
	  "write the test pattern into the chunks this node owns" },
	{ "touch", cli_touch_run,
	  "fault a region's pages in, time them, verify the pattern" },
	{ "stats", cli_stats_run, "the local agent's counters" },
	{ "flush", cli_flush_run,
	  "send home the pages a region's mappings here have written" },
	{ "handover", cli_handover_run,
	  "hand a movable mapping's write lease to another host" },
	{ "vm", cli_vm_run, "run QEMU with its guest RAM in a region" },
	{ "run", cli_run_run,
	  "run a program with its anonymous memory in a region" },
	{ "migrate", cli_migrate_run,
	  "move a farpage vm to another host, its RAM staying in place" },
	{ "keygen", cli_keygen_run,
	  "make a cluster key, or derive an admin or node key from it" },
};

#define CLI_N_CMDS (sizeof(cli_cmds) / sizeof(cli_cmds[0]))

static const struct opts_spec cli_spec;

static void cli_usage_print(FILE *f)
{
	fprintf(f, "Usage: farpage [GLOBAL OPTIONS] COMMAND [ARGS]\n"
		   "\n"
		   "commands:\n");
	for (size_t i = 0; i < CLI_N_CMDS; i++)
		fprintf(f, "  %-8s %s\n", cli_cmds[i].name,
			cli_cmds[i].summary);
	fprintf(f, "\nglobal options (before the command):\n");
	opts_usage_opts(&cli_spec, f);
	fprintf(f, "\n'farpage COMMAND --help' describes a command.\n");
}

static int cli_set_help(const struct opts_opt *o, void *ctx, const char *arg)
{
	cli_usage_print(stdout);
	return OPTS_EXIT_OK;
}

static int cli_set_timeout(const struct opts_opt *o, void *ctx, const char *arg)
{
	struct cli *c = ctx;
	uint64_t v;

	if (util_u64_parse(arg, &v) < 0 || !v || v > INT32_MAX) {
		cli_err("--timeout-ms: '%s' is not a positive number of "
			"milliseconds",
			arg);
		return CLI_EXIT_USAGE;
	}
	c->timeout_ms = (int)v;
	return 0;
}

_Static_assert(CLI_TIMEOUT_MS_DEFAULT == 5000, "--timeout-ms help");

#define CLI_OFF(m) offsetof(struct cli, m)

/* The global options, before the command. */
static const struct opts_opt cli_opts[] = {
	{ "coordinator", 0, "ADDR[,ADDR...]",
	  "coordinator control address (default $" CLI_COORDINATOR_ENV
	  " or " CLI_COORDINATOR_DEFAULT "); a list of up to 8, "
	  "comma-separated, when several coordinators serve the cluster: a "
	  "call goes to the next when one cannot be reached or is not the "
	  "leader",
	  OPTS_K_STR, NULL, CLI_OFF(coordinator), 0, 0 },
	{ "agent-sock", 0, "PATH",
	  "local agent's socket (default $" FARPAGE_AGENT_SOCK_ENV
	  " or " FARPAGE_AGENT_SOCK_DEFAULT ")",
	  OPTS_K_STR, NULL, CLI_OFF(agent_sock), 0, 0 },
	{ "timeout-ms", 0, "N", "timeout of each control call (default 5000)",
	  OPTS_K_FN, cli_set_timeout, 0, 0, 0 },
	{ "key-file", 0, "FILE",
	  "the admin key, or the cluster key (default $FARPAGE_KEY_FILE, else "
	  "/etc/farpage/admin.key, else /etc/farpage/cluster.key)",
	  OPTS_K_STR, NULL, CLI_OFF(key_file), 0, 0 },
	{ "insecure", 0, NULL, "the cluster runs without authentication",
	  OPTS_K_TRUE, NULL, CLI_OFF(insecure), 0, 0 },
	{ "quiet", 'q', NULL,
	  "no progress lines (they are drawn only on a terminal anyway)",
	  OPTS_K_TRUE, NULL, CLI_OFF(quiet), 0, 0 },
	{ "help", 'h', NULL, "this text", OPTS_K_FN, cli_set_help, 0, 0, 0 },
	{ "version", 'V', NULL, "print the version", OPTS_K_VERSION, NULL, 0, 0,
	  0 },
};

static const struct opts_spec cli_spec = {
	.prog = "farpage",
	.version = FARPAGE_VERSION,
	.opts = cli_opts,
	.n = sizeof(cli_opts) / sizeof(cli_opts[0]),
	.usage_status = CLI_EXIT_USAGE,
	/* the command's options are its own */
	.stop_at_operand = true,
};

static const char *cli_env_or(const char *name, const char *def)
{
	const char *v = getenv(name);

	return v && *v ? v : def;
}

int main(int argc, char **argv)
{
	struct cli c = {
		.coordinator = cli_env_or(CLI_COORDINATOR_ENV,
					  CLI_COORDINATOR_DEFAULT),
		.agent_sock = cli_env_or(FARPAGE_AGENT_SOCK_ENV,
					 FARPAGE_AGENT_SOCK_DEFAULT),
		.timeout_ms = CLI_TIMEOUT_MS_DEFAULT,
	};
	struct cli_coords coords = { 0 };
	int ret, cmd;

	/* A coordinator that hangs up must give an error, not kill us. */
	signal(SIGPIPE, SIG_IGN);

	ret = opts_parse(&cli_spec, argc, argv, &c);
	if (ret != OPTS_GO_ON)
		return ret;
	/* A command that does not call the coordinator does not care. */
	coords.err = addrlist_parse(c.coordinator, "7700", &coords.l,
				    coords.why, sizeof(coords.why));
	c.coords = &coords;
	if (optind >= argc) {
		cli_err("no command given");
		fprintf(stderr, "Try 'farpage --help'.\n");
		return CLI_EXIT_USAGE;
	}
	cmd = optind;
	for (size_t i = 0; i < CLI_N_CMDS; i++) {
		if (!strcmp(argv[cmd], cli_cmds[i].name)) {
			/* The command parses its own argv from scratch. */
			optind = 0;
			return cli_cmds[i].run(&c, argc - cmd, argv + cmd);
		}
	}
	cli_err("unknown command '%s'", argv[cmd]);
	fprintf(stderr, "Try 'farpage --help'.\n");
	return CLI_EXIT_USAGE;
}
