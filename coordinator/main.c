// SPDX-License-Identifier: MIT
/*
 * farpage-coordinator: parses the command line, recovers the tables from the
 * data directory and serves control requests until SIGINT or SIGTERM.
 */
#define LOG_PREFIX "coord: "
#include <errno.h>
#include <getopt.h>
#include <stddef.h>
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
#include "opts.h"
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
	bool data_dir_set;  /* --data-dir given */
	const char *import; /* --import DATA_DIR: no server */
	/* --data-dir given with --store etcd://... (a unit that always
	 * names its state directory): not used */
	const char *data_dir_unused;
};

static const struct opts_spec main_spec;

/* A number option in o->min..o->max. Returns 0 or MAIN_EXIT_USAGE. */
static int main_num_parse(const struct opts_opt *o, const char *arg,
			  uint64_t *v)
{
	if (util_u64_parse(arg, v) || *v < o->min || *v > o->max)
		return opts_usage_err(
			&main_spec, "--%s: '%s' is not a number in %llu..%llu",
			o->name, arg, (unsigned long long)o->min,
			(unsigned long long)o->max);
	return 0;
}

/* A number option, a uint64_t at o->off. */
static int main_set_u64(const struct opts_opt *o, void *ctx, const char *arg)
{
	uint64_t v;
	int ret = main_num_parse(o, arg, &v);

	if (!ret)
		memcpy((char *)ctx + o->off, &v, sizeof(v));
	return ret;
}

/* The same, an unsigned int at o->off. */
static int main_set_uint(const struct opts_opt *o, void *ctx, const char *arg)
{
	uint64_t v;
	unsigned int u;
	int ret = main_num_parse(o, arg, &v);

	u = (unsigned int)v;
	if (!ret)
		memcpy((char *)ctx + o->off, &u, sizeof(u));
	return ret;
}

static int main_set_data_addr_check(const struct opts_opt *o, void *ctx,
				    const char *arg)
{
	struct main_opts *m = ctx;

	if (strcmp(arg, "strict") && strcmp(arg, "warn"))
		return opts_usage_err(&main_spec,
				      "--data-addr-check: warn or strict, not "
				      "'%s'",
				      arg);
	m->scfg.data_addr_strict = !strcmp(arg, "strict");
	return 0;
}

static int main_set_key_file(const struct opts_opt *o, void *ctx,
			     const char *arg)
{
	struct main_opts *m = ctx;

	if (m->n_key_files == AUTH_KEYS_MAX)
		return opts_usage_err(&main_spec, "--key-file: at most %d",
				      AUTH_KEYS_MAX);
	m->key_files[m->n_key_files++] = arg;
	return 0;
}

/* --check, and --repair, which implies it. */
static int main_set_check(const struct opts_opt *o, void *ctx, const char *arg)
{
	struct main_opts *m = ctx;

	m->check = true;
	if (!strcmp(o->name, "repair"))
		m->repair = true;
	return 0;
}

static int main_set_data_dir(const struct opts_opt *o, void *ctx,
			     const char *arg)
{
	struct main_opts *m = ctx;

	if (!*arg)
		return opts_usage_err(&main_spec, "--data-dir: empty");
	m->ccfg.data_dir = arg;
	m->data_dir_set = true;
	return 0;
}

/* --store wal (the data directory) or etcd://HOST:PORT[,HOST:PORT...]. */
static int main_set_store(const struct opts_opt *o, void *ctx, const char *arg)
{
	struct main_opts *m = ctx;

	if (!strcmp(arg, "wal")) {
		m->ccfg.etcd = NULL;
		return 0;
	}
	if (strncmp(arg, "etcd://", 7) || !arg[7])
		return opts_usage_err(&main_spec,
				      "--store: wal or "
				      "etcd://HOST:PORT[,HOST:PORT...], not "
				      "'%s'",
				      arg);
	m->ccfg.etcd = arg + 7;
	return 0;
}

static int main_set_import(const struct opts_opt *o, void *ctx, const char *arg)
{
	struct main_opts *m = ctx;

	if (!*arg)
		return opts_usage_err(&main_spec, "--import: empty");
	m->import = arg;
	return 0;
}

static int main_set_etcd_prefix(const struct opts_opt *o, void *ctx,
				const char *arg)
{
	struct main_opts *m = ctx;

	if (!*arg || strlen(arg) >= COORD_ETCD_PREFIX_MAX)
		return opts_usage_err(&main_spec,
				      "--etcd-prefix: 1 to %u bytes",
				      COORD_ETCD_PREFIX_MAX - 1);
	m->ccfg.etcd_prefix = arg;
	return 0;
}

