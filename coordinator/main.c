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
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <openssl/crypto.h>

#include "actl.h"
#include "coord.h"
#include "evl.h"
#include "gkeys.h"
#include "log.h"
#include "server.h"
#include "wal.h"
#include "util.h"

#ifndef FARPAGE_VERSION
#define FARPAGE_VERSION "unknown"
#endif

#define MAIN_LISTEN_DEFAULT   "0.0.0.0:7700"
#define MAIN_DATA_DIR_DEFAULT "/var/lib/farpage"
#define MAIN_LEASE_MS_MAX     86400000u /* one day */
#define MAIN_EXIT_USAGE	      2
/* The data directory needs the operator (a restart does not fix it). */
#define MAIN_EXIT_DATA 3

enum main_opt {
	MAIN_OPT_LISTEN = 256,
	MAIN_OPT_ADDR_FILE,
	MAIN_OPT_DATA_DIR,
	MAIN_OPT_LEASE_MS,
	MAIN_OPT_SYNC_TIMEOUT_MS,
	MAIN_OPT_GRANT_TTL_MS,
	MAIN_OPT_FRAME_TIMEOUT_MS,
	MAIN_OPT_HS_TIMEOUT_MS,
	MAIN_OPT_SNAPSHOT_EVERY,
	MAIN_OPT_LOG_LEVEL,
	MAIN_OPT_METRICS_LISTEN,
	MAIN_OPT_METRICS_TOKEN_FILE,
	MAIN_OPT_DATA_ADDR_CHECK,
	MAIN_OPT_KEY_FILE,
	MAIN_OPT_INSECURE,
	MAIN_OPT_CHECK,
	MAIN_OPT_REPAIR,
};

