// SPDX-License-Identifier: MIT
/*
 * farpage: the command-line tool. Parses the global options, resolves their
 * defaults from the environment and runs one command (cli_<command>.c).
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "farpage.h"
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
	{ "vm", cli_vm_run, "run QEMU with its guest RAM in a region" },
	{ "keygen", cli_keygen_run,
	  "make a cluster key, or derive an admin or node key from it" },
};

#define CLI_N_CMDS (sizeof(cli_cmds) / sizeof(cli_cmds[0]))

static void cli_usage_print(FILE *f)
{
	fprintf(f, "Usage: farpage [GLOBAL OPTIONS] COMMAND [ARGS]\n"
		   "\n"
		   "commands:\n");
	for (size_t i = 0; i < CLI_N_CMDS; i++)
		fprintf(f, "  %-8s %s\n", cli_cmds[i].name,
			cli_cmds[i].summary);
	fprintf(f,
		"\n"
		"global options (before the command):\n"
		"  --coordinator ADDR  coordinator control address\n"
		"                      (default $" CLI_COORDINATOR_ENV
		" or " CLI_COORDINATOR_DEFAULT ")\n"
		"  --agent-sock PATH   local agent's socket\n"
		"                      (default $" FARPAGE_AGENT_SOCK_ENV
		" or " FARPAGE_AGENT_SOCK_DEFAULT ")\n"
		"  --timeout-ms N      timeout of each control call "
		"(default %d)\n"
		"  --key-file FILE     the admin key, or the cluster key "
		"(default\n"
		"                      $FARPAGE_KEY_FILE, else "
		"/etc/farpage/admin.key,\n"
		"                      else /etc/farpage/cluster.key)\n"
		"  --insecure          the cluster runs without "
		"authentication\n"
		"  --help              this text\n"
		"  --version           print the version\n"
		"\n"
		"'farpage COMMAND --help' describes a command.\n",
		CLI_TIMEOUT_MS_DEFAULT);
}

static const char *cli_env_or(const char *name, const char *def)
{
	const char *v = getenv(name);

	return v && *v ? v : def;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "coordinator", required_argument, NULL, 'c' },
		{ "agent-sock", required_argument, NULL, 'a' },
		{ "timeout-ms", required_argument, NULL, 't' },
		{ "key-file", required_argument, NULL, 'k' },
		{ "insecure", no_argument, NULL, 'i' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 },
	};
	struct cli c = {
		.coordinator = cli_env_or(CLI_COORDINATOR_ENV,
					  CLI_COORDINATOR_DEFAULT),
		.agent_sock = cli_env_or(FARPAGE_AGENT_SOCK_ENV,
					 FARPAGE_AGENT_SOCK_DEFAULT),
		.timeout_ms = CLI_TIMEOUT_MS_DEFAULT,
	};
	uint64_t v;
	int ret, cmd;

	/* A coordinator that hangs up must give an error, not kill us. */
	signal(SIGPIPE, SIG_IGN);

	opterr = 0;
	/* '+': stop at the command; its options are its own. */
	while ((ret = getopt_long(argc, argv, "+:hV", opts, NULL)) != -1) {
		switch (ret) {
		case 'c':
			c.coordinator = optarg;
			break;
		case 'a':
			c.agent_sock = optarg;
			break;
		case 'k':
			c.key_file = optarg;
			break;
		case 'i':
			c.insecure = true;
			break;
		case 't':
			if (util_u64_parse(optarg, &v) < 0 || !v ||
			    v > INT32_MAX) {
				cli_err("--timeout-ms: '%s' is not a positive "
					"number of milliseconds",
					optarg);
				cli_usage_print(stderr);
				return CLI_EXIT_USAGE;
			}
			c.timeout_ms = (int)v;
			break;
		case 'h':
			cli_usage_print(stdout);
			return CLI_EXIT_OK;
		case 'V':
			printf("farpage %s\n", FARPAGE_VERSION);
			return CLI_EXIT_OK;
		default:
			if (ret == ':')
				cli_err("option '%s' needs a value",
					argv[optind - 1]);
			else if (optopt)
				cli_err("unknown option '-%c'", optopt);
			else
				cli_err("unknown option '%s'",
					argv[optind - 1]);
			cli_usage_print(stderr);
			return CLI_EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		cli_err("no command given");
		cli_usage_print(stderr);
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
	cli_usage_print(stderr);
	return CLI_EXIT_USAGE;
}