static int main_set_log_level(const struct opts_opt *o, void *ctx,
			      const char *arg)
{
	struct main_opts *m = ctx;

	if (log_level_parse(arg, &m->level))
		return opts_usage_err(&main_spec,
				      "--log-level: unknown level '%s'", arg);
	return 0;
}

#define MAIN_OFF(m) offsetof(struct main_opts, m)
#define O_FN(name, arg, fn, help)                          \
	{                                                  \
		name, 0, arg, help, OPTS_K_FN, fn, 0, 0, 0 \
	}
#define O_NUM(name, fn, mem, lo, hi, help)                                \
	{                                                                 \
		name, 0, "MS", help, OPTS_K_FN, fn, MAIN_OFF(mem), lo, hi \
	}

/* The defaults the help names, checked against the code's. */
_Static_assert(COORD_LEASE_MS_DEFAULT == 5000, "--lease-ms help");
_Static_assert(COORD_SYNC_MS_DEFAULT == 10000, "--sync-timeout-ms help");
_Static_assert(COORD_GRANT_TTL_MS_MIN == 10000 &&
		       COORD_GRANT_TTL_MS_DEFAULT == 600000 &&
		       MAIN_LEASE_MS_MAX == 86400000,
	       "--grant-ttl-ms help");
_Static_assert(COORD_SNAPSHOT_EVERY_DEFAULT == 1000, "--snapshot-every help");
_Static_assert(COORD_LEADER_TTL_S_DEFAULT == 3 && COORD_LEADER_TTL_S_MAX == 60,
	       "--leader-ttl help");
_Static_assert(MAIN_EXIT_DATA == 3, "--check help and the epilog");

