// SPDX-License-Identifier: MIT
/* farpage stats: the local agent's fault counters. */
#include "cli.h"
#include "fp_json.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "farpage.h"

static const char cli_stats_usage[] =
	"usage: farpage stats [--json]\n"
	"\n"
	"Prints the local agent's counters: faults served, remote and local\n"
	"ones, errors and poisoned pages, as one line:\n"
	"  stats: faults=N remote=N local=N errors=N poisoned=N agent=PATH\n"
	"and, when remote pages are cached there, its cache as another:\n"
	"  cache: limit=B resident=B resident_max=B dirty=B hits=N misses=N\n"
	"         hit_ratio=X evictions=N writebacks=N wb_errors=N "
	"wp_faults=N file_max=B\n"
	"(B: bytes; writebacks and evictions: pages). The agent is the one\n"
	"at --agent-sock.\n"
	"\n"
	"  --json   print the same as one JSON object (docs/cli.md)\n";

/* Faults on pages the cache held, of all faults it saw (0 without any). */
static double cli_hit_ratio(const struct farpage_stats *st)
{
	uint64_t n = st->cache_hits + st->cache_misses;

	return n ? (double)st->cache_hits / (double)n : 0.0;
}

int cli_stats_print(const char *agent_sock, const char *label)
{
	struct farpage_stats st;
	char h[3][32];
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
	if (!st.cache_limit)
		return 0;
	printf("%s cache: limit=%llu resident=%llu resident_max=%llu "
	       "dirty=%llu hits=%llu misses=%llu hit_ratio=%.3f "
	       "evictions=%llu writebacks=%llu wb_errors=%llu "
	       "wp_faults=%llu file_max=%llu",
	       label, (unsigned long long)st.cache_limit,
	       (unsigned long long)st.cache_resident,
	       (unsigned long long)st.cache_resident_max,
	       (unsigned long long)st.cache_dirty,
	       (unsigned long long)st.cache_hits,
	       (unsigned long long)st.cache_misses, cli_hit_ratio(&st),
	       (unsigned long long)st.cache_evictions,
	       (unsigned long long)st.cache_writebacks,
	       (unsigned long long)st.cache_wb_errors,
	       (unsigned long long)st.cache_wp_faults,
	       (unsigned long long)st.cache_file_max);
	/* For a person: the sizes again in units (parsers read key=). */
	printf(" (limit %s, resident %s, dirty %s)\n",
	       cli_size_str(st.cache_limit, h[0], sizeof(h[0])),
	       cli_size_str(st.cache_resident, h[1], sizeof(h[1])),
	       cli_size_str(st.cache_dirty, h[2], sizeof(h[2])));
	return 0;
}

/* The cache's counters into object @ca. 0 or -ENOMEM. */
static int cli_stats_json_cache(struct json_object *ca,
				const struct farpage_stats *st)
{
	int err = 0;

	err |= fp_json_set_u64(ca, "limit", st->cache_limit);
	err |= fp_json_set_u64(ca, "resident", st->cache_resident);
	err |= fp_json_set_u64(ca, "resident_max", st->cache_resident_max);
	err |= fp_json_set_u64(ca, "dirty", st->cache_dirty);
	err |= fp_json_set_u64(ca, "hits", st->cache_hits);
	err |= fp_json_set_u64(ca, "misses", st->cache_misses);
	err |= fp_json_set_dbl(ca, "hit_ratio", cli_hit_ratio(st), 3);
	err |= fp_json_set_u64(ca, "evictions", st->cache_evictions);
	err |= fp_json_set_u64(ca, "writebacks", st->cache_writebacks);
	err |= fp_json_set_u64(ca, "wb_errors", st->cache_wb_errors);
	err |= fp_json_set_u64(ca, "wp_faults", st->cache_wp_faults);
	err |= fp_json_set_u64(ca, "file_max", st->cache_file_max);
	return err;
}

