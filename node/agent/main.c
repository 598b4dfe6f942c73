// SPDX-License-Identifier: MIT
/* farpage-node: command line, signals, run the agent. */
#define LOG_PREFIX ""
#include <errno.h>
#include <getopt.h>
#include <stddef.h>
#include <malloc.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "actl.h"
#include "addrlist.h"
#include "agent.h"
#include "farpage.h"
#include "floops.h"
#include "log.h"
#include "net.h"
#include "opts.h"
#include "util.h"

/*
 * The running agent, for the signal handler; NULL once it is being
 * destroyed. A handler counts itself in main_sig_busy before it looks, so
 * that main_agent_release() can wait out one that read the pointer just
 * before it was cleared (it may run on any thread).
 */
static _Atomic(struct node_agent *) main_agent;
static atomic_int main_sig_busy;
/* A stop asked for before the agent was there to take it. Atomic, not
 * sig_atomic_t: the handler runs on whichever thread the signal lands. */
static atomic_int main_stop;

static void main_on_signal(int sig)
{
	struct node_agent *a;

	atomic_store(&main_stop, 1);
	atomic_fetch_add(&main_sig_busy, 1);
	a = atomic_load(&main_agent);
	if (a)
		agent_stop(a);
	atomic_fetch_sub(&main_sig_busy, 1);
}

/*
 * Takes the agent from the signal handler before it is destroyed: a
 * second SIGTERM during agent_destroy() must not stop a freed loop.
 * Further SIGINT/SIGTERM are ignored (the agent is stopping already).
 */
static struct node_agent *main_agent_release(void)
{
	struct sigaction ign = { .sa_handler = SIG_IGN };
	struct node_agent *a;

	sigaction(SIGINT, &ign, NULL);
	sigaction(SIGTERM, &ign, NULL);
	a = atomic_exchange(&main_agent, NULL);
	while (atomic_load(&main_sig_busy))
		sched_yield();
	return a;
}

/* Every id of a full list fits: 10 digits and a comma each. */
#define MAIN_IDS_FMT_LEN (SOCKAUTH_IDS_MAX * 11 + 1)

/*
 * Adds the users (--allow-uid) or groups (--allow-gid) of @list, names or
 * numbers separated by commas. Returns 0 or -1 after saying what is wrong.
 */
static int main_allow(struct sockauth *sa, int groups, const char *list)
{
	const char *opt = groups ? "--allow-gid" : "--allow-uid";
	const char *what = groups ? "group" : "user";
	char *dup = strdup(list), *w, *next;
	int ret = 0;

	if (!dup) {
		fprintf(stderr, "farpage-node: %s: %s\n", opt,
			strerror(ENOMEM));
		return -1;
	}
	for (w = dup; w && !ret; w = next) {
		next = strchr(w, ',');
		if (next)
			*next++ = '\0';
		if (groups) {
			gid_t gid;

			ret = sockauth_group_find(w, &gid);
			if (!ret)
				ret = sockauth_gid_allow(sa, gid);
		} else {
			uid_t uid;

			ret = sockauth_user_find(w, &uid);
			if (!ret)
				ret = sockauth_uid_allow(sa, uid);
		}
		if (ret == -ENOENT)
			fprintf(stderr,
				"farpage-node: %s: no %s '%s' on this "
				"host\n",
				opt, what, w);
		else if (ret == -EINVAL)
			fprintf(stderr,
				"farpage-node: %s: '%s' is not a %s name or "
				"number\n",
				opt, w, what);
		else if (ret == -E2BIG)
			fprintf(stderr, "farpage-node: %s: at most %d\n", opt,
				SOCKAUTH_IDS_MAX);
		else if (ret)
			fprintf(stderr,
				"farpage-node: %s: cannot look %s '%s' up: "
				"%s\n",
				opt, what, w, strerror(-ret));
	}
	free(dup);
	return ret ? -1 : 0;
}

