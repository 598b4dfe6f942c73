// SPDX-License-Identifier: MIT
/*
 * farpage-coordinator: parses the command line, recovers the tables from the
 * data directory and serves control requests until SIGINT or SIGTERM.
 */
#define LOG_PREFIX "coord: "
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "coord.h"
#include "evl.h"
#include "log.h"
#include "server.h"
#include "util.h"

#ifndef FARPAGE_VERSION
#define FARPAGE_VERSION "unknown"
#endif

#define MAIN_LISTEN_DEFAULT   "0.0.0.0:7700"
#define MAIN_DATA_DIR_DEFAULT "/var/lib/farpage"
#define MAIN_LEASE_MS_MAX     86400000u /* one day */
#define MAIN_EXIT_USAGE	      2

enum main_opt {
	MAIN_OPT_LISTEN = 256,
	MAIN_OPT_ADDR_FILE,
	MAIN_OPT_DATA_DIR,
	MAIN_OPT_LEASE_MS,
	MAIN_OPT_SNAPSHOT_EVERY,
	MAIN_OPT_LOG_LEVEL,
};

static void main_usage_print(FILE *f)
{
	fprintf(f,
		"usage: farpage-coordinator [OPTIONS]\n"
		"\n"
		"Keeps the cluster's nodes, regions and endpoints; every "
		"change is\n"
		"written to a write-ahead log in the data directory before it "
		"is\n"
		"acknowledged.\n"
		"\n"
		"options:\n"
		"  --listen ADDR          control address, host:port; port 0 "
		"picks\n"
		"                         a free port "
		"(default " MAIN_LISTEN_DEFAULT ")\n"
		"  --addr-file FILE       write the bound host:port to FILE "
		"once\n"
		"                         listening (default: none)\n"
		"  --data-dir DIR         write-ahead log and snapshot; "
		"created if\n"
		"                         missing "
		"(default " MAIN_DATA_DIR_DEFAULT ")\n"
		"  --lease-ms MS          a node is down MS ms after its last\n"
		"                         heartbeat (default %u)\n"
		"  --snapshot-every N     snapshot after N log records "
		"(default %u)\n"
		"  --log-level LEVEL      err, warn, info or debug (default "
		"info)\n"
		"  -h, --help             this text\n"
		"  -V, --version          print the version\n",
		COORD_LEASE_MS_DEFAULT, COORD_SNAPSHOT_EVERY_DEFAULT);
}

/* Prints a command-line error. Returns MAIN_EXIT_USAGE. */
static int __attribute__((format(printf, 1, 2)))
main_usage_err(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "farpage-coordinator: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'farpage-coordinator --help'.\n");
	return MAIN_EXIT_USAGE;
}

/* Allows SERVER_CONNS_MAX connections plus our own fds. */
static void main_nofile_raise(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= rl.rlim_max)
		return;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		log_warn("cannot raise the open file limit: %s",
			 strerror(errno));
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "listen", required_argument, NULL, MAIN_OPT_LISTEN },
		{ "addr-file", required_argument, NULL, MAIN_OPT_ADDR_FILE },
		{ "data-dir", required_argument, NULL, MAIN_OPT_DATA_DIR },
		{ "lease-ms", required_argument, NULL, MAIN_OPT_LEASE_MS },
		{ "snapshot-every", required_argument, NULL,
		  MAIN_OPT_SNAPSHOT_EVERY },
		{ "log-level", required_argument, NULL, MAIN_OPT_LOG_LEVEL },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct server_cfg scfg = { .listen_addr = MAIN_LISTEN_DEFAULT };
	struct coord_cfg ccfg = {
		.data_dir = MAIN_DATA_DIR_DEFAULT,
		.lease_ms = COORD_LEASE_MS_DEFAULT,
		.snapshot_every = COORD_SNAPSHOT_EVERY_DEFAULT,
	};
	enum log_level level = LOG_INFO;
	struct server *srv;
	struct coord *c;
	sigset_t mask;
	uint64_t v;
	int opt, ret;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, ":hV", opts, NULL)) != -1) {
		switch (opt) {
		case MAIN_OPT_LISTEN:
			scfg.listen_addr = optarg;
			break;
		case MAIN_OPT_ADDR_FILE:
			scfg.addr_file = optarg;
			break;
		case MAIN_OPT_DATA_DIR:
			if (!*optarg)
				return main_usage_err("empty --data-dir");
			ccfg.data_dir = optarg;
			break;
		case MAIN_OPT_LEASE_MS:
			if (util_u64_parse(optarg, &v) || v == 0 ||
			    v > MAIN_LEASE_MS_MAX)
				return main_usage_err(
					"bad --lease-ms '%s': want 1..86400000",
					optarg);
			ccfg.lease_ms = v;
			break;
		case MAIN_OPT_SNAPSHOT_EVERY:
			if (util_u64_parse(optarg, &v) || v == 0)
				return main_usage_err("bad --snapshot-every "
						      "'%s': want a count >= 1",
						      optarg);
			ccfg.snapshot_every = v;
			break;
		case MAIN_OPT_LOG_LEVEL:
			if (log_level_parse(optarg, &level))
				return main_usage_err(
					"bad --log-level '%s': want err, warn, "
					"info or debug",
					optarg);
			break;
		case 'h':
			main_usage_print(stdout);
			return 0;
		case 'V':
			printf("farpage-coordinator %s\n", FARPAGE_VERSION);
			return 0;
		case ':':
			return main_usage_err("option %s needs a value",
					      argv[optind - 1]);
		default:
			return main_usage_err("unknown option %s",
					      argv[optind - 1]);
		}
	}
	if (optind < argc)
		return main_usage_err("unexpected argument '%s'", argv[optind]);

	log_init("farpage-coordinator", level);
	main_nofile_raise();
	signal(SIGPIPE, SIG_IGN);
	/* Delivered through the server's signalfd instead. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigprocmask(SIG_BLOCK, &mask, NULL);

	ret = coord_create(&ccfg, evl_now_ms(), &c);
	if (ret) {
		log_errno(ret, "cannot recover the state from %s",
			  ccfg.data_dir);
		return 1;
	}
	ret = server_create(&scfg, c, &srv);
	if (ret)
		goto out_coord;
	ret = server_run(srv);
	server_destroy(srv);
out_coord:
	coord_destroy(c);
	return ret ? 1 : 0;
}
