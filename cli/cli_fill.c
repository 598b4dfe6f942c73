// SPDX-License-Identifier: MIT
/*
 * farpage fill: maps a region through the local agent and writes the test
 * pattern (common/pattern.h) into every page of the chunks this node owns.
 */
#include "cli.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "farpage.h"
#include "pattern.h"

static const char cli_fill_usage[] =
	"usage: farpage fill NAME [--seed N]\n"
	"\n"
	"Maps region NAME through the local agent and writes the test pattern\n"
	"of (seed, page index) into every page of the chunks this node owns,\n"
	"so that 'farpage touch' on any node can verify them. A replicated\n"
	"region's chunks have no single owner: write them through a mapping\n"
	"('farpage touch NAME --write --seed N', which flushes).\n"
	"\n"
	"  --seed N  pattern seed (default 1)\n"
	"  --help    this text\n";

int cli_fill_run(const struct cli *c, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "seed", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct farpage_map *m;
	uint64_t seed = 1, pages = 0;
	size_t size, chunk, end;
	char what[16 + MSG_NAME_MAX];
	const char *name;
	char *base;
	int ret;

	while ((ret = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (ret) {
		case 's':
			if (cli_opt_u64(cli_fill_usage, "--seed", optarg,
					&seed))
				return CLI_EXIT_USAGE;
			break;
		case 'h':
			fputs(cli_fill_usage, stdout);
			return CLI_EXIT_OK;
		default:
			return cli_getopt_err(cli_fill_usage, "fill", ret,
					      argv);
		}
	}
	if (argc - optind != 1)
		return cli_usage_err(cli_fill_usage, "fill: %s",
				     argc - optind ? "one region name expected"
						   : "missing region name");
	name = argv[optind];
	snprintf(what, sizeof(what), "fill %s", name);
	if (cli_map(c, what, name, 0, &m) < 0)
		return CLI_EXIT_FAIL;
	base = farpage_map_addr(m);
	size = farpage_map_size(m);
	chunk = farpage_map_chunk_size(m);
	if (!chunk)
		chunk = size;
	for (size_t off = 0; off < size; off += chunk) {
		if (!farpage_map_is_local(m, off))
			continue;
		/* Local chunks are the pool itself: no fault, no fetch. */
		end = size - off < chunk ? size : off + chunk;
		for (size_t p = off; p + PATTERN_PAGE <= end;
		     p += PATTERN_PAGE) {
			pattern_fill(base + p, seed, p / PATTERN_PAGE);
			pages++;
		}
	}
	if (!pages)
		printf("node %llu owns no chunk of region %s alone: nothing "
		       "to fill (the replicas of a replicated region are "
		       "written through a mapping: farpage touch %s --write "
		       "--seed N)\n",
		       (unsigned long long)farpage_map_node(m), name, name);
	printf("fill: region=%s pages=%llu bytes=%llu\n", name,
	       (unsigned long long)pages,
	       (unsigned long long)(pages * PATTERN_PAGE));
	ret = farpage_unmap(m);
	if (ret < 0) {
		cli_err("%s: unmap: %s", what, farpage_strerror(ret));
		return CLI_EXIT_FAIL;
	}
	return CLI_EXIT_OK;
}