/* "0,65534" of @n ids, or "none". */
static const char *main_ids_fmt(const uint32_t *ids, size_t n,
				char buf[MAIN_IDS_FMT_LEN])
{
	size_t at = 0;

	snprintf(buf, MAIN_IDS_FMT_LEN, "none");
	for (size_t i = 0; i < n; i++)
		at += (size_t)snprintf(buf + at, MAIN_IDS_FMT_LEN - at, "%s%u",
				       i ? "," : "", (unsigned int)ids[i]);
	return buf;
}

/*
 * Who may use the socket: the lists given, or by default root and the
 * members of group farpage; the agent's own user always. The socket goes
 * to group farpage where there is one. Says which in one line.
 */
static void main_allow_default(struct node_cfg *cfg, int given)
{
	char uids[MAIN_IDS_FMT_LEN], gids[MAIN_IDS_FMT_LEN];
	gid_t gid;
	int ret;

	ret = sockauth_group_find(SOCKAUTH_GROUP, &gid);
	if (!ret)
		cfg->sock_gid = gid;
	if (!given) {
		sockauth_uid_allow(&cfg->allow, 0);
		if (!ret)
			sockauth_gid_allow(&cfg->allow, gid);
	}
	sockauth_uid_allow(&cfg->allow, geteuid());
	main_ids_fmt(cfg->allow.uids, cfg->allow.n_uids, uids);
	main_ids_fmt(cfg->allow.gids, cfg->allow.n_gids, gids);
	if (given)
		log_info("%s serves uids %s and the members of groups %s "
			 "(--allow-uid/--allow-gid)",
			 cfg->sock_path, uids, gids);
	else if (!ret)
		log_info("%s serves uids %s and the members of group %s (gid "
			 "%u): no --allow-uid/--allow-gid",
			 cfg->sock_path, uids, SOCKAUTH_GROUP,
			 (unsigned int)gid);
	else if (ret == -ENOENT)
		log_info("%s serves uids %s only: no --allow-uid/--allow-gid, "
			 "and no group %s on this host",
			 cfg->sock_path, uids, SOCKAUTH_GROUP);
	else
		log_warn("%s serves uids %s only: no --allow-uid/--allow-gid, "
			 "and group %s cannot be looked up (%s)",
			 cfg->sock_path, uids, SOCKAUTH_GROUP,
			 log_strerror(ret));
}

static const char *const main_transports[] = { "auto", "tcp", "verbs", NULL };
static const char *const main_fault_modes[] = { "auto", "cache", "copy", NULL };
static const char *const main_cache_policies[] = { "clock", "fifo", NULL };
static const char *const main_dirty_modes[] = { "auto", "wp-fault", "scan",
						NULL };
static const char *const main_on_off[] = { "on", "off", NULL };

/* -1 after saying what is wrong if @addr is not HOST:PORT. */
static int main_addr_check(const char *opt, const char *addr)
{
	char host[256], port[8];

	if (!net_addr_split(addr, host, sizeof(host), port, sizeof(port)))
		return 0;
	if (!strchr(addr, ':'))
		fprintf(stderr,
			"farpage-node: %s: '%s' has no port: give HOST:PORT, "
			"e.g. %s:7701\n",
			opt, addr, addr);
	else
		fprintf(stderr,
			"farpage-node: %s: '%s' is not HOST:PORT (an IPv6 "
			"address goes in brackets: [::1]:7700)\n",
			opt, addr);
	return -1;
}

/*
 * The index of @s in @words (NULL-terminated), or -1 after saying which
 * words @opt takes.
 */
static int main_word(const char *opt, const char *s, const char *const *words)
{
	int n = 0;

	for (; words[n]; n++)
		if (!strcmp(s, words[n]))
			return n;
	fprintf(stderr, "farpage-node: %s: ", opt);
	for (int i = 0; i < n; i++)
		fprintf(stderr, "%s%s", words[i],
			i + 2 < n   ? ", "
			: i + 1 < n ? " or "
				    : "");
	fprintf(stderr, ", not '%s'\n", s);
	return -1;
}

/* Everything the command line sets. */
struct main_ctx {
	struct node_cfg cfg;
	struct actl_cred cred;
	const char *key_file;
	int allow_given;
	enum log_level lvl;
};

