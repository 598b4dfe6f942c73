// SPDX-License-Identifier: MIT
/*
 * farpage migrate: moves a running VM (farpage vm --movable) to a QEMU
 * waiting on another host (farpage vm ... -incoming defer) without copying
 * its RAM. The RAM stays in the region: QEMU sends the device state only
 * (capability x-ignore-shared: a shared file backend's RAM is left out of
 * the stream), and the region's write lease is handed over once the
 * source has stopped for good.
 *
 *   both         migrate-set-capabilities x-ignore-shared
 *   destination  migrate-incoming URI
 *   source host  pre-flush: the agent sends the region's written pages
 *                home while the VM runs, so that little is left; then
 *                once more, and its clean pages leave the cache
 *                (FLUSH_DROP), so that the hand-over has few to take
 *   source       migrate URI, then wait for completed (its vCPUs
 *                stopped, its devices quiesced and their state sent)
 *   source host  HANDOVER: what was written since goes home, the
 *                mapping's pages leave QEMU, the lease goes back;
 *                failure: cont, the source runs on
 *   destination  wait for running; its first touch of the RAM waits for
 *                the lease and takes it, so the hand-over runs while it
 *                loads the device state and starts, not in QEMU's
 *                downtime
 *   source       quit
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli_qmp.h"
#include "evl.h"
#include "farpage.h"

static const char cli_migrate_usage[] =
	"usage: farpage migrate [--pre-flush N] [--keep-cache] "
	"[--keep-source]\n"
	"                       [--switchover-timeout S] REGION SOURCE_QMP\n"
	"                       DEST_QMP URI\n"
	"\n"
	"Moves the VM whose guest RAM is region REGION from its QEMU on this\n"
	"host (started by farpage vm --movable, its QMP monitor at "
	"SOURCE_QMP)\n"
	"to a QEMU on another host (started by farpage vm REGION -- ...\n"
	"-incoming defer, its monitor at DEST_QMP), which listens for the\n"
	"migration at URI (tcp:HOST:PORT). The RAM is not copied: QEMU sends\n"
	"the device state only, and the region's write lease is handed from\n"
	"this host's agent to the destination's once the source has stopped\n"
	"for good: the destination's guest waits for it at its first touch.\n"
	"A monitor address is a Unix socket path (or unix:PATH) or\n"
	"tcp:HOST:PORT.\n"
	"\n"
	"  --pre-flush N  before the migration, flush the region's written\n"
	"                 pages home up to N times while the VM runs, until\n"
	"                 a flush sends less than 1/16 of the one before\n"
	"                 (default 3; 0: none), then once more and drop the\n"
	"                 region's clean pages from this host's cache, so\n"
	"                 that the hand-over has only what the VM touched\n"
	"                 since to take back from QEMU (the VM fetches them\n"
	"                 again meanwhile)\n"
	"  --keep-cache   no drop after the pre-flush\n"
	"  --keep-source  leave the stopped source QEMU running (default:\n"
	"                 quit it once the destination runs)\n"
	"  --switchover-timeout S\n"
	"                 after the hand-over, the destination must run\n"
	"                 within S seconds (default 60); else the source\n"
	"                 QEMU runs again, and takes the region's lease back\n"
	"                 at its first touch of the RAM unless the\n"
	"                 destination took it (then the source stops with\n"
	"                 SIGBUS): one of the two runs, never both\n"
	"\n"
	"Prints the figures once the destination runs: total time and\n"
	"downtime (QEMU's: up to the stream's end), the migration stream's\n"
	"bytes, the pages sent home before and at the switch-over, the pages\n"
	"dropped before it, the hand-over's time, and the switch-over's: from\n"
	"the source's stop to the later of the destination's start and the\n"
	"hand-over's end. If the migration fails, it is cancelled and the\n"
	"source runs on (exit 1); so does a hand-over that fails (cont).\n"
	"Progress goes to standard error: one line kept up to date on a\n"
	"terminal, else a line per phase.\n";

#define MIG_QMP_TIMEOUT_MS 30000
#define MIG_POLL_MS	   2 /* QEMU's downtime counts our polls too */
#define MIG_WAIT_MS	   (10u * 60 * 1000) /* each phase, at most */
#define MIG_SWITCH_S	   60 /* --switchover-timeout's default */
#define MIG_HO_TRIES	   3
#define MIG_TOTAL_TRIES	   500 /* MIG_POLL_MS apart */

