// SPDX-License-Identifier: MIT
/* farpage stats: the local agent's fault counters. */
#include "cli.h"

#include <getopt.h>
#include <string.h>

#include "farpage.h"

static const char cli_stats_usage[] =
	"usage: farpage stats\n"
	"\n"
	"Prints the local agent's counters: faults served, remote and local\n"
	"ones, errors and poisoned pages, as one line:\n"
	"  stats: faults=N remote=N local=N errors=N poisoned=N agent=PATH\n"
	"The agent is the one at --agent-sock.\n";

int cli_stats_print(const char *agent_sock, const char *label)
{
	struct farpage_stats st;
	int ret;

	ret = farpage_agent_stats(agent_sock, &st);
	if (ret < 0)
		return ret;
	printf("%s: faults=%llu remote=%llu local=%llu errors=%llu "
	       "poisoned=%llu agent=%s\n",
	       label, (unsigned long long)st.faults,
	       (unsigned long long)st.remote, (unsigned long long)st.local,
	       (unsigned long long)st.errors, (unsigned long long)st.poisoned,
	       agent_sock);
	return 0;
}

int cli_stats_run(const struct cli *c, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int ret;

	while ((ret = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (ret == 'h') {
			fputs(cli_stats_usage, stdout);
			return CLI_EXIT_OK;
		}
		return cli_getopt_err(cli_stats_usage, "stats", ret, argv);
	}
	if (optind < argc)
		return cli_usage_err(cli_stats_usage,
				     "stats: unexpected argument '%s'",
				     argv[optind]);
	ret = cli_stats_print(c->agent_sock, "stats");
	if (ret < 0) {
		cli_err("stats: agent at %s: %s", c->agent_sock,
			strerror(-ret));
		return CLI_EXIT_FAIL;
	}
	return CLI_EXIT_OK;
}