#define MAIN_CFG(m) offsetof(struct main_ctx, cfg.m)

/* A number in o->min..o->max. Returns 0 or 2 after saying so. */
static int main_num_parse(const struct opts_opt *o, const char *arg,
			  uint64_t *v)
{
	if (util_u64_parse(arg, v) || *v < o->min || *v > o->max) {
		fprintf(stderr, "farpage-node: --%s: %llu..%llu, not '%s'\n",
			o->name, (unsigned long long)o->min,
			(unsigned long long)o->max, arg);
		return 2;
	}
	return 0;
}

/* An unsigned int option at o->off. */
static int main_set_uint(const struct opts_opt *o, void *ctx, const char *arg)
{
	uint64_t v;

	if (main_num_parse(o, arg, &v))
		return 2;
	*(unsigned int *)(void *)((char *)ctx + o->off) = (unsigned int)v;
	return 0;
}

static int main_set_gid_index(const struct opts_opt *o, void *ctx,
			      const char *arg)
{
	struct main_ctx *m = ctx;
	uint64_t g;

	if (main_num_parse(o, arg, &g))
		return 2;
	m->cfg.gid_index = (int)g;
	return 0;
}

/* A size of at least o->min (o->max: or 0). */
static int main_set_size(const struct opts_opt *o, void *ctx, const char *arg)
{
	uint64_t *v = (uint64_t *)(void *)((char *)ctx + o->off);
	char min[32];

	if (util_size_parse(arg, v) || (*v < o->min && !(o->max && !*v))) {
		fprintf(stderr,
			"farpage-node: --%s: %sa size of at least %s, not "
			"'%s'\n",
			o->name, o->max ? "0 or " : "",
			util_size_fmt(o->min, min, sizeof(min)), arg);
		return 2;
	}
	return 0;
}

static int main_set_huge(const struct opts_opt *o, void *ctx, const char *arg)
{
	static const char *const modes[] = { "auto", "on", "off", NULL };
	static const enum pool_huge_mode to[] = { POOL_HUGE_AUTO, POOL_HUGE_ON,
						  POOL_HUGE_OFF };
	struct main_ctx *m = ctx;
	int i = main_word("--hugepages", arg, modes);

	if (i < 0)
		return 2;
	m->cfg.huge = to[i];
	return 0;
}

static int main_set_allow(const struct opts_opt *o, void *ctx, const char *arg)
{
	struct main_ctx *m = ctx;

	if (main_allow(&m->cfg.allow, !strcmp(o->name, "allow-gid"), arg))
		return 2;
	m->allow_given = 1;
	return 0;
}

static int main_set_zone(const struct opts_opt *o, void *ctx, const char *arg)
{
	struct main_ctx *m = ctx;

	if (!msg_name_is_valid(arg)) {
		fprintf(stderr,
			"farpage-node: --zone: '%s' is not a valid name (1-63 "
			"of A-Z a-z 0-9 . _ -)\n",
			arg);
		return 2;
	}
	m->cfg.zone = arg;
	return 0;
}

/* --transport, --fault-mode: one of the words, kept as given. */
static int main_set_word_str(const struct opts_opt *o, void *ctx,
			     const char *arg)
{
	const char *const *words = strcmp(o->name, "transport")
					   ? main_fault_modes
					   : main_transports;
	char opt[64];

	snprintf(opt, sizeof(opt), "--%s", o->name);
	if (main_word(opt, arg, words) < 0)
		return 2;
	memcpy((char *)ctx + o->off, &arg, sizeof(arg));
	return 0;
}

/* --cache-policy, --dirty-tracking: the word's index (their enums'
 * order); --page-encryption, --rdma-direct: on (0) or off (1). */