/*
 * stats --json: the counters as one object, "cache" null when faults are
 * served by copying. Returns the exit code, or farpage_agent_stats()'s
 * -errno (not said yet).
 */
static int cli_stats_json(const char *agent_sock)
{
	struct json_object *o, *ca;
	struct farpage_stats st;
	int ret, err = 0;

	ret = farpage_agent_stats(agent_sock, &st);
	if (ret < 0)
		return ret;
	o = json_object_new_object();
	if (!o)
		return cli_json_out("stats", NULL);
	err |= fp_json_set_str(o, "agent", agent_sock);
	err |= fp_json_set_u64(o, "faults", st.faults);
	err |= fp_json_set_u64(o, "remote", st.remote);
	err |= fp_json_set_u64(o, "local", st.local);
	err |= fp_json_set_u64(o, "errors", st.errors);
	err |= fp_json_set_u64(o, "poisoned", st.poisoned);
	if (st.cache_limit) {
		ca = json_object_new_object();
		err |= fp_json_set(o, "cache", ca);
		if (!err)
			err |= cli_stats_json_cache(ca, &st);
	} else if (json_object_object_add(o, "cache", NULL)) {
		err = -ENOMEM;
	}
	if (err) {
		json_object_put(o);
		o = NULL;
	}
	return cli_json_out("stats", o);
}

static const char cli_flush_usage[] =
	"usage: farpage flush [--drop] NAME\n"
	"\n"
	"Sends home every page that mappings of region NAME through the\n"
	"local agent have written and not yet sent: returns once they are in\n"
	"their owners' pools (exit 0), or fails naming why (exit 1: an owner\n"
	"could not be reached within the agent's fault timeout; the pages\n"
	"are kept and sent again). On a terminal a progress line shows the\n"
	"agent's dirty pages going home (not with --quiet).\n"
	"\n"
	"  --drop  then the region's pages this host's cache holds clean "
	"leave\n"
	"          it (all of them, but for pages written since the flush\n"
	"          began): their next touch fetches them again. Says how many\n"
	"          left.\n";

/* The flush, on a thread of its own while the progress line is drawn. */
struct cli_flush {
	const char *sock, *name;
	int drop;
	uint64_t dropped;
	int ret;
	atomic_int done;
};

static void *cli_flush_thread(void *arg)
{
	struct cli_flush *f = arg;

	f->ret = f->drop ? farpage_agent_flush_drop(f->sock, f->name,
						    &f->dropped)
			 : farpage_agent_flush(f->sock, f->name);
	atomic_store(&f->done, 1);
	return NULL;
}

/*
 * The flush of @f (f->sock, f->name, f->drop) with a progress line on a
 * terminal: the agent's dirty bytes (of every region: it counts no other
 * way) going down from what they were when the flush began.
 */
static int cli_flush_progress(const struct cli *c, struct cli_flush *f)
{
	struct farpage_stats st;
	struct cli_progress pr;
	char what[16 + MSG_NAME_MAX];
	uint64_t d0;
	pthread_t t;

	if (c->quiet || !isatty(STDERR_FILENO) ||
	    farpage_agent_stats(c->agent_sock, &st) || !st.cache_dirty ||
	    pthread_create(&t, NULL, cli_flush_thread, f)) {
		cli_flush_thread(f);
		return f->ret;
	}
	d0 = st.cache_dirty / 4096;
	snprintf(what, sizeof(what), "flush %s", f->name);
	cli_progress_start(&pr, c, what, d0);
	while (!atomic_load(&f->done)) {
		usleep(CLI_PROGRESS_MS * 1000);
		if (!farpage_agent_stats(c->agent_sock, &st))
			cli_progress_set(&pr,
					 st.cache_dirty / 4096 < d0
						 ? d0 - st.cache_dirty / 4096
						 : 0);
	}
	pthread_join(t, NULL);
	cli_progress_end(&pr);
	return f->ret;
}