struct mig {
	const struct cli *c;
	const char *region, *uri;
	struct cli_qmp src, dst;
	int tty; /* progress on stderr: one line rewritten, or a line a phase */
	const char *phase;
	uint64_t t0_ms;
	uint64_t pre_pages, drop_pages, ho_pages, ho_ms;
	uint64_t ho_end_us; /* the hand-over's end, realtime */
	unsigned int pre_rounds;
	unsigned int switch_ms; /* --switchover-timeout */
	int keep, keep_cache;
};

static int mig_caps(struct cli_qmp *q)
{
	struct json_object *args = json_object_new_object(),
			   *caps = json_object_new_array(), *ret = NULL;
	/* events: a MIGRATION event wakes mig_wait() at each change */
	static const char *const names[] = { "x-ignore-shared", "events" };
	int err = -ENOMEM;

	if (!args || !caps)
		goto out;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		struct json_object *cap = json_object_new_object();

		if (fp_json_push(caps, cap) ||
		    fp_json_set_str(cap, "capability", names[i]) ||
		    fp_json_set_bool(cap, "state", 1))
			goto out;
	}
	if (fp_json_set(args, "capabilities", caps)) {
		caps = NULL;
		goto out;
	}
	caps = NULL;
	err = cli_qmp_cmd(q, "migrate-set-capabilities", args, &ret);
out:
	if (err == -ENOMEM)
		cli_err("migrate: out of memory");
	json_object_put(caps);
	json_object_put(args);
	json_object_put(ret);
	return err;
}

/* @cmd of @q with one string argument @key = @val. */
static int mig_cmd_str(struct cli_qmp *q, const char *cmd, const char *key,
		       const char *val)
{
	struct json_object *args = json_object_new_object(), *ret = NULL;
	int err;

	if (!args || fp_json_set_str(args, key, val)) {
		json_object_put(args);
		cli_err("migrate: out of memory");
		return -ENOMEM;
	}
	err = cli_qmp_cmd(q, cmd, args, &ret);
	json_object_put(args);
	json_object_put(ret);
	return err;
}

static void mig_progress(struct mig *m, const char *what, const char *status)
{
	if (!m->tty) {
		if (!m->phase || strcmp(m->phase, what))
			fprintf(stderr, "migrate: %s (%.1f s)\n", what,
				(double)(evl_now_ms() - m->t0_ms) / 1000.0);
		m->phase = what;
		return;
	}
	fprintf(stderr, "\rmigrate: %-28s %-16s %6.1f s ", what, status,
		(double)(evl_now_ms() - m->t0_ms) / 1000.0);
	fflush(stderr);
}

static void mig_progress_end(struct mig *m)
{
	if (m->tty)
		fputc('\n', stderr);
}

/*
 * Polls @q's @cmd until its status (member "status") is one of @want
 * ("a|b|"), or a failure ("failed", "cancelled"), until @end (ms of
 * evl_now_ms()). *@last: the last answer (json_object_put() it). Returns
 * 0, -EIO (failed), -ETIMEDOUT or the QMP error.
 */
static int mig_wait(struct mig *m, struct cli_qmp *q, const char *cmd,
		    const char *want, const char *what, uint64_t end,
		    struct json_object **last)
{
	struct timespec ts = { .tv_nsec = MIG_POLL_MS * 1000000L };
	char key[40];
	int err;

