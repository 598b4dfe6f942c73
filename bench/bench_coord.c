// SPDX-License-Identifier: MIT
/*
 * bench_coord: the coordinator's own figures, its WAL store (--data-dir)
 * against etcd (--store etcd://) in one run: region create latency,
 * heartbeats per second, the time a second coordinator on etcd takes to
 * acknowledge a change after the leader is killed -9, and (--scale) CPU,
 * memory and store size with many nodes and regions. It starts its own
 * etcd members and coordinators (--insecure, 127.0.0.1, free ports) with
 * the integration tests' starters (tests/integration/t_coord.h, t_etcd.h)
 * and speaks the control protocol itself, as those tests do.
 */
#include <errno.h>
#include <fts.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "bench_coord.h"
#include "ctl.h"
#include "msg.h"
#include "net.h"
#include "t_coord.h"
#include "t_etcd.h"

/* nodes stay up while the bench is busy */
#define BENCH_COORD_LEASE_MS  "600000"
#define BENCH_COORD_ROUND_MAX 64
#define BENCH_COORD_TTL_MAX   8

static const char bench_coord_about[] =
	"The coordinator with its WAL store (--data-dir) and with etcd\n"
	"(--store etcd://, members started here on etcd's LAN timings:\n"
	"--election-timeout 500 --heartbeat-interval 50), in one run. Lines:\n"
	"  coord_create: store=S n=N p50_ms p99_ms max_ms mean_ms\n"
	"  coord_heartbeat: store=S nodes=K conns=C secs heartbeats\n"
	"                   heartbeats_per_s\n"
	"  coord_failover: ttl_s=T round=R ms=X (leader killed -9 to a\n"
	"                  change acknowledged by the other coordinator)\n"
	"  coord_scale: store=S nodes regions join_secs create_secs\n"
	"               heartbeats_per_s cpu_secs cpu_busy rss_kb hwm_kb\n"
	"               store_bytes (with --scale)\n"
	"Figures only: nothing here passes or fails on time.\n";

/* What one run sets up and measures. */
struct bench_coord {
	uint64_t creates;
	uint64_t nodes;
	uint64_t conns;
	double hb_secs;
	unsigned int ttls[BENCH_COORD_TTL_MAX], n_ttls;
	uint64_t rounds;
	uint64_t members;
	uint64_t scale_nodes;
	uint64_t scale_regions;
	double scale_secs;
	int scale;
	int quick;
	struct t_etcd ec;
	char store[300];
	unsigned int
		prefix_n; /* a fresh etcd prefix for each coordinator set */
	/* the coordinators running now, for the signal thread (bench_coord_sig) */
	struct t_coord *volatile coords[2];
	struct bench_out *out;
};

static const char *const bench_coord_stores[] = { "wal", "etcd" };

/* The store's name, "wal" or "etcd", from @etcd. */
static const char *bench_coord_store_name(int etcd)
{
	return bench_coord_stores[etcd ? 1 : 0];
}

/*
 * Starts coordinator @tc on the WAL store, or on etcd under a fresh
 * prefix if @etcd, with @ttl (0: the default) as --leader-ttl. Returns 0
 * or -1 (said).
 */
static int bench_coord_start(struct bench_coord *b, struct t_coord *tc,
			     int etcd, unsigned int ttl, const char *prefix)
{
	char ttl_s[16];
	const char *extra[10] = { "--lease-ms", BENCH_COORD_LEASE_MS,
				  "--log-level", "warn" };
	int n = 4;

	tc->store = etcd ? b->store : NULL;
	if (etcd) {
		extra[n++] = "--etcd-prefix";
		extra[n++] = prefix;
	}
	if (etcd && ttl) {
		snprintf(ttl_s, sizeof(ttl_s), "%u", ttl);
		extra[n++] = "--leader-ttl";
		extra[n++] = ttl_s;
	}
	extra[n] = NULL;
	if (t_coord_start(tc, extra)) {
		fprintf(stderr,
			"bench_coord: the %s coordinator did not start\n",
			bench_coord_store_name(etcd));
		return -1;
	}
	return 0;
}

/* A fresh etcd prefix into @buf. */
static void bench_coord_prefix(struct bench_coord *b, char *buf, size_t len)
{
	snprintf(buf, len, "/bench-coord-%d-%u/", (int)getpid(), b->prefix_n++);
}

static double bench_coord_ms(uint64_t ns)
{
	return (double)ns / 1e6;
}

