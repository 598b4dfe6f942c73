// SPDX-License-Identifier: MIT
/*
 * farpage fill: maps a region through the local agent and writes the test
 * pattern (common/pattern.h) into every page of the chunks this node owns,
 * or with --all into every page of the region, through the mapping.
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "farpage.h"
#include "pattern.h"

static const char cli_fill_usage[] =
	"usage: farpage fill NAME [--seed N] [--all]\n"
	"\n"
	"Maps region NAME through the local agent and writes the test pattern\n"
	"of (seed, page index) into every page of the chunks this node owns,\n"
	"so that 'farpage touch' on any node can verify them: run it on every\n"
	"owner. Exit 1 if this node owns no chunk of NAME alone (nothing is\n"
	"written; a replicated region's chunks have no single owner).\n"
	"\n"
	"  --all     write every page of the region, from this host, through\n"
	"            the mapping (remote pages are fetched and sent home), "
	"and\n"
	"            flush: the whole region, replicated or not\n"
	"  --seed N  pattern seed (default 1)\n"
	"  --help    this text\n"
	"\n"
	"On a terminal a progress line shows pages done, MB/s and the time\n"
	"left (not with --quiet).\n";

/* Writes the pattern into the pages [off, end) and counts them. */
static uint64_t cli_fill_range(char *base, size_t off, size_t end,
			       uint64_t seed, struct cli_progress *pr,
			       uint64_t done)
{
	uint64_t n = 0;

	for (size_t p = off; p + PATTERN_PAGE <= end; p += PATTERN_PAGE) {
		pattern_fill(base + p, seed, p / PATTERN_PAGE);
		if (!(++n & 255))
			cli_progress_set(pr, done + n);
	}
	return n;
}

/* Fills region @name as mapped in @m; @all: every page, else the chunks
 * this node owns. Returns the pages written. */
static uint64_t cli_fill_map(const struct cli *c, struct farpage_map *m,
			     const char *what, uint64_t seed, int all)
{
	char *base = farpage_map_addr(m);
	size_t size = farpage_map_size(m), chunk = farpage_map_chunk_size(m);
	struct cli_progress pr;
	uint64_t pages = 0;

	if (!chunk)
		chunk = size;
	cli_progress_start(&pr, c, what, all ? size / PATTERN_PAGE : 0);
	for (size_t off = 0; off < size; off += chunk) {
		/* Local chunks are the pool itself: no fault, no fetch. */
		if (!all && !farpage_map_is_local(m, off))
			continue;
		pages += cli_fill_range(base, off,
					size - off < chunk ? size : off + chunk,
					seed, &pr, pages);
	}
	cli_progress_end(&pr);
	return pages;
}

int cli_fill_run(const struct cli *c, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "seed", required_argument, NULL, 's' },
		{ "all", no_argument, NULL, 'a' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct farpage_map *m;
	uint64_t seed = 1, pages;
	char what[16 + MSG_NAME_MAX];
	const char *name;
	int ret, all = 0;

	while ((ret = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (ret) {
		case 's':
			if (cli_opt_u64(cli_fill_usage, "--seed", optarg,
					&seed))
				return CLI_EXIT_USAGE;
			break;
		case 'a':
			all = 1;
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
	pages = cli_fill_map(c, m, what, seed, all);
	/* --all: the pages are home before we say so. */
	ret = all ? farpage_flush(m) : 0;
	if (ret == -EOPNOTSUPP)
		cli_err("%s --all: the agent serves faults by copying "
			"(--fault-mode copy): what was written to remote pages "
			"stays in this process; fill on each owner instead",
			what);
	else if (ret < 0)
		cli_err("%s: flush: %s", what, farpage_strerror(ret));
	if (ret < 0) {
		farpage_unmap(m);
		return CLI_EXIT_FAIL;
	}
	if (!pages)
		cli_err("%s: node %llu owns no chunk of region %s alone: "
			"nothing written ('farpage fill --all %s' writes every "
			"page through a mapping, replicated or not)",
			what, (unsigned long long)farpage_map_node(m), name,
			name);
	else
		printf("fill: region=%s pages=%llu bytes=%llu%s\n", name,
		       (unsigned long long)pages,
		       (unsigned long long)(pages * PATTERN_PAGE),
		       all ? " (every page, flushed)" : "");
	ret = farpage_unmap(m);
	if (ret < 0) {
		cli_err("%s: unmap: %s", what, farpage_strerror(ret));
		return CLI_EXIT_FAIL;
	}
	return pages ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}