static int main_set_word_idx(const struct opts_opt *o, void *ctx,
			     const char *arg)
{
	struct main_ctx *m = ctx;
	char opt[64];
	int i;

	snprintf(opt, sizeof(opt), "--%s", o->name);
	if (!strcmp(o->name, "cache-policy"))
		i = main_word(opt, arg, main_cache_policies);
	else if (!strcmp(o->name, "dirty-tracking"))
		i = main_word(opt, arg, main_dirty_modes);
	else
		i = main_word(opt, arg, main_on_off);
	if (i < 0)
		return 2;
	if (!strcmp(o->name, "cache-policy"))
		m->cfg.cache_fifo = i == 1;
	else if (!strcmp(o->name, "dirty-tracking"))
		m->cfg.dirty_mode = i; /* enum dscan_mode's order */
	else if (!strcmp(o->name, "page-encryption"))
		m->cfg.page_encryption = i == 0;
	else
		m->cfg.rdma_no_direct = i != 0;
	return 0;
}

static int main_set_log_level(const struct opts_opt *o, void *ctx,
			      const char *arg)
{
	struct main_ctx *m = ctx;

	if (log_level_parse(arg, &m->lvl)) {
		fprintf(stderr, "farpage-node: --log-level: err, warn, info or "
				"debug\n");
		return 2;
	}
	log_init("farpage-node", m->lvl);
	return 0;
}

#define MAIN_UINT_MAX 1000000000u

#define O_STR(name, key, arg, mem, help)                                    \
	{                                                                   \
		name, key, arg, help, OPTS_K_STR, NULL, MAIN_CFG(mem), 0, 0 \
	}
#define O_STRN(name, arg, off, help)                                 \
	{                                                            \
		name, 0, arg, help, OPTS_K_STR_NULL, NULL, off, 0, 0 \
	}
#define O_UINT(name, mem, lo, hi, help)                                      \
	{                                                                    \
		name, 0, "N", help, OPTS_K_FN, main_set_uint, MAIN_CFG(mem), \
			lo, hi                                               \
	}
#define O_FN(name, key, arg, fn, help)                       \
	{                                                    \
		name, key, arg, help, OPTS_K_FN, fn, 0, 0, 0 \
	}

_Static_assert(FLOOPS_MAX == 16, "--fault-threads help says 1..16");