int cli_flush_run(const struct cli *c, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "drop", no_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct cli_flush f = { .sock = c->agent_sock };
	int ret;

	while ((ret = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (ret) {
		case 'd':
			f.drop = 1;
			break;
		case 'h':
			fputs(cli_flush_usage, stdout);
			return CLI_EXIT_OK;
		default:
			return cli_getopt_err(cli_flush_usage, "flush", ret,
					      argv);
		}
	}
	if (argc - optind != 1)
		return cli_usage_err(cli_flush_usage, "flush: %s",
				     argc - optind ? "one region name expected"
						   : "missing region name");
	f.name = argv[optind];
	ret = cli_flush_progress(c, &f);
	if (ret < 0) {
		cli_err("flush %s: agent at %s: %s", f.name, c->agent_sock,
			farpage_strerror(ret));
		return CLI_EXIT_FAIL;
	}
	if (f.drop)
		printf("flush: region %s: every written page is home; %llu "
		       "pages left this host's cache\n",
		       f.name, (unsigned long long)f.dropped);
	else
		printf("flush: region %s: every written page is home\n",
		       f.name);
	return CLI_EXIT_OK;
}

static const char cli_handover_usage[] =
	"usage: farpage handover NAME\n"
	"\n"
	"Hands the write lease of region NAME's movable mapping through the\n"
	"local agent (FARPAGE_MAP_MOVABLE; farpage vm maps so) to whoever\n"
	"takes it next: an incoming mapping on another host, the destination\n"
	"of a VM's migration. Every page the mapping wrote goes home first;\n"
	"then its pages leave the process, whose next touches wait, and the\n"
	"lease goes back to the coordinator. The process must not write\n"
	"meanwhile (a VM stopped for its switch-over). If nobody takes the\n"
	"lease, the mapping's next fault takes it back; if somebody did, that\n"
	"fault raises SIGBUS. Exit 0 once the lease is given back, 1 with the\n"
	"agent's reason if not (nothing changed then).\n";

int cli_handover_run(const struct cli *c, int argc, char **argv)
{
	int ret = cli_help_only(cli_handover_usage, "handover", argc, argv);
	uint64_t pages = 0;

	if (ret >= 0)
		return ret;
	if (argc - optind != 1)
		return cli_usage_err(cli_handover_usage, "handover: %s",
				     argc - optind ? "one region name expected"
						   : "missing region name");
	ret = farpage_agent_handover(c->agent_sock, argv[optind], &pages);
	if (ret < 0) {
		cli_err("handover %s: agent at %s: %s", argv[optind],
			c->agent_sock, farpage_strerror(ret));
		return CLI_EXIT_FAIL;
	}
	printf("handover: region %s: handed over, %llu pages sent home\n",
	       argv[optind], (unsigned long long)pages);
	return CLI_EXIT_OK;
}

int cli_stats_run(const struct cli *c, int argc, char **argv)
{
	int json = 0;
	int ret = cli_help_json(cli_stats_usage, "stats", argc, argv, &json);

	if (ret >= 0)
		return ret;
	if (optind < argc)
		return cli_usage_err(cli_stats_usage,
				     "stats: unexpected argument '%s'",
				     argv[optind]);
	ret = json ? cli_stats_json(c->agent_sock)
		   : cli_stats_print(c->agent_sock, "stats");
	if (ret > 0)
		return ret; /* --json's failure, said */
	if (ret < 0) {
		cli_err("stats: agent at %s: %s%s", c->agent_sock,
			strerror(-ret),
			ret == -EACCES
				? " (the agent does not serve this user: "
				  "its --allow-uid/--allow-gid)"
			: ret == -EUSERS
				? " (this user holds as many connections as "
				  "the agent allows one user, "
				  "--sock-clients-per-uid, or all its places "
				  "are taken, --sock-clients)"
				: "");
		return CLI_EXIT_FAIL;
	}
	return CLI_EXIT_OK;
}