	*last = NULL;
	for (;;) {
		uint64_t now = evl_now_ms(), left = end > now ? end - now : 1;
		const char *st;

		json_object_put(*last);
		/* a QEMU that does not answer ends the wait at @end too */
		q->timeout_ms = left < MIG_QMP_TIMEOUT_MS ? (int)left
							  : MIG_QMP_TIMEOUT_MS;
		err = cli_qmp_cmd(q, cmd, NULL, last);
		q->timeout_ms = MIG_QMP_TIMEOUT_MS;
		if (err)
			return err;
		st = cli_qmp_str(*last, "status");
		mig_progress(m, what, st);
		snprintf(key, sizeof(key), "%s|", st);
		if (*st && strstr(want, key))
			return 0;
		if (!strcmp(st, "failed") || !strcmp(st, "cancelled")) {
			mig_progress_end(m);
			cli_err("migrate: %s QEMU: migration %s%s%s", q->who,
				st,
				*cli_qmp_str(*last, "error-desc") ? ": " : "",
				cli_qmp_str(*last, "error-desc"));
			return -EIO;
		}
		if (evl_now_ms() >= end) {
			mig_progress_end(m);
			cli_err("migrate: %s QEMU: %s: still '%s' after "
				"%.1f s",
				q->who, what, st,
				(double)(evl_now_ms() - m->t0_ms) / 1000.0);
			return -ETIMEDOUT;
		}
		/* an event (the status changed) ends the wait at once */
		if (cli_qmp_wait(q, MIG_POLL_MS) < 0)
			nanosleep(&ts, NULL);
	}
}

/* Flushes the region up to @rounds times while the VM runs. */
static int mig_pre_flush(struct mig *m, unsigned int rounds)
{
	struct farpage_stats s0, s1;
	uint64_t prev = UINT64_MAX;
	int err;

	if (!rounds)
		return 0;
	mig_progress(m, "pre-flush", "flushing");
	if (farpage_agent_stats(m->c->agent_sock, &s0))
		memset(&s0, 0, sizeof(s0));
	for (unsigned int i = 0; i < rounds; i++) {
		uint64_t n;

		mig_progress(m, "pre-flush", "flushing");
		err = farpage_agent_flush(m->c->agent_sock, m->region);
		if (err) {
			mig_progress_end(m);
			cli_err("migrate: pre-flush of region %s: %s",
				m->region, farpage_strerror(err));
			return err;
		}
		/* a round's counters after are the next one's before */
		if (farpage_agent_stats(m->c->agent_sock, &s1))
			s1 = s0;
		n = s1.cache_writebacks - s0.cache_writebacks;
		s0 = s1;
		m->pre_pages += n;
		if (!n || (prev != UINT64_MAX && n < prev / 16))
			break;
		prev = n;
	}
	if (m->keep_cache)
		return 0;
	/* What is clean leaves the cache: the hand-over, with the VM
	 * stopped, takes back from QEMU only what it touches from now. */
	mig_progress(m, "pre-flush", "dropping");
	err = farpage_agent_flush_drop(m->c->agent_sock, m->region,
				       &m->drop_pages);
	if (err) {
		mig_progress_end(m);
		cli_err("migrate: pre-flush of region %s: %s", m->region,
			farpage_strerror(err));
		return err;
	}
	if (!farpage_agent_stats(m->c->agent_sock, &s1))
		m->pre_pages += s1.cache_writebacks - s0.cache_writebacks;
	return 0;
}

/*
 * The hand-over failed, or ran but the destination does not run: the
 * source QEMU runs again (migrate_cancel before it completed; QEMU
 * restarts the vCPUs of a failed or cancelled migration itself; cont
 * after). Its first touch of the RAM takes the lease back unless the
 * destination took it in the meantime: then the source stops there
 * (SIGBUS) and the destination runs. The lease lets only one of them on.
 */
static void mig_resume_source(struct mig *m)
{
	struct json_object *st = NULL, *ret = NULL;
	const char *s;

	if (cli_qmp_cmd(&m->src, "query-migrate", NULL, &st)) {
		cli_err("migrate: the source QEMU does not answer: neither "
			"QEMU may run; the first to touch the RAM gets it");
		return;
	}
	s = cli_qmp_str(st, "status");
	if (!strcmp(s, "completed")) {
		if (!cli_qmp_cmd(&m->src, "cont", NULL, &ret))
			cli_err("migrate: the source QEMU runs again");
	} else if (strcmp(s, "failed") && strcmp(s, "cancelled")) {
		if (!cli_qmp_cmd(&m->src, "migrate_cancel", NULL, &ret))
			cli_err("migrate: cancelled; the source QEMU runs "
				"again");
	} else {
		cli_err("migrate: the migration %s: the source QEMU runs "
			"again",
			s);
	}
	cli_err("migrate: its first touch of the RAM takes the lease of "
		"region %s back, unless the destination took it: then the "
		"source stops there (SIGBUS) and the destination runs on",
		m->region);
	json_object_put(ret);
	json_object_put(st);
}