/* Every option of farpage-node, in the order --help lists them. */
static const struct opts_opt main_opts[] = {
	O_STR("coordinator", 'c', "ADDR[,ADDR...]", coordinator,
	      "coordinator host:port (default 127.0.0.1:7700); a list of up "
	      "to 8, comma-separated, when several coordinators serve the "
	      "cluster: a call the one in use cannot answer (unreachable, or "
	      "not the leader) goes to the next"),
	O_STR("name", 'n', "NAME", name,
	      "node name, unique in the cluster (default: hostname)"),
	O_FN("zone", 0, "NAME", main_set_zone,
	     "failure domain (rack, room...): replicas of a chunk go to "
	     "distinct zones (default: none)"),
	{ "pool-size", 'p', "SIZE",
	  "page pool size, e.g. 512M, 4G (default 1G)", OPTS_K_FN,
	  main_set_size, MAIN_CFG(pool_size), 1, 0 },
	O_FN("hugepages", 0, "MODE", main_set_huge,
	     "auto|on|off: 2 MiB hugetlb pool (default auto)"),
	O_STR("data-listen", 'l', "ADDR", data_listen,
	      "page server listen host:port (default 0.0.0.0:7701)"),
	O_STR("data-addr", 'a', "ADDR", data_addr,
	      "address peers use to reach the page server (default: the "
	      "listen address, or the address this host reaches the "
	      "coordinator from)"),
	O_STR("sock", 's', "PATH", sock_path,
	      "Unix socket for local processes "
	      "(default " FARPAGE_AGENT_SOCK_DEFAULT ")"),
	O_FN("allow-uid", 0, "LIST", main_set_allow,
	     "users (names or uids, comma-separated) that may use the "
	     "socket; the agent's own user always may"),
	O_FN("allow-gid", 0, "LIST", main_set_allow,
	     "groups (names or gids) whose members may use it (default, "
	     "neither given: root and the group farpage if it exists). The "
	     "socket is mode 0660, in group farpage if it exists"),
	O_UINT("data-conns", data_conns, 16, MAIN_UINT_MAX,
	       "page-server connections in all (default 1024; a quarter, at "
	       "most 64, is kept for handshakes)"),
	O_UINT("peer-conns", peer_conns, 1, MAIN_UINT_MAX,
	       "page-server connections one peer node may hold (default 64; "
	       "an agent keeps one per fault loop)"),
	O_UINT("peer-idle-ms", peer_idle_ms, 0, MAIN_UINT_MAX,
	       "a peer's connections past the 16 it used last close after N "
	       "ms without a request (default 60000; 0: never)"),
	O_UINT("sock-clients", sock_clients, 16, MAIN_UINT_MAX,
	       "local clients of the socket in all (default 4096, fewer if "
	       "the open-files limit leaves fewer)"),
	O_UINT("sock-clients-per-uid", sock_clients_uid, 1, MAIN_UINT_MAX,
	       "local clients of one user (default 1024)"),
	{ "transport", 't', "T",
	  "auto: verbs to peers that have it (else TCP), tcp, or verbs "
	  "(refuse to start without a device) (default auto)",
	  OPTS_K_FN, main_set_word_str, MAIN_CFG(transport), 0, 0 },
	O_STR("rdma-device", 'd', "NAME", rdma_device,
	      "RDMA device (default: the first with an active port)"),
	{ "gid-index", 0, "N",
	  "GID index (default: the RoCE v2 GID of the data address, else "
	  "link-local)",
	  OPTS_K_FN, main_set_gid_index, 0, 0, 255 },
	O_UINT("rdma-depth", rdma_depth, 1, MAIN_UINT_MAX,
	       "RDMA READs in flight per queue pair (default 128)"),
	O_FN("rdma-direct", 0, "on|off", main_set_word_idx,
	     "cache mode over verbs: a READ lands straight in the cache "
	     "(registered in windows of it), or in a buffer, then copied in "
	     "(default on)"),
	O_UINT("fault-timeout-ms", fault_timeout_ms, 1, MAIN_UINT_MAX,
	       "how long a fault waits for an unreachable owner before the "
	       "process gets SIGBUS (default 30000)"),
	O_UINT("replica-timeout-ms", repl_timeout_ms, 0, MAIN_UINT_MAX,
	       "a read of a replicated region that gets no answer this long "
	       "goes to the next replica (default 2000; 0: only on a "
	       "failure); a writer whose write-back to an owner fails this "
	       "long asks the coordinator to take that owner's replicas out "
	       "of the set"),
	O_UINT("data-stall-ms", data_stall_ms, 0, MAIN_UINT_MAX,
	       "a data connection (tcp) awaiting replies on which nothing "
	       "arrives this long is closed and dialed again, its reads sent "
	       "again there (default 2000; 0: never)"),
	{ "rebuild-rate", 0, "RATE",
	  "bytes a second this node copies into its pool when it rebuilds a "
	  "replica, e.g. 64M (default 0: no limit but a few reads in flight)",
	  OPTS_K_FN, main_set_size, MAIN_CFG(rebuild_rate), 16u << 10, 1 },
	O_UINT("heartbeat-ms", heartbeat_ms, 10, MAIN_UINT_MAX,
	       "heartbeat period (default 1000)"),
	O_UINT("inflight", slots, 16, MAIN_UINT_MAX,
	       "page reads in flight (default 512)"),
	O_UINT("readahead", readahead, 0, 1024,
	       "adaptive read-ahead: a sequential fault stream grows its "
	       "window up to N pages; 0 = off (default 256)"),
	O_UINT("spin-us", spin_us, 0, 10000,
	       "after each batch of work the fault loop polls for N us before "
	       "sleeping (default 0)"),
	O_UINT("coherence-hold-us", coh_hold_us, 0, 100000,
	       "coherent regions: a page this host was just granted is given "
	       "up (recalled, invalidated) no sooner than N us after, so the "
	       "access that asked for it gets done; 0 = at once (default 20)"),
	O_UINT("fault-threads", fault_threads, 1, FLOOPS_MAX,
	       "fault loops, each a thread with its own mappings and peer "
	       "connections (1..16; default a quarter of the CPUs, 1 to 8; "
	       "verbs: 1)"),
	{ "fault-mode", 0, "M",
	  "cache: remote pages live in a bounded cache shared with the "
	  "process, writes go home; copy: pages are copied in, writes stay "
	  "in the process (default: cache when the kernel allows it)",
	  OPTS_K_FN, main_set_word_str, MAIN_CFG(fault_mode), 0, 0 },
	{ "cache-size", 0, "SIZE",
	  "remote bytes this host keeps over all its mappings (default: a "
	  "quarter of RAM)",
	  OPTS_K_FN, main_set_size, MAIN_CFG(cache_size), 1u << 20, 0 },
	O_FN("cache-policy", 0, "P", main_set_word_idx,
	     "which pages the cache drops when full: clock (pages in use "
	     "stay; access is sampled) or fifo (oldest first) (default "
	     "clock)"),
	O_FN("dirty-tracking", 0, "M", main_set_word_idx,
	     "how written cached pages are found: wp-fault (a write-protect "
	     "fault per first write), scan (PAGEMAP_SCAN in batches, Linux "
	     "6.7+) or auto (scan where it works) (default auto)"),
	O_UINT("writeback-ms", writeback_ms, 10, MAIN_UINT_MAX,
	       "written pages go home at least this often; bounds what a "
	       "crash of this host loses (default 1000)"),
	O_STR("addr-file", 0, "FILE", addr_file,
	      "write the advertised data address here when ready (and "
	      "\"metrics HOST:PORT\" on a second line)"),
	O_STRN("metrics-listen", "ADDR", MAIN_CFG(metrics_listen),
	       "serve Prometheus /metrics on HOST:PORT (off unless set; port "
	       "0: any free port; \"\": off)"),
	O_STRN("metrics-token-file", "FILE", MAIN_CFG(metrics_token_file),
	       "answer /metrics only to requests with \"Authorization: Bearer "
	       "TOKEN\", TOKEN the file's first line (default: none; \"\": "
	       "none)"),
	O_STRN("key-file", "FILE", offsetof(struct main_ctx, key_file),
	       "this node's key, or the cluster key (default: "
	       "$FARPAGE_KEY_FILE, else /etc/farpage/node.key, else "
	       "/etc/farpage/cluster.key; \"\": the default)"),
	O_FN("page-encryption", 0, "on|off", main_set_word_idx,
	     "encrypt pages between nodes, or only authenticate them "
	     "(default on)"),
	{ "insecure", 0, NULL,
	  "no authentication at all; the whole cluster must run so "
	  "(benchmarks, trusted labs)",
	  OPTS_K_TRUE, NULL, offsetof(struct main_ctx, cred.insecure), 0, 0 },
	O_FN("log-level", 0, "LEVEL", main_set_log_level,
	     "err|warn|info|debug (default info)"),
	{ "help", 'h', NULL, "this text", OPTS_K_HELP, NULL, 0, 0, 0 },
	{ "version", 'V', NULL, "print the version", OPTS_K_VERSION, NULL, 0, 0,
	  0 },
};