static void main_usage_print(FILE *f)
{
	fprintf(f,
		"Usage: farpage-coordinator [OPTIONS]\n"
		"       farpage-coordinator --check [--repair] [DATA_DIR]\n"
		"\n"
		"Keeps the cluster's nodes, regions and endpoints; every\n"
		"change is logged to the data directory before it is\n"
		"acknowledged.\n"
		"\n"
		"  --listen ADDR        control address host:port; port 0\n"
		"                       picks a free one (default %s)\n"
		"  --addr-file FILE     write the bound host:port to FILE\n"
		"                       once listening (default: none; with\n"
		"                       --metrics-listen, a second line\n"
		"                       \"metrics host:port\")\n"
		"  --metrics-listen ADDR  serve Prometheus /metrics on\n"
		"                       host:port (default: off; port 0\n"
		"                       picks a free one; \"\": off)\n"
		"  --metrics-token-file FILE  answer /metrics only to\n"
		"                       requests with \"Authorization:\n"
		"                       Bearer TOKEN\", TOKEN the file's\n"
		"                       first line (default: none)\n"
		"  --data-addr-check warn|strict  a node's data address\n"
		"                       other than the one it connects\n"
		"                       from: taken and logged, or refused\n"
		"                       (default warn)\n"
		"  --data-dir DIR       log and snapshot, created if missing\n"
		"                       (default %s)\n"
		"  --lease-ms MS        a node is down MS ms after its last\n"
		"                       heartbeat (default %u)\n"
		"  --sync-timeout-ms MS  a node up must report a region\n"
		"                       epoch synced MS ms after it was\n"
		"                       made; one that does not is counted\n"
		"                       down (not waited for by deletes and\n"
		"                       rebuilds) until it does (default %u)\n"
		"  --grant-ttl-ms MS    grants to read or write another\n"
		"                       node's pool hold MS ms after they\n"
		"                       are issued (%u..%u, default %u)\n"
		"  --frame-timeout-ms MS  close a connection that holds half\n"
		"                       a frame this long (default 10000)\n"
		"  --handshake-timeout-ms MS  close a connection not done\n"
		"                       with its handshake this long after\n"
		"                       accept, a quarter of it while more\n"
		"                       than half the handshake slots are\n"
		"                       taken (default 5000)\n"
		"  --snapshot-every N   snapshot after N log records\n"
		"                       (default %u)\n"
		"  --key-file FILE      the cluster key; twice during a key\n"
		"                       rollover, the new key first (default:\n"
		"                       $FARPAGE_KEY_FILE, else\n"
		"                       /etc/farpage/cluster.key)\n"
		"  --insecure           no authentication at all; the whole\n"
		"                       cluster must run so (benchmarks,\n"
		"                       trusted labs)\n"
		"  --log-level LEVEL    err, warn, info or debug\n"
		"                       (default info)\n"
		"  --check              read the data directory (DATA_DIR,\n"
		"                       else --data-dir) as start-up would,\n"
		"                       report, change nothing, and exit: 0\n"
		"                       clean, %d problems found, 1 could\n"
		"                       not check (a coordinator runs on it)\n"
		"  --repair             with --check (implied): cut the log\n"
		"                       at its first bad record, keeping the\n"
		"                       bytes cut in wal.<generation>.cut-\n"
		"                       <offset> beside it; 0 if the\n"
		"                       directory is clean afterwards\n"
		"  -h, --help           this text\n"
		"  -V, --version        the version\n"
		"\n"
		"Start-up cuts a torn last log record (logged with its\n"
		"offset) and refuses any other damage to the data\n"
		"directory with exit status %d.\n",
		MAIN_LISTEN_DEFAULT, MAIN_DATA_DIR_DEFAULT,
		COORD_LEASE_MS_DEFAULT, COORD_SYNC_MS_DEFAULT,
		COORD_GRANT_TTL_MS_MIN, MAIN_LEASE_MS_MAX,
		COORD_GRANT_TTL_MS_DEFAULT, COORD_SNAPSHOT_EVERY_DEFAULT,
		MAIN_EXIT_DATA, MAIN_EXIT_DATA);
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

/* Everything the command line sets. */
struct main_opts {
	struct server_cfg scfg;
	const char *key_files[AUTH_KEYS_MAX];
	unsigned int n_key_files;
	struct auth_key keys[AUTH_KEYS_MAX];
	struct coord_cfg ccfg;
	enum log_level level;
	bool check, repair; /* --check, --repair: no server */
};

/* Parses a number option (@min..@max). Returns 0, or MAIN_EXIT_USAGE. */
static int main_opt_range(const char *opt, const char *arg, uint64_t min,
			  uint64_t max, uint64_t *out)
{
	uint64_t v;

	if (util_u64_parse(arg, &v) || v < min || v > max)
		return main_usage_err("%s: '%s' is not a number in %llu..%llu",
				      opt, arg, (unsigned long long)min,
				      (unsigned long long)max);
	*out = v;
	return 0;
}

/* Parses a count option (1..@max). Returns 0, or MAIN_EXIT_USAGE. */
static int main_opt_count(const char *opt, const char *arg, uint64_t max,
			  uint64_t *out)
{
	return main_opt_range(opt, arg, 1, max, out);
}

/*
 * The cluster keys of --key-file (or the default), checked: cluster keys,
 * distinct ids, the first not expired. Returns 0 or -errno (logged).
 */
static int main_keys_load(struct main_opts *o)
{
	time_t now = time(NULL);
	char why[400];

	if (o->scfg.insecure) {
		log_warn("--insecure: no authentication; any host that reaches "
			 "%s may change the tables",
			 o->scfg.listen_addr);
		return 0;
	}
	if (!o->n_key_files)
		o->key_files[o->n_key_files++] = NULL;
	for (unsigned int i = 0; i < o->n_key_files; i++) {
		struct actl_cred cr;
		char id[2 * AUTH_ID_LEN + 1];
		int ret;

		ret = actl_cred_load(&cr, o->key_files[i], AUTH_ROLE_CLUSTER,
				     NULL, why, sizeof(why));
		if (ret) {
			log_err("%s", why);
			return ret;
		}
		o->keys[i] = cr.key;
		OPENSSL_cleanse(&cr, sizeof(cr));
		auth_id_hex(o->keys[i].id, id);
		for (unsigned int k = 0; k < i; k++)
			if (!memcmp(o->keys[k].id, o->keys[i].id,
				    AUTH_ID_LEN)) {
				log_err("--key-file: key id %s given twice",
					id);
				return -EINVAL;
			}
		if (o->keys[i].not_after && o->keys[i].not_after < now) {
			if (!i) {
				log_err("the current cluster key (id %s) "
					"expired at %lld: the first --key-file "
					"must be the new key",
					id, (long long)o->keys[i].not_after);
				return -EKEYEXPIRED;
			}
			log_warn("cluster key id %s expired at %lld: peers "
				 "using it are refused",
				 id, (long long)o->keys[i].not_after);
		} else {
			log_info("cluster key id %s%s", id,
				 i ? " accepted (rollover)" : "");
		}
	}
	o->scfg.keys = o->keys;
	o->scfg.n_keys = o->n_key_files;
	return 0;
}

/*
 * The keyring grants are sealed with, shared by the tables and the
 * server; none with --insecure (no grants). Returns 0 or -errno (logged).
 */
static int main_grants_setup(struct main_opts *o, struct gkeys **out)
{
	uint64_t ttl = o->ccfg.grant_ttl_ms ? o->ccfg.grant_ttl_ms
					    : COORD_GRANT_TTL_MS_DEFAULT;
	int ret;

	*out = NULL;
	if (o->scfg.insecure)
		return 0;
	ret = gkeys_create(o->keys, o->scfg.n_keys, out);
	if (ret) {
		log_errno(ret, "cannot hold the grant keys");
		return ret;
	}
	o->ccfg.grant_key = gkeys_get;
	o->ccfg.grant_key_arg = *out;
	o->scfg.gkeys = *out;
	log_info("grants to read and write pools hold %llu ms",
		 (unsigned long long)ttl);
	return 0;
}

/*
 * Fills @o from the command line. Returns -1 to go on, or the exit status
 * (0 after --help or --version, MAIN_EXIT_USAGE for a bad command line).
 */
static int main_opts_parse(int argc, char **argv, struct main_opts *o)
{
	static const struct option opts[] = {
		{ "listen", required_argument, NULL, MAIN_OPT_LISTEN },
		{ "addr-file", required_argument, NULL, MAIN_OPT_ADDR_FILE },
		{ "data-dir", required_argument, NULL, MAIN_OPT_DATA_DIR },
		{ "lease-ms", required_argument, NULL, MAIN_OPT_LEASE_MS },
		{ "sync-timeout-ms", required_argument, NULL,
		  MAIN_OPT_SYNC_TIMEOUT_MS },
		{ "grant-ttl-ms", required_argument, NULL,
		  MAIN_OPT_GRANT_TTL_MS },
		{ "frame-timeout-ms", required_argument, NULL,
		  MAIN_OPT_FRAME_TIMEOUT_MS },
		{ "handshake-timeout-ms", required_argument, NULL,
		  MAIN_OPT_HS_TIMEOUT_MS },
		{ "snapshot-every", required_argument, NULL,
		  MAIN_OPT_SNAPSHOT_EVERY },
		{ "log-level", required_argument, NULL, MAIN_OPT_LOG_LEVEL },
		{ "metrics-listen", required_argument, NULL,
		  MAIN_OPT_METRICS_LISTEN },
		{ "metrics-token-file", required_argument, NULL,
		  MAIN_OPT_METRICS_TOKEN_FILE },
		{ "data-addr-check", required_argument, NULL,
		  MAIN_OPT_DATA_ADDR_CHECK },
		{ "key-file", required_argument, NULL, MAIN_OPT_KEY_FILE },
		{ "insecure", no_argument, NULL, MAIN_OPT_INSECURE },
		{ "check", no_argument, NULL, MAIN_OPT_CHECK },
		{ "repair", no_argument, NULL, MAIN_OPT_REPAIR },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	int opt, ret = 0;

	opterr = 0;
	while (!ret &&
	       (opt = getopt_long(argc, argv, ":hV", opts, NULL)) != -1) {
		switch (opt) {
		case MAIN_OPT_LISTEN:
			o->scfg.listen_addr = optarg;
			break;
		case MAIN_OPT_ADDR_FILE:
			o->scfg.addr_file = optarg;
			break;
		case MAIN_OPT_DATA_ADDR_CHECK:
			if (!strcmp(optarg, "strict") ||
			    !strcmp(optarg, "warn"))
				o->scfg.data_addr_strict =
					!strcmp(optarg, "strict");
			else
				ret = main_usage_err("--data-addr-check: warn "
						     "or strict, not '%s'",
						     optarg);
			break;
		case MAIN_OPT_METRICS_TOKEN_FILE:
			o->scfg.metrics_token_file = *optarg ? optarg : NULL;
			break;
		case MAIN_OPT_METRICS_LISTEN:
			/* "" (an empty setting in the units): off */
			o->scfg.metrics_listen = *optarg ? optarg : NULL;
			break;
		case MAIN_OPT_KEY_FILE:
			if (o->n_key_files == AUTH_KEYS_MAX)
				ret = main_usage_err("--key-file: at most %d",
						     AUTH_KEYS_MAX);
			else
				o->key_files[o->n_key_files++] = optarg;
			break;
		case MAIN_OPT_INSECURE:
			o->scfg.insecure = true;
			break;
		case MAIN_OPT_REPAIR:
			o->repair = true;
			/* fall through */
		case MAIN_OPT_CHECK:
			o->check = true;
			break;
		case MAIN_OPT_DATA_DIR:
			if (!*optarg)
				ret = main_usage_err("--data-dir: empty");
			o->ccfg.data_dir = optarg;
			break;
		case MAIN_OPT_LEASE_MS:
			ret = main_opt_count("--lease-ms", optarg,
					     MAIN_LEASE_MS_MAX,
					     &o->ccfg.lease_ms);
			break;
		case MAIN_OPT_SYNC_TIMEOUT_MS:
			ret = main_opt_count("--sync-timeout-ms", optarg,
					     MAIN_LEASE_MS_MAX,
					     &o->ccfg.sync_timeout_ms);
			break;
		case MAIN_OPT_GRANT_TTL_MS:
			ret = main_opt_range("--grant-ttl-ms", optarg,
					     COORD_GRANT_TTL_MS_MIN,
					     MAIN_LEASE_MS_MAX,
					     &o->ccfg.grant_ttl_ms);
			break;
		case MAIN_OPT_FRAME_TIMEOUT_MS: {
			uint64_t v = 0;

			ret = main_opt_count("--frame-timeout-ms", optarg,
					     MAIN_LEASE_MS_MAX, &v);
			o->scfg.frame_timeout_ms = (unsigned int)v;
			break;
		}
		case MAIN_OPT_HS_TIMEOUT_MS: {
			uint64_t v = 0;

			ret = main_opt_count("--handshake-timeout-ms", optarg,
					     MAIN_LEASE_MS_MAX, &v);
			o->scfg.hs_timeout_ms = (unsigned int)v;
			break;
		}
		case MAIN_OPT_SNAPSHOT_EVERY:
			ret = main_opt_count("--snapshot-every", optarg,
					     UINT32_MAX,
					     &o->ccfg.snapshot_every);
			break;
		case MAIN_OPT_LOG_LEVEL:
			if (log_level_parse(optarg, &o->level))
				ret = main_usage_err(
					"--log-level: unknown level '%s'",
					optarg);
			break;
		case 'h':
			main_usage_print(stdout);
			return 0;
		case 'V':
			printf("farpage-coordinator %s\n", FARPAGE_VERSION);
			return 0;
		case ':':
			return main_usage_err("%s needs a value",
					      argv[optind - 1]);
		default:
			return main_usage_err("unknown option %s",
					      argv[optind - 1]);
		}
	}
	if (ret)
		return ret;
	if (o->check && optind < argc) {
		if (!*argv[optind])
			return main_usage_err("DATA_DIR: empty");
		o->ccfg.data_dir = argv[optind++];
	}
	if (optind < argc)
		return main_usage_err("unexpected argument '%s'", argv[optind]);
	return -1;
}

/* Prints what coord_check() found in @dir. */
static void main_report_print(const char *dir, const struct wal_report *r)
{
	bool snap_bad = r->state == WAL_STATE_BAD && r->bad_in_snap;

	if (r->tmp_left)
		printf("leftover snapshot.tmp or wal.tmp in %s: start-up "
		       "removes it\n",
		       dir);
	if (!r->snap_found)
		printf("snapshot %s/snapshot: none\n", dir);
	else if (!snap_bad)
		printf("snapshot %s/snapshot: version %u, generation %llu, "
		       "epoch %llu, %llu records, %llu bytes\n",
		       dir, r->snap_version, (unsigned long long)r->snap_gen,
		       (unsigned long long)r->snap_epoch,
		       (unsigned long long)r->snap_records,
		       (unsigned long long)r->snap_size);
	if (snap_bad)
		;
	else if (!r->wal_found)
		printf("wal %s/wal: none (start-up writes an empty one)\n",
		       dir);
	else if (r->wal_stale)
		printf("wal %s/wal: generation %llu, older than the "
		       "snapshot's: start-up discards it (the snapshot holds "
		       "all of it)\n",
		       dir, (unsigned long long)r->wal_gen);
	else if (r->wal_version)
		printf("wal %s/wal: version %u, generation %llu, %llu "
		       "records, good up to byte %llu of %llu\n",
		       dir, r->wal_version, (unsigned long long)r->wal_gen,
		       (unsigned long long)r->wal_records,
		       (unsigned long long)r->wal_end,
		       (unsigned long long)r->wal_size);
	switch (r->state) {
	case WAL_STATE_CLEAN:
		printf("clean\n");
		break;
	case WAL_STATE_TORN:
		printf("problem: %s/wal at byte %llu: %s: a torn last record "
		       "(%llu bytes, never acknowledged); start-up cuts it\n",
		       dir, (unsigned long long)r->bad_off, r->why,
		       (unsigned long long)(r->wal_size - r->bad_off));
		break;
	case WAL_STATE_BAD:
		printf("problem: %s/%s at byte %llu: %s: start-up refuses "
		       "the directory\n",
		       dir, r->bad_in_snap ? "snapshot" : "wal",
		       (unsigned long long)r->bad_off, r->why);
		if (r->repairable)
			printf("--repair cuts %s/wal at byte %llu (%llu bytes, "
			       "kept in a copy beside it)\n",
			       dir, (unsigned long long)r->bad_off,
			       (unsigned long long)(r->wal_size - r->bad_off));
		else
			printf("--repair cannot fix this: restore %s from a "
			       "backup\n",
			       dir);
		break;
	}
}

/*
 * --check [--repair]: reports on the data directory (and repairs it).
 * Returns the exit status.
 */
static int main_check(const char *dir, bool repair)
{
	struct wal_report rep;
	int ret;

	ret = coord_check(dir, repair ? WAL_CHECK_REPAIR : 0, &rep);
	if (ret) {
		log_errno(ret, "cannot check %s", dir);
		return 1;
	}
	main_report_print(dir, &rep);
	if (!rep.cut_name[0])
		return rep.state == WAL_STATE_CLEAN ? 0 : MAIN_EXIT_DATA;
	printf("repaired: cut %s/wal at byte %llu; the %llu bytes cut are "
	       "kept in %s/%s\n",
	       dir, (unsigned long long)rep.cut_off,
	       (unsigned long long)rep.cut_bytes, dir, rep.cut_name);
	ret = coord_check(dir, 0, &rep);
	if (ret) {
		log_errno(ret, "cannot check %s", dir);
		return 1;
	}
	main_report_print(dir, &rep);
	return rep.state == WAL_STATE_CLEAN ? 0 : MAIN_EXIT_DATA;
}

int main(int argc, char **argv)
{
	struct main_opts o = {
		.scfg = { .listen_addr = MAIN_LISTEN_DEFAULT },
		.ccfg = { .data_dir = MAIN_DATA_DIR_DEFAULT,
			  .lease_ms = COORD_LEASE_MS_DEFAULT,
			  .snapshot_every = COORD_SNAPSHOT_EVERY_DEFAULT },
		.level = LOG_INFO,
	};
	struct gkeys *gk = NULL;
	struct server *srv;
	struct coord *c;
	sigset_t mask;
	int ret;

	ret = main_opts_parse(argc, argv, &o);
	if (ret >= 0)
		return ret;
	log_init("farpage-coordinator", o.level);
	if (o.check)
		return main_check(o.ccfg.data_dir, o.repair);
	main_nofile_raise();
	signal(SIGPIPE, SIG_IGN);
	/* Delivered through the server's signalfd instead. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigprocmask(SIG_BLOCK, &mask, NULL);

	ret = main_keys_load(&o);
	if (ret)
		return MAIN_EXIT_USAGE;
	ret = main_grants_setup(&o, &gk);
	if (ret)
		return 1;
	ret = coord_create(&o.ccfg, evl_now_ms(), &c);
	if (ret) {
		log_errno(ret, "cannot recover the state from %s",
			  o.ccfg.data_dir);
		gkeys_destroy(gk);
		/* Refused: restarting would only refuse again. */
		return ret == -EBADMSG ? MAIN_EXIT_DATA : 1;
	}
	ret = server_create(&o.scfg, c, &srv);
	if (ret)
		goto out_coord;
	ret = server_run(srv);
	server_destroy(srv);
out_coord:
	coord_destroy(c);
	gkeys_destroy(gk);
	return ret ? 1 : 0;
}