/* The switch-over's time in ms: from the source's STOP to the later of
 * the destination's RESUME and the hand-over's end (0: an event missed). */
static uint64_t mig_switchover_ms(const struct mig *m)
{
	uint64_t end = m->dst.resume_us > m->ho_end_us ? m->dst.resume_us
						       : m->ho_end_us;

	if (!m->src.stop_us || !m->dst.resume_us || end < m->src.stop_us)
		return 0;
	return (end - m->src.stop_us + 500) / 1000;
}

/*
 * After the hand-over: the destination must run within
 * --switchover-timeout, else the source runs again.
 */
static int mig_finish(struct mig *m, struct json_object **src)
{
	struct json_object *dst = NULL, *ret = NULL;
	int err;

	err = mig_wait(m, &m->dst, "query-status", "running|",
		       "destination starting", evl_now_ms() + m->switch_ms,
		       &dst);
	mig_progress_end(m);
	if (err) {
		cli_err("migrate: region %s was handed over, but the "
			"destination does not run",
			m->region);
		mig_resume_source(m);
		goto out;
	}
	/* QEMU says completed a moment before it has counted the totals
	 * (a MIGRATION event wakes us in between): asked again until it
	 * has */
	for (int i = 0; i < MIG_TOTAL_TRIES && !cli_qmp_u64(*src, "total-time");
	     i++) {
		struct timespec ts = { .tv_nsec = MIG_POLL_MS * 1000000L };

		nanosleep(&ts, NULL);
		json_object_put(*src);
		*src = NULL;
		if (cli_qmp_cmd(&m->src, "query-migrate", NULL, src))
			break;
	}
	if (!m->keep && cli_qmp_cmd(&m->src, "quit", NULL, &ret))
		cli_err("migrate: the source QEMU did not quit; it is "
			"stopped and its RAM mapping handed over");
	printf("migrate: ok region=%s total_ms=%llu downtime_ms=%llu "
	       "bytes=%llu preflush_pages=%llu predrop_pages=%llu "
	       "switchover_pages=%llu handover_ms=%llu switchover_ms=%llu "
	       "wall_ms=%llu\n",
	       m->region, (unsigned long long)cli_qmp_u64(*src, "total-time"),
	       (unsigned long long)cli_qmp_u64(*src, "downtime"),
	       (unsigned long long)cli_qmp_u64(*src, "ram.transferred"),
	       (unsigned long long)m->pre_pages,
	       (unsigned long long)m->drop_pages,
	       (unsigned long long)m->ho_pages, (unsigned long long)m->ho_ms,
	       (unsigned long long)mig_switchover_ms(m),
	       (unsigned long long)(evl_now_ms() - m->t0_ms));
out:
	json_object_put(dst);
	json_object_put(ret);
	return err;
}

/*
 * The source QEMU has stopped for good (completed: its devices quiesced,
 * their state sent): what it wrote since the pre-flush goes home, its
 * mapping's pages leave it, the lease goes back. The destination may be
 * loading the device state or running meanwhile; its first touch of the
 * RAM waits until it can take the lease.
 */
static int mig_handover(struct mig *m)
{
	struct timespec t;
	int err = 0;

	mig_progress(m, "hand-over", "flushing");
	m->ho_ms = evl_now_ms();
	/* -EAGAIN: written meanwhile (QEMU itself, its vCPUs stopped):
	 * nothing changed, the next try flushes it */
	for (int i = 0; i < MIG_HO_TRIES; i++) {
		uint64_t n = 0;

		err = farpage_agent_handover(m->c->agent_sock, m->region, &n);
		m->ho_pages += n;
		if (err != -EAGAIN)
			break;
	}
	m->ho_ms = evl_now_ms() - m->ho_ms;
	clock_gettime(CLOCK_REALTIME, &t);
	m->ho_end_us =
		(uint64_t)t.tv_sec * 1000000 + (uint64_t)t.tv_nsec / 1000;
	if (err) {
		mig_progress_end(m);
		cli_err("migrate: hand-over of region %s: %s", m->region,
			farpage_strerror(err));
	}
	return err;
}