/* Every option of farpage-coordinator, in the order --help lists them. */
static const struct opts_opt main_opt_table[] = {
	{ "listen", 0, "ADDR",
	  "control address host:port; port 0 picks a free one "
	  "(default " MAIN_LISTEN_DEFAULT ")",
	  OPTS_K_STR, NULL, MAIN_OFF(scfg.listen_addr), 0, 0 },
	{ "addr-file", 0, "FILE",
	  "write the bound host:port to FILE once listening (default: none; "
	  "with --metrics-listen, a second line \"metrics host:port\")",
	  OPTS_K_STR, NULL, MAIN_OFF(scfg.addr_file), 0, 0 },
	{ "metrics-listen", 0, "ADDR",
	  "serve Prometheus /metrics on host:port (default: off; port 0 picks "
	  "a free one; \"\": off)",
	  OPTS_K_STR_NULL, NULL, MAIN_OFF(scfg.metrics_listen), 0, 0 },
	{ "metrics-token-file", 0, "FILE",
	  "answer /metrics only to requests with \"Authorization: Bearer "
	  "TOKEN\", TOKEN the file's first line (default: none)",
	  OPTS_K_STR_NULL, NULL, MAIN_OFF(scfg.metrics_token_file), 0, 0 },
	O_FN("data-addr-check", "warn|strict", main_set_data_addr_check,
	     "a node's data address other than the one it connects from: "
	     "taken and logged, or refused (default warn)"),
	O_FN("data-dir", "DIR", main_set_data_dir,
	     "log and snapshot, created if missing "
	     "(default " MAIN_DATA_DIR_DEFAULT "; unused with --store "
	     "etcd://...)"),
	O_FN("store", "URL", main_set_store,
	     "where the tables are kept: wal, the log and snapshot of "
	     "--data-dir (default), or etcd://HOST:PORT[,HOST:PORT...], in "
	     "etcd under --etcd-prefix, where several coordinators may run: "
	     "one elected leads, the others serve reads"),
	O_FN("etcd-prefix", "PREFIX", main_set_etcd_prefix,
	     "with --store etcd://...: the prefix of every key "
	     "(default " COORD_ETCD_PREFIX_DEFAULT ")"),
	{ "etcd-cacert", 0, "FILE",
	  "with --store etcd://...: speak TLS to etcd (https), its members' "
	  "certificates verified against this CA bundle",
	  OPTS_K_STR_NULL, NULL, MAIN_OFF(ccfg.etcd_ca), 0, 0 },
	{ "etcd-cert", 0, "FILE",
	  "with --etcd-cacert: this coordinator's client certificate (PEM), "
	  "for members that ask clients for one; with --etcd-key",
	  OPTS_K_STR_NULL, NULL, MAIN_OFF(ccfg.etcd_cert), 0, 0 },
	{ "etcd-key", 0, "FILE", "the key of --etcd-cert (PEM)",
	  OPTS_K_STR_NULL, NULL, MAIN_OFF(ccfg.etcd_key), 0, 0 },
	{ "etcd-user", 0, "USER",
	  "with --store etcd://...: authenticate to etcd as USER (etcd's "
	  "auth enabled), the password from --etcd-password-file",
	  OPTS_K_STR_NULL, NULL, MAIN_OFF(ccfg.etcd_user), 0, 0 },
	{ "etcd-password-file", 0, "FILE",
	  "the password of --etcd-user: the file's first line (never on the "
	  "command line)",
	  OPTS_K_STR_NULL, NULL, MAIN_OFF(ccfg.etcd_password_file), 0, 0 },
	{ "etcd-keep-history", 0, NULL,
	  "with --store etcd://...: leave etcd's history alone (by default "
	  "the leader compacts it, etcd-wide, up to the snapshot before its "
	  "last one): for an etcd shared with others that compact it",
	  OPTS_K_TRUE, NULL, MAIN_OFF(ccfg.etcd_keep_history), 0, 0 },
	{ "leader-ttl", 0, "S",
	  "with --store etcd://...: the leader's etcd lease; a leader that "
	  "cannot renew it stops leading before it ends, and another leads "
	  "after it (1..60, default 3)",
	  OPTS_K_FN, main_set_uint, MAIN_OFF(ccfg.leader_ttl_s), 1,
	  COORD_LEADER_TTL_S_MAX },
	O_NUM("lease-ms", main_set_u64, ccfg.lease_ms, 1, MAIN_LEASE_MS_MAX,
	      "a node is down MS ms after its last heartbeat (default 5000)"),
	O_NUM("sync-timeout-ms", main_set_u64, ccfg.sync_timeout_ms, 1,
	      MAIN_LEASE_MS_MAX,
	      "a node up must report a region epoch synced MS ms after it "
	      "was made; one that does not is counted down (not waited for "
	      "by deletes and rebuilds) until it does (default 10000)"),
	O_NUM("grant-ttl-ms", main_set_u64, ccfg.grant_ttl_ms,
	      COORD_GRANT_TTL_MS_MIN, MAIN_LEASE_MS_MAX,
	      "grants to read or write another node's pool hold MS ms after "
	      "they are issued (10000..86400000, default 600000)"),
	O_NUM("frame-timeout-ms", main_set_uint, scfg.frame_timeout_ms, 1,
	      MAIN_LEASE_MS_MAX,
	      "close a connection that holds half a frame this long (default "
	      "10000)"),
	O_NUM("handshake-timeout-ms", main_set_uint, scfg.hs_timeout_ms, 1,
	      MAIN_LEASE_MS_MAX,
	      "close a connection not done with its handshake this long after "
	      "accept, a quarter of it while more than half the handshake "
	      "slots are taken (default 5000)"),
	{ "snapshot-every", 0, "N",
	  "snapshot after N log records (default 1000)", OPTS_K_FN,
	  main_set_u64, MAIN_OFF(ccfg.snapshot_every), 1, UINT32_MAX },
	O_FN("key-file", "FILE", main_set_key_file,
	     "the cluster key; twice during a key rollover, the new key first "
	     "(default: $FARPAGE_KEY_FILE, else /etc/farpage/cluster.key)"),
	{ "insecure", 0, NULL,
	  "no authentication at all; the whole cluster must run so "
	  "(benchmarks, trusted labs)",
	  OPTS_K_TRUE, NULL, MAIN_OFF(scfg.insecure), 0, 0 },
	O_FN("log-level", "LEVEL", main_set_log_level,
	     "err, warn, info or debug (default info)"),
	O_FN("check", NULL, main_set_check,
	     "read the data directory (DATA_DIR, else --data-dir), or with "
	     "--store etcd://... the tables in etcd, as start-up would, "
	     "report, change nothing, and exit: 0 clean, 3 problems found, 1 "
	     "could not check (a coordinator runs on it, nothing there)"),
	O_FN("import", "DATA_DIR", main_set_import,
	     "with --store etcd://...: copy the tables of DATA_DIR (read as "
	     "--check reads it, unchanged) into etcd under --etcd-prefix, "
	     "which must hold no key, report, and exit: 0 copied, 3 DATA_DIR "
	     "refused, 1 not copied (the prefix holds keys, etcd not "
	     "reached)"),
	O_FN("repair", NULL, main_set_check,
	     "with --check (implied): cut the log at its first bad record, "
	     "keeping the bytes cut in wal.<generation>.cut-<offset> beside "
	     "it; 0 if the directory is clean afterwards"),
	{ "help", 'h', NULL, "this text", OPTS_K_HELP, NULL, 0, 0, 0 },
	{ "version", 'V', NULL, "the version", OPTS_K_VERSION, NULL, 0, 0, 0 },
};