/*
 * N creates on @fd, each placed on nodes @pl[0..1], timed one by one;
 * between them (not timed) the two heartbeat once a second, as agents do.
 */
static int bench_coord_creates(struct bench_coord *b, int fd, int etcd,
			       struct bench_coord_node *pl)
{
	uint64_t *lat = calloc(b->creates, sizeof(*lat));
	uint64_t ids[2] = { pl[0].id, pl[1].id }, beat = 0;
	struct bench_lat st;
	char name[MSG_NAME_MAX];

	if (!lat)
		return -ENOMEM;
	for (uint64_t i = 0; i < b->creates; i++) {
		uint64_t t0 = bench_ns();

		if (t0 - beat >= 1000000000ull) {
			if (bench_coord_heartbeat(fd, &pl[0]) ||
			    bench_coord_heartbeat(fd, &pl[1])) {
				free(lat);
				return -1;
			}
			beat = t0 = bench_ns();
		}
		snprintf(name, sizeof(name), "bc-%" PRIu64, i);
		if (bench_coord_create(fd, name, ids, 2)) {
			free(lat);
			return -1;
		}
		lat[i] = bench_ns() - t0;
	}
	bench_lat_summary(lat, b->creates, &st);
	free(lat);
	bench_out_begin(b->out, "coord_create");
	bench_out_str(b->out, "store", bench_coord_store_name(etcd));
	bench_out_u64(b->out, "n", st.n);
	bench_out_dbl(b->out, "p50_ms", bench_coord_ms(st.p50));
	bench_out_dbl(b->out, "p99_ms", bench_coord_ms(st.p99));
	bench_out_dbl(b->out, "max_ms", bench_coord_ms(st.max));
	bench_out_dbl(b->out, "mean_ms", st.mean / 1e6);
	bench_out_end(b->out);
	return 0;
}

/* One store's creates and heartbeats, on a coordinator of its own. */
static int bench_coord_store_run(struct bench_coord *b, int etcd)
{
	struct bench_coord_hbrun r = { .n = b->nodes,
				       .conns = b->conns,
				       .secs = b->hb_secs };
	struct bench_coord_node pl[2] = { { .inst = 0xa1 }, { .inst = 0xb2 } };
	char prefix[64];
	struct t_coord tc;
	int fd = -1, ret = -1;

	if (t_coord_init(&tc, "bench_coord") != T_PASS)
		return -1;
	b->coords[0] = &tc;
	bench_coord_prefix(b, prefix, sizeof(prefix));
	if (bench_coord_start(b, &tc, etcd, 0, prefix))
		goto out;
	fd = t_connect(&tc);
	if (fd < 0 || bench_coord_join(fd, "place-a", 7901, &pl[0]) ||
	    bench_coord_join(fd, "place-b", 7902, &pl[1]) ||
	    bench_coord_creates(b, fd, etcd, pl))
		goto out;
	r.addr = tc.addr;
	if (bench_coord_hb_drive(&r))
		goto out;
	bench_out_begin(b->out, "coord_heartbeat");
	bench_out_str(b->out, "store", bench_coord_store_name(etcd));
	bench_out_u64(b->out, "nodes", b->nodes);
	bench_out_u64(b->out, "conns", r.conns < r.n ? r.conns : r.n);
	bench_out_dbl(b->out, "secs", r.secs_run);
	bench_out_u64(b->out, "heartbeats", (uint64_t)(r.rate * r.secs_run));
	bench_out_dbl(b->out, "heartbeats_per_s", r.rate);
	bench_out_end(b->out);
	ret = 0;
out:
	if (fd >= 0)
		close(fd);
	t_coord_fini(&tc, ret);
	b->coords[0] = NULL;
	return ret;
}

/*
 * Kills the leader @lead -9 and asks for a change, alternating between
 * its address and the follower's until one acknowledges; the ms from the
 * kill to the acknowledgement into *ms. Returns 0 or -1 (said).
 */
static int bench_coord_failover_time(struct t_coord *lead, struct t_coord *fol,
				     uint64_t node, double *ms)
{
	const char *addr[2] = { lead->addr, fol->addr };
	uint64_t t0, deadline;
	int ret = -1, k = 0;

	t0 = bench_ns();
	kill(lead->pid, SIGKILL);
	deadline = t0 + 60ull * 1000000000ull;
	while (bench_ns() < deadline) {
		ret = bench_coord_change_once(addr[k], node,
					      1 + bench_ns() % 0x7ffffffe);
		if (!ret)
			break;
		k ^= 1;
		if (!k)
			t_sleep_ms(10);
	}
	*ms = bench_coord_ms(bench_ns() - t0);
	t_coord_stop(lead, SIGKILL);
	if (ret)
		fprintf(stderr,
			"bench_coord: no change acknowledged %.0f ms after "
			"the kill: %s\n",
			*ms, strerror(-ret));
	return ret ? -1 : 0;
}