static const struct opts_spec main_spec = {
	.prog = "farpage-node",
	.version = FARPAGE_VERSION,
	.synopsis = "Usage: farpage-node [OPTIONS]\n"
		    "\n"
		    "The farpage agent of one host: holds this host's page "
		    "pool,\n"
		    "serves its pages to peers and resolves page faults of "
		    "local\n"
		    "processes that map farpage regions.\n",
	.opts = main_opts,
	.n = sizeof(main_opts) / sizeof(main_opts[0]),
	.usage_status = 2,
};

/* What the options leave to check together. Returns 0 or 2. */
static int main_opts_check(struct main_ctx *m, char *host, size_t host_len)
{
	struct node_cfg *cfg = &m->cfg;
	char why[ADDRLIST_ADDR_LEN + 100];
	struct addrlist coords;

	if (!cfg->name) {
		if (gethostname(host, host_len))
			snprintf(host, host_len, "node");
		host[host_len - 1] = '\0';
		cfg->name = host;
	}
	if (!msg_name_is_valid(cfg->name)) {
		fprintf(stderr,
			"farpage-node: --name: '%s' is not a valid name "
			"(1-63 of A-Z a-z 0-9 . _ -)\n",
			cfg->name);
		return 2;
	}
	if (addrlist_parse(cfg->coordinator, "7700", &coords, why,
			   sizeof(why))) {
		fprintf(stderr, "farpage-node: --coordinator: %s\n", why);
		return 2;
	}
	if (cfg->data_listen &&
	    main_addr_check("--data-listen", cfg->data_listen))
		return 2;
	return 0;
}