static int mig_run(struct mig *m)
{
	struct json_object *st = NULL, *ret = NULL;
	int err;

	err = mig_caps(&m->src);
	if (!err)
		err = mig_caps(&m->dst);
	if (!err)
		err = mig_cmd_str(&m->dst, "migrate-incoming", "uri", m->uri);
	if (!err)
		err = mig_pre_flush(m, m->pre_rounds);
	if (!err)
		err = mig_cmd_str(&m->src, "migrate", "uri", m->uri);
	if (err)
		return err;
	err = mig_wait(m, &m->src, "query-migrate", "completed|",
		       "stream and device state", evl_now_ms() + MIG_WAIT_MS,
		       &st);
	if (err) {
		/* Not completed: the source holds the lease still */
		if (!cli_qmp_cmd(&m->src, "migrate_cancel", NULL, &ret))
			cli_err("migrate: cancelled; the source runs on");
		goto out;
	}
	err = mig_handover(m);
	if (err) {
		/* The lease is the source's still (or goes back to it at
		 * its first touch, unless the destination took it) */
		mig_resume_source(m);
		goto out;
	}
	err = mig_finish(m, &st);
out:
	json_object_put(st);
	json_object_put(ret);
	return err;
}

int cli_migrate_run(const struct cli *c, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "pre-flush", required_argument, NULL, 'f' },
		{ "keep-cache", no_argument, NULL, 'c' },
		{ "keep-source", no_argument, NULL, 'k' },
		{ "switchover-timeout", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct mig *m;
	uint64_t pre = 3, sw = MIG_SWITCH_S;
	int keep = 0, keep_cache = 0, ret;

	while ((ret = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (ret) {
		case 'f':
			if (cli_opt_u64(cli_migrate_usage, "--pre-flush",
					optarg, &pre))
				return CLI_EXIT_USAGE;
			if (pre > 100)
				return cli_usage_err(cli_migrate_usage,
						     "migrate: --pre-flush: "
						     "'%s' is not 0 to 100",
						     optarg);
			break;
		case 'k':
			keep = 1;
			break;
		case 'c':
			keep_cache = 1;
			break;
		case 't':
			if (cli_opt_u64(cli_migrate_usage,
					"--switchover-timeout", optarg, &sw))
				return CLI_EXIT_USAGE;
			if (!sw || sw > 3600)
				return cli_usage_err(cli_migrate_usage,
						     "migrate: "
						     "--switchover-timeout: "
						     "'%s' is not 1 to 3600 "
						     "seconds",
						     optarg);
			break;
		case 'h':
			fputs(cli_migrate_usage, stdout);
			return CLI_EXIT_OK;
		default:
			return cli_getopt_err(cli_migrate_usage, "migrate", ret,
					      argv);
		}
	}
	if (argc - optind != 4)
		return cli_usage_err(cli_migrate_usage,
				     "migrate: REGION SOURCE_QMP DEST_QMP URI "
				     "expected");
	m = calloc(1, sizeof(*m));
	if (!m) {
		cli_err("migrate: out of memory");
		return CLI_EXIT_FAIL;
	}
	m->c = c;
	m->region = argv[optind];
	m->uri = argv[optind + 3];
	m->tty = isatty(2);
	m->t0_ms = evl_now_ms();
	m->pre_rounds = (unsigned int)pre;
	m->switch_ms = (unsigned int)sw * 1000;
	m->keep = keep;
	m->keep_cache = keep_cache;
	ret = cli_qmp_open(&m->src, argv[optind + 1], "source",
			   MIG_QMP_TIMEOUT_MS);
	if (!ret) {
		ret = cli_qmp_open(&m->dst, argv[optind + 2], "destination",
				   MIG_QMP_TIMEOUT_MS);
		if (!ret)
			ret = mig_run(m);
		cli_qmp_close(&m->dst);
		cli_qmp_close(&m->src);
	}
	free(m);
	return ret ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