/*
 * One failover round with --leader-ttl @ttl: two coordinators on a fresh
 * prefix, the first leading (a change acknowledged), the second following
 * (its own change refused); the leader killed -9. Returns 0 or -1.
 */
static int bench_coord_failover_round(struct bench_coord *b, unsigned int ttl,
				      double *ms)
{
	struct t_coord tc[2];
	struct bench_coord_node node = { .inst = 0xf0 };
	char prefix[64];
	int fd = -1, ret = -1, r;

	if (t_coord_init(&tc[0], "bench_coord") != T_PASS)
		return -1;
	if (t_coord_init(&tc[1], "bench_coord") != T_PASS) {
		t_coord_fini(&tc[0], 0);
		return -1;
	}
	b->coords[0] = &tc[0];
	b->coords[1] = &tc[1];
	bench_coord_prefix(b, prefix, sizeof(prefix));
	if (bench_coord_start(b, &tc[0], 1, ttl, prefix))
		goto out;
	fd = t_connect(&tc[0]);
	/* t_call asks again until it leads */
	if (fd < 0 || bench_coord_join(fd, "fo", 7903, &node))
		goto out;
	close(fd);
	fd = -1;
	if (bench_coord_start(b, &tc[1], 1, ttl, prefix))
		goto out;
	r = bench_coord_change_once(tc[1].addr, node.id, 1);
	if (r != -COORD_ERR_NOT_LEADER) {
		fprintf(stderr,
			"bench_coord: the second coordinator does not follow: "
			"%s\n",
			r ? strerror(-r) : "it acknowledged a change");
		goto out;
	}
	ret = bench_coord_failover_time(&tc[0], &tc[1], node.id, ms);
out:
	if (fd >= 0)
		close(fd);
	t_coord_fini(&tc[0], ret);
	t_coord_fini(&tc[1], ret);
	b->coords[0] = b->coords[1] = NULL;
	return ret;
}

static int bench_coord_failover(struct bench_coord *b)
{
	double ms;

	for (unsigned int i = 0; i < b->n_ttls; i++) {
		for (uint64_t r = 0; r < b->rounds; r++) {
			if (bench_coord_failover_round(b, b->ttls[i], &ms))
				return -1;
			bench_out_begin(b->out, "coord_failover");
			bench_out_u64(b->out, "ttl_s", b->ttls[i]);
			bench_out_u64(b->out, "round", r);
			bench_out_dbl(b->out, "ms", ms);
			bench_out_end(b->out);
		}
	}
	return 0;
}

/* VmRSS and VmHWM of @pid in kB (0 if unknown). */
static void bench_coord_rss_kb(pid_t pid, uint64_t *rss, uint64_t *hwm)
{
	char path[64], line[256];
	unsigned long long v;
	FILE *f;

	*rss = *hwm = 0;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "VmRSS: %llu", &v) == 1)
			*rss = v;
		else if (sscanf(line, "VmHWM: %llu", &v) == 1)
			*hwm = v;
	}
	fclose(f);
}

/* Bytes on disk under @dir (0 if it cannot be read). */
static uint64_t bench_coord_du(const char *dir)
{
	char *paths[] = { (char *)dir, NULL };
	uint64_t sum = 0;
	FTSENT *e;
	FTS *fts;

	fts = fts_open(paths, FTS_PHYSICAL | FTS_NOCHDIR, NULL);
	if (!fts)
		return 0;
	while ((e = fts_read(fts)))
		if (e->fts_info == FTS_F)
			sum += (uint64_t)e->fts_statp->st_blocks * 512;
	fts_close(fts);
	return sum;
}

/* A growing buffer for a curl answer. */
struct bench_coord_body {
	char *p;
	size_t len;
};

static size_t bench_coord_body_add(char *p, size_t s, size_t n, void *arg)
{
	struct bench_coord_body *b = arg;
	char *q;

	if (b->len + s * n > (64u << 20))
		return 0;
	q = realloc(b->p, b->len + s * n + 1);
	if (!q)
		return 0;
	memcpy(q + b->len, p, s * n);
	b->p = q;
	b->len += s * n;
	b->p[b->len] = '\0';
	return s * n;
}