int main(int argc, char **argv)
{
	struct main_ctx m = {
		.cfg = {
			.coordinator = "127.0.0.1:7700",
			.pool_size = 1ull << 30,
			.data_listen = "0.0.0.0:7701",
			.sock_path = FARPAGE_AGENT_SOCK_DEFAULT,
			.sock_gid = (gid_t)-1,
			.transport = "auto",
			.huge = POOL_HUGE_AUTO,
			.fault_timeout_ms = 30000,
			.repl_timeout_ms = 2000,
			.data_stall_ms = 2000,
			.heartbeat_ms = 1000,
			.data_conns = 1024,
			.peer_conns = 64,
			.peer_idle_ms = 60000,
			.sock_clients = 4096,
			.sock_clients_uid = 1024,
			.readahead = 256,
			.coh_hold_us = 20,
			.gid_index = -1,
			.fault_mode = "auto",
			.writeback_ms = 1000,
			.page_encryption = true,
		},
		.lvl = LOG_INFO,
	};
	struct node_cfg *cfg = &m.cfg;
	struct sigaction sa = { 0 };
	struct node_agent *agent = NULL;
	char host[MSG_NAME_MAX], why[400];
	int ret;

	log_init("farpage-node", m.lvl);
	/* A mapping's per-page sets (megabytes for a big region) come from
	 * mmap(), pages zeroed by the kernel as they are first written: with
	 * glibc's threshold raised by the free of such a block (its default
	 * moves up to 32 MiB), the next big map's calloc()s would be memset
	 * on the heap whole. */
	mallopt(M_MMAP_THRESHOLD, 256 << 10);
	ret = opts_parse(&main_spec, argc, argv, &m);
	if (ret != OPTS_GO_ON)
		return ret;
	if (optind < argc)
		return opts_usage_err(&main_spec, "unexpected argument '%s'",
				      argv[optind]);
	if (main_opts_check(&m, host, sizeof(host)))
		return 2;
	main_allow_default(cfg, m.allow_given);

	/* No key, or not this node's: a setting to fix, not to retry. */
	if (!m.cred.insecure &&
	    actl_cred_load(&m.cred, m.key_file, AUTH_ROLE_NODE, cfg->name, why,
			   sizeof(why))) {
		log_err("%s", why);
		return 2;
	}
	cfg->cred = &m.cred;
	signal(SIGPIPE, SIG_IGN);
	/* From here a stop is taken, also while the agent starts. */
	sa.sa_handler = main_on_signal;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	ret = agent_create(cfg, &agent);
	OPENSSL_cleanse(&m.cred, sizeof(m.cred)); /* the agent has its copy */
	/* A key the coordinator refuses, an address that cannot be, a
	 * socket another agent serves: fixed by the operator, not by
	 * starting again (the unit does not). */
	if (ret == -EKEYREJECTED || ret == -EDESTADDRREQ || ret == -EALREADY)
		return 2;
	if (ret)
		return 1;
	/* A signal either finds the agent or has set main_stop, seen here;
	 * a stop before agent_run() still ends it (evl_run()). */
	atomic_store(&main_agent, agent);
	ret = atomic_load(&main_stop) ? 0 : agent_run(agent);
	log_info("stopping");
	agent_destroy(main_agent_release());
	return ret ? 1 : 0;
}