static const struct opts_spec main_spec = {
	.prog = "farpage-coordinator",
	.version = FARPAGE_VERSION,
	.synopsis = "Usage: farpage-coordinator [OPTIONS]\n"
		    "       farpage-coordinator --check [--repair] [DATA_DIR]\n"
		    "       farpage-coordinator --check --store etcd://... "
		    "[--etcd-prefix P]\n"
		    "       farpage-coordinator --import DATA_DIR --store "
		    "etcd://... [--etcd-prefix P]\n"
		    "\n"
		    "Keeps the cluster's nodes, regions and endpoints; every\n"
		    "change is logged to the data directory (or committed to\n"
		    "etcd, --store) before it is acknowledged.\n",
	.epilog = "Start-up cuts a torn last log record (logged with its\n"
		  "offset) and refuses any other damage to the data\n"
		  "directory with exit status 3.\n",
	.opts = main_opt_table,
	.n = sizeof(main_opt_table) / sizeof(main_opt_table[0]),
	.usage_status = MAIN_EXIT_USAGE,
};
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
 * Parses the command line into @o. Returns -1 to go on, or the exit status
 * (0 after --help or --version, MAIN_EXIT_USAGE for a bad command line).
 */
static int main_opts_parse(int argc, char **argv, struct main_opts *o)
{
	int ret = opts_parse(&main_spec, argc, argv, o);

	if (ret != OPTS_GO_ON)
		return ret;
	if (o->check && optind < argc) {
		if (!*argv[optind])
			return opts_usage_err(&main_spec, "DATA_DIR: empty");
		o->ccfg.data_dir = argv[optind++];
		o->data_dir_set = true;
	}
	if (optind < argc)
		return opts_usage_err(&main_spec, "unexpected argument '%s'",
				      argv[optind]);
	if ((o->ccfg.etcd_prefix || o->ccfg.leader_ttl_s || o->ccfg.etcd_ca ||
	     o->ccfg.etcd_cert || o->ccfg.etcd_key || o->ccfg.etcd_user ||
	     o->ccfg.etcd_password_file || o->ccfg.etcd_keep_history) &&
	    !o->ccfg.etcd)
		return opts_usage_err(&main_spec,
				      "--etcd-*, --leader-ttl: only with "
				      "--store etcd://...");
	if (!o->ccfg.etcd_cert != !o->ccfg.etcd_key ||
	    (o->ccfg.etcd_cert && !o->ccfg.etcd_ca))
		return opts_usage_err(&main_spec,
				      "--etcd-cert and --etcd-key go together, "
				      "with --etcd-cacert");
	if (!o->ccfg.etcd_user != !o->ccfg.etcd_password_file)
		return opts_usage_err(&main_spec,
				      "--etcd-user and --etcd-password-file go "
				      "together");
	if (o->import && (!o->ccfg.etcd || o->check || o->data_dir_set))
		return opts_usage_err(&main_spec,
				      "--import: with --store etcd://..., "
				      "without --check, --repair or "
				      "--data-dir");
	if (o->ccfg.etcd && (o->repair || (o->check && o->data_dir_set)))
		return opts_usage_err(&main_spec,
				      "--store etcd://... keeps no data "
				      "directory to check (DATA_DIR, "
				      "--data-dir, --repair)");
	if (o->ccfg.etcd && o->data_dir_set)
		o->data_dir_unused = o->ccfg.data_dir;
	if (o->ccfg.etcd)
		o->ccfg.data_dir = NULL;
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

/* --check --store etcd://...: reports on the tables in etcd. Returns the
 * exit status. */
static int main_check_etcd(const struct coord_cfg *cfg)
{
	const char *prefix =
		cfg->etcd_prefix ? cfg->etcd_prefix : COORD_ETCD_PREFIX_DEFAULT;
	struct coord_etcd_report rep;
	int ret;

	ret = coord_check_etcd(cfg, &rep);
	if (ret == -EBADMSG) {
		printf("problem: etcd at %s, prefix %s: start-up refuses the "
		       "tables (the error above says why)\n",
		       cfg->etcd, prefix);
		return MAIN_EXIT_DATA;
	}
	if (ret) {
		log_errno(ret, "cannot check etcd at %s", cfg->etcd);
		return 1;
	}
	if (!rep.found) {
		printf("etcd at %s, prefix %s: no tables (%smeta absent)\n",
		       cfg->etcd, prefix, prefix);
		return 1;
	}
	printf("etcd at %s, prefix %s, read at revision %lld: a snapshot "
	       "up to log record %llu, %llu log records after it\n",
	       cfg->etcd, prefix, (long long)rep.rev,
	       (unsigned long long)rep.snap_records,
	       (unsigned long long)rep.records);
	printf("tables: %u nodes, %u regions, %u endpoints\n", rep.nodes,
	       rep.regions, rep.endpoints);
	return 0;
}

/* Prints what the prefix @prefix of etcd at @etcd holds (@r). */
static void main_import_held(const char *etcd, const char *prefix,
			     const struct coord_import_report *r)
{
	printf("refused: etcd at %s, prefix %s, holds %lld keys (the first "
	       "%s)",
	       etcd, prefix, (long long)r->held, r->held_key);
	if (r->held_meta[0])
		printf(": the tables of another coordinator (%smeta: \"%s\")",
		       prefix, r->held_meta);
	printf("\n--import writes only under a prefix that holds no key: "
	       "another --etcd-prefix, or, if nothing there is wanted (no "
	       "coordinator runs on it), remove it first with\n"
	       "  etcdctl --endpoints %s del --prefix '%s'\n",
	       etcd, prefix);
}

/*
 * --import DATA_DIR --store etcd://...: copies the tables of DATA_DIR into
 * etcd. Returns the exit status.
 */
static int main_import(const char *dir, const struct coord_cfg *cfg)
{
	const char *prefix =
		cfg->etcd_prefix ? cfg->etcd_prefix : COORD_ETCD_PREFIX_DEFAULT;
	struct coord_import_report r;
	struct wal_report w;
	int ret;

	ret = coord_import(dir, cfg, &r, &w);
	if (ret == -EBADMSG && w.state == WAL_STATE_BAD) {
		main_report_print(dir, &w);
		printf("refused: nothing copied to etcd\n");
		return MAIN_EXIT_DATA;
	}
	if (ret == -EBADMSG && !r.written) {
		printf("refused: %s (the error above says why): nothing "
		       "copied to etcd\n",
		       dir);
		return MAIN_EXIT_DATA;
	}
	if (ret == -EEXIST) {
		main_import_held(cfg->etcd, prefix, &r);
		return 1;
	}
	if (ret == -EWOULDBLOCK) {
		printf("refused: a coordinator runs on %s: stop it first (its "
		       "tables would change after the copy)\n",
		       dir);
		return 1;
	}
	if (ret) {
		log_errno(ret, "cannot import %s into etcd at %s", dir,
			  cfg->etcd);
		if (r.written)
			printf("not copied whole: %smeta was made; remove the "
			       "prefix (etcdctl --endpoints %s del --prefix "
			       "'%s') before trying again\n",
			       prefix, cfg->etcd, prefix);
		return 1;
	}
	if (w.state == WAL_STATE_TORN)
		printf("%s/wal ends in a torn record (never acknowledged), "
		       "left out as start-up leaves it out\n",
		       dir);
	printf("imported %s into etcd at %s, prefix %s, cluster id "
	       "%016llx%s\n",
	       dir, cfg->etcd, prefix, (unsigned long long)r.cid,
	       r.cid_made ? " (new: the directory had none)" : "");
	printf("tables: %u nodes, %u regions, %u endpoints\n", r.nodes,
	       r.regions, r.endpoints);
	printf("copied: a snapshot of %llu records, %llu bytes; read back "
	       "the same\n",
	       (unsigned long long)r.records, (unsigned long long)r.bytes);
	return 0;
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
	if (o.import)
		return main_import(o.import, &o.ccfg);
	if (o.data_dir_unused)
		log_info("--data-dir %s: not used, the tables are in etcd",
			 o.data_dir_unused);
	if (o.check && o.ccfg.etcd)
		return main_check_etcd(&o.ccfg);
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
		log_errno(ret, "cannot recover the state from %s%s",
			  o.ccfg.etcd ? "etcd at " : "",
			  o.ccfg.etcd ? o.ccfg.etcd : o.ccfg.data_dir);
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