/* etcd's etcd_mvcc_db_total_size_in_bytes from @url's /metrics; 0 if it
 * cannot be read. */
static uint64_t bench_coord_etcd_db_bytes(const char *url)
{
	static const char key[] = "\netcd_mvcc_db_total_size_in_bytes ";
	struct bench_coord_body body = { 0 };
	char full[128];
	uint64_t v = 0;
	CURL *h = curl_easy_init();
	const char *at;
	CURLcode r;

	if (!h)
		return 0;
	snprintf(full, sizeof(full), "%s/metrics", url);
	curl_easy_setopt(h, CURLOPT_URL, full);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, bench_coord_body_add);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, (void *)&body);
	r = curl_easy_perform(h);
	curl_easy_cleanup(h);
	if (r == CURLE_OK && body.p && (at = strstr(body.p, key)))
		v = (uint64_t)strtod(at + sizeof(key) - 1, NULL);
	free(body.p);
	return v;
}

/* The scale run's creates, while the nodes heartbeat. */
struct bench_coord_scale_work {
	const char *addr;
	uint64_t regions;
	double secs;
};

static int bench_coord_scale_creates(void *arg)
{
	struct bench_coord_scale_work *w = arg;
	char name[MSG_NAME_MAX];
	uint64_t t0 = bench_ns();
	int fd, ret = 0;

	if (net_connect(w->addr, T_CALL_MS, &fd))
		return -1;
	for (uint64_t i = 0; i < w->regions && !ret; i++) {
		snprintf(name, sizeof(name), "sc-%" PRIu64, i);
		ret = bench_coord_create(fd, name, NULL, 0);
	}
	close(fd);
	w->secs = (double)(bench_ns() - t0) / 1e9;
	return ret ? -1 : 0;
}

static void bench_coord_scale_out(struct bench_coord *b, int etcd,
				  const struct bench_coord_hbrun *r,
				  const struct bench_coord_scale_work *w,
				  pid_t pid, uint64_t store_bytes)
{
	uint64_t rss, hwm;

	bench_coord_rss_kb(pid, &rss, &hwm);
	bench_out_begin(b->out, "coord_scale");
	bench_out_str(b->out, "store", bench_coord_store_name(etcd));
	bench_out_u64(b->out, "nodes", r->n);
	bench_out_u64(b->out, "regions", w->regions);
	bench_out_dbl(b->out, "join_secs", r->join_secs);
	bench_out_dbl(b->out, "create_secs", w->secs);
	bench_out_dbl(b->out, "creates_per_s",
		      w->secs > 0 ? (double)w->regions / w->secs : 0);
	bench_out_dbl(b->out, "secs", r->secs_run);
	bench_out_dbl(b->out, "heartbeats_per_s", r->rate);
	bench_out_dbl(b->out, "cpu_secs", (double)r->cpu_ns / 1e9);
	bench_out_dbl(b->out, "cpu_busy",
		      r->secs_run > 0 ? (double)r->cpu_ns / 1e9 / r->secs_run
				      : 0);
	bench_out_u64(b->out, "rss_kb", rss);
	bench_out_u64(b->out, "hwm_kb", hwm);
	bench_out_u64(b->out, "store_bytes", store_bytes);
	bench_out_end(b->out);
}

/*
 * Scale: --scale-nodes nodes join and heartbeat once a second each while
 * --scale-regions regions are created; the coordinator's CPU time over
 * it, its memory after, and the store's size: the WAL's data directory
 * on disk; etcd's database (etcd_mvcc_db_total_size_in_bytes, which
 * holds every earlier part of the run too, under other prefixes).
 */
static int bench_coord_scale(struct bench_coord *b, int etcd)
{
	struct bench_coord_scale_work w = { .regions = b->scale_regions };
	struct bench_coord_hbrun r = { .n = b->scale_nodes,
				       .conns = 4,
				       .period_ns = 1000000000ull,
				       .secs = b->scale_secs,
				       .work = bench_coord_scale_creates,
				       .arg = &w };
	char prefix[64];
	struct t_coord tc;
	int ret = -1;

	if (t_coord_init(&tc, "bench_coord") != T_PASS)
		return -1;
	b->coords[0] = &tc;
	bench_coord_prefix(b, prefix, sizeof(prefix));
	if (bench_coord_start(b, &tc, etcd, 0, prefix))
		goto out;
	r.addr = w.addr = tc.addr;
	r.pid = tc.pid;
	if (bench_coord_hb_drive(&r))
		goto out;
	bench_coord_scale_out(b, etcd, &r, &w, tc.pid,
			      etcd ? bench_coord_etcd_db_bytes(b->ec.url[0])
				   : bench_coord_du(tc.data));
	ret = 0;
out:
	t_coord_fini(&tc, ret);
	b->coords[0] = NULL;
	return ret;
}

/*
 * Every exit path cleans up: the coordinators and etcd members die with
 * this process (PR_SET_PDEATHSIG); on SIGINT, SIGTERM or SIGHUP a thread
 * of its own kills them first, removes their folders and exits 128+sig.
 */
struct bench_coord_sig {
	sigset_t set;
	struct bench_coord *b;
	char root[PATH_MAX]; /* every coordinator's folder is in it */
};

static void bench_coord_rm_tree(const char *dir)
{
	if (dir[0])
		nftw(dir, t_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void *bench_coord_sig_run(void *arg)
{
	struct bench_coord_sig *g = arg;
	int sig = 0;

	if (sigwait(&g->set, &sig))
		return NULL;
	for (int i = 0; i < 2; i++)
		if (g->b->coords[i] && g->b->coords[i]->pid > 0)
			kill(g->b->coords[i]->pid, SIGKILL);
	for (int i = 0; i < g->b->ec.n; i++)
		if (g->b->ec.pid[i] > 0)
			kill(g->b->ec.pid[i], SIGKILL);
	/* give them a moment to go before their folders do */
	t_sleep_ms(200);
	bench_coord_rm_tree(g->root);
	bench_coord_rm_tree(g->b->ec.dir);
	_exit(128 + sig);
}

/* Blocks the signals (every thread made after inherits it), makes the
 * root folder (TMPDIR for the coordinators) and the thread. */
static int bench_coord_sig_init(struct bench_coord_sig *g,
				struct bench_coord *b, pthread_t *th)
{
	const char *tmp = getenv("TMPDIR");

	g->b = b;
	snprintf(g->root, sizeof(g->root), "%s/bench_coord.XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(g->root)) {
		perror("bench_coord: mkdtemp");
		g->root[0] = '\0';
		return -1;
	}
	setenv("TMPDIR", g->root, 1);
	sigemptyset(&g->set);
	sigaddset(&g->set, SIGINT);
	sigaddset(&g->set, SIGTERM);
	sigaddset(&g->set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &g->set, NULL);
	if (pthread_create(th, NULL, bench_coord_sig_run, g)) {
		bench_coord_rm_tree(g->root);
		return -1;
	}
	return 0;
}

/* etcd's timings for a LAN (docs/operations.md): with them etcd grants
 * a lease of 1 s, so --leader-ttl 1 can be measured. */
static const char *const bench_coord_etcd_lan[] = { "--election-timeout", "500",
						    "--heartbeat-interval",
						    "50", NULL };

/* etcd's members (--members of them) and b->store naming them all. */
static int bench_coord_etcd_start(struct bench_coord *b)
{
	size_t off;

	if (t_etcd_start(&b->ec, (int)b->members, bench_coord_etcd_lan))
		return -1;
	off = (size_t)snprintf(b->store, sizeof(b->store), "etcd://");
	for (int i = 0; i < b->ec.n && off < sizeof(b->store); i++)
		off += (size_t)snprintf(b->store + off, sizeof(b->store) - off,
					"%s127.0.0.1:%d", i ? "," : "",
					b->ec.cport[i]);
	return 0;
}

static int bench_coord_run(struct bench_coord *b)
{
	bench_out_begin(b->out, "coord_setup");
	bench_out_u64(b->out, "etcd_members", b->members);
	bench_out_u64(b->out, "creates", b->creates);
	bench_out_u64(b->out, "nodes", b->nodes);
	bench_out_u64(b->out, "conns", b->conns);
	bench_out_int(b->out, "quick", b->quick);
	bench_out_end(b->out);
	for (int etcd = 0; etcd < 2; etcd++)
		if (bench_coord_store_run(b, etcd))
			return -1;
	if (bench_coord_failover(b))
		return -1;
	for (int etcd = 0; b->scale && etcd < 2; etcd++)
		if (bench_coord_scale(b, etcd))
			return -1;
	return 0;
}

/* The quick mode's figures, where not given. */
static void bench_coord_defaults(struct bench_coord *b, uint64_t hb_ms)
{
	if (!b->creates)
		b->creates = b->quick ? 50 : 300;
	if (!b->nodes)
		b->nodes = b->quick ? 16 : 64;
	if (!b->rounds)
		b->rounds = b->quick ? 2 : 3;
	if (!b->n_ttls) {
		if (!b->quick)
			b->ttls[b->n_ttls++] = 1;
		b->ttls[b->n_ttls++] = 2;
		if (!b->quick)
			b->ttls[b->n_ttls++] = 3;
	}
	b->hb_secs = (double)(hb_ms ? hb_ms : b->quick ? 500 : 2000) / 1000;
}

int main(int argc, char **argv)
{
	struct bench_out out = { 0 };
	struct bench_coord b = { .conns = 2,
				 .members = 1,
				 .scale_nodes = 1000,
				 .scale_regions = 10000,
				 .out = &out };
	uint64_t hb_ms = 0, scale_ms = 10000;
	const struct bench_opt opts[] = {
		BENCH_OPT_FLAG_OF("quick", &b.quick,
				  "fewer of everything (well under a minute)"),
		BENCH_OPT("creates", "N", BENCH_OPT_U64, &b.creates, 1, 1000000,
			  "region creates per store (default 300; quick 50)"),
		BENCH_OPT("nodes", "K", BENCH_OPT_U64, &b.nodes, 1, 100000,
			  "nodes heartbeating per store (default 64; quick "
			  "16)"),
		BENCH_OPT("conns", "C", BENCH_OPT_U64, &b.conns, 1,
			  BENCH_COORD_THR_MAX,
			  "their connections, one thread each (default 2)"),
		BENCH_OPT("hb-ms", "MS", BENCH_OPT_U64, &hb_ms, 100, 600000,
			  "heartbeating time per store (default 2000; quick "
			  "500)"),
		BENCH_OPT_LIST_OF("ttls", "S,S,...", b.ttls, 1, 60, &b.n_ttls,
				  BENCH_COORD_TTL_MAX,
				  "--leader-ttl of the failover rounds "
				  "(default 1,2,3; quick 2)"),
		BENCH_OPT("rounds", "N", BENCH_OPT_U64, &b.rounds, 1,
			  BENCH_COORD_ROUND_MAX,
			  "failover rounds per TTL (default 3; quick 2)"),
		BENCH_OPT("members", "N", BENCH_OPT_U64, &b.members, 1,
			  T_ETCD_MAX, "etcd members (default 1)"),
		BENCH_OPT_FLAG_OF("scale", &b.scale,
				  "also the scale run (each store)"),
		BENCH_OPT("scale-nodes", "N", BENCH_OPT_U64, &b.scale_nodes, 1,
			  100000, "its nodes (default 1000)"),
		BENCH_OPT("scale-regions", "N", BENCH_OPT_U64, &b.scale_regions,
			  1, 10000000, "its regions (default 10000)"),
		BENCH_OPT("scale-ms", "MS", BENCH_OPT_U64, &scale_ms, 1000,
			  3600000,
			  "its heartbeating time at least, creates or not "
			  "(default 10000)"),
		BENCH_OPT_END,
	};
	static const char *const features[] = { "wal", "etcd", "failover",
						"scale", NULL };
	const struct bench_cli cli = {
		.prog = "bench_coord",
		.about = bench_coord_about,
		.opts = opts,
		.features = features,
		.out = &out,
	};
	struct bench_coord_sig sig;
	pthread_t sig_th;
	int ret;

	ret = bench_cli_parse(&cli, argc, argv, NULL);
	if (ret >= 0)
		return ret;
	bench_coord_defaults(&b, hb_ms);
	b.scale_secs = (double)scale_ms / 1000;
	signal(SIGPIPE, SIG_IGN);
	if (!t_etcd_bin()) {
		fprintf(stderr, "bench_coord: SKIP: etcd is not installed "
				"(Debian: etcd-server)\n");
		return 77;
	}
	if (bench_coord_sig_init(&sig, &b, &sig_th))
		return 1;
	ret = bench_coord_etcd_start(&b) ? 1 : bench_coord_run(&b) ? 1 : 0;
	t_etcd_stop(&b.ec, ret);
	bench_coord_rm_tree(sig.root);
	return ret;
}
