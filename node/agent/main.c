// SPDX-License-Identifier: MIT
/* farpage-node: command line, signals, run the agent. */
#define LOG_PREFIX ""
#include <errno.h>
#include <getopt.h>
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
#include "agent.h"
#include "farpage.h"
#include "floops.h"
#include "log.h"
#include "net.h"
#include "util.h"

/*
 * The running agent, for the signal handler; NULL once it is being
 * destroyed. A handler counts itself in main_sig_busy before it looks, so
 * that main_agent_release() can wait out one that read the pointer just
 * before it was cleared (it may run on any thread).
 */
static _Atomic(struct node_agent *) main_agent;
static atomic_int main_sig_busy;
/* A stop asked for before the agent was there to take it. */
static volatile sig_atomic_t main_stop;

static void main_on_signal(int sig)
{
	struct node_agent *a;

	main_stop = 1;
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

static void main_usage(FILE *out)
{
	fprintf(out,
		"Usage: farpage-node [OPTIONS]\n"
		"\n"
		"The farpage agent of one host: holds this host's page pool,\n"
		"serves its pages to peers and resolves page faults of local\n"
		"processes that map farpage regions.\n"
		"\n"
		"  -c, --coordinator ADDR   coordinator host:port "
		"(default 127.0.0.1:7700)\n"
		"  -n, --name NAME          node name, unique in the cluster "
		"(default: hostname)\n"
		"      --zone NAME          failure domain (rack, room...): "
		"replicas of a chunk\n"
		"                           go to distinct zones (default: "
		"none)\n"
		"  -p, --pool-size SIZE     page pool size, e.g. 512M, 4G "
		"(default 1G)\n"
		"      --hugepages MODE     auto|on|off: 2 MiB hugetlb pool "
		"(default auto)\n"
		"  -l, --data-listen ADDR   page server listen host:port "
		"(default 0.0.0.0:7701)\n"
		"  -a, --data-addr ADDR     address peers use to reach the "
		"page server\n"
		"                           (default: the listen address, or "
		"the address\n"
		"                           this host reaches the coordinator "
		"from)\n"
		"  -s, --sock PATH          Unix socket for local processes "
		"(default %s)\n"
		"      --allow-uid LIST     users (names or uids, comma-"
		"separated) that may\n"
		"                           use the socket; the agent's own "
		"user always may\n"
		"      --allow-gid LIST     groups (names or gids) whose "
		"members may use it\n"
		"                           (default, neither given: root and "
		"the group\n"
		"                           farpage if it exists). The socket "
		"is mode 0660,\n"
		"                           in group farpage if it exists\n"
		"      --data-conns N       page-server connections in all "
		"(default 1024;\n"
		"                           a quarter, at most 64, is kept "
		"for handshakes)\n"
		"      --peer-conns N       page-server connections one peer "
		"node may hold\n"
		"                           (default 64; an agent keeps one "
		"per fault loop)\n"
		"      --peer-idle-ms N     a peer's connections past the 16 "
		"it used last\n"
		"                           close after N ms without a "
		"request (default\n"
		"                           60000; 0: never)\n"
		"      --sock-clients N     local clients of the socket in "
		"all (default\n"
		"                           4096, fewer if the open-files "
		"limit leaves fewer)\n"
		"      --sock-clients-per-uid N  local clients of one user "
		"(default 1024)\n"
		"  -t, --transport T        auto: verbs to peers that have it "
		"(else TCP),\n"
		"                           tcp, or verbs (refuse to start "
		"without a device)\n"
		"                           (default auto)\n"
		"  -d, --rdma-device NAME   RDMA device (default: the first "
		"with an active port)\n"
		"      --gid-index N        GID index (default: the RoCE v2 "
		"GID of the data\n"
		"                           address, else link-local)\n"
		"      --rdma-depth N       RDMA READs in flight per queue "
		"pair "
		"(default 128)\n"
		"      --rdma-direct on|off cache mode over verbs: a READ "
		"lands "
		"straight in\n"
		"                           the cache (registered in "
		"windows of it),\n"
		"                           or in a buffer, then copied in "
		"(default on)\n"
		"      --fault-timeout-ms N how long a fault waits for an "
		"unreachable owner\n"
		"                           before the process gets SIGBUS "
		"(default 30000)\n"
		"      --replica-timeout-ms N a read of a replicated region "
		"that gets no\n"
		"                           answer this long goes to the "
		"next replica\n"
		"                           (default 2000; 0: only on a "
		"failure); a\n"
		"                           writer whose write-back to an "
		"owner fails\n"
		"                           this long asks the coordinator "
		"to take that\n"
		"                           owner's replicas out of the set\n"
		"      --data-stall-ms N    a data connection (tcp) awaiting "
		"replies on\n"
		"                           which nothing arrives this long is "
		"closed and\n"
		"                           dialed again, its reads sent "
		"again there\n"
		"                           (default 2000; 0: never)\n"
		"      --rebuild-rate RATE  bytes a second this node copies "
		"into its pool\n"
		"                           when it rebuilds a replica, e.g. "
		"64M (default\n"
		"                           0: no limit but a few reads in "
		"flight)\n"
		"      --heartbeat-ms N     heartbeat period (default 1000)\n"
		"      --inflight N         page reads in flight (default "
		"512)\n"
		"      --readahead N        adaptive read-ahead: a sequential "
		"fault stream\n"
		"                           grows its window up to N pages; 0 "
		"= off (default 256)\n"
		"      --spin-us N          after each batch of work the fault "
		"loop polls for\n"
		"                           N us before sleeping (default 0)\n"
		"      --fault-threads N    fault loops, each a thread with "
		"its "
		"own mappings\n"
		"                           and peer connections (1..16; "
		"default a quarter\n"
		"                           of the CPUs, 1 to 8; verbs: 1)\n"
		"      --fault-mode M       cache: remote pages live in a "
		"bounded cache shared\n"
		"                           with the process, writes go home; "
		"copy: pages are\n"
		"                           copied in, writes stay in the "
		"process (default:\n"
		"                           cache when the kernel allows "
		"it)\n"
		"      --cache-size SIZE    remote bytes this host keeps over "
		"all its mappings\n"
		"                           (default: a quarter of RAM)\n"
		"      --cache-policy P     which pages the cache drops when "
		"full: clock\n"
		"                           (pages in use stay; access is "
		"sampled) or fifo\n"
		"                           (oldest first) (default clock)\n"
		"      --dirty-tracking M   how written cached pages are "
		"found: wp-fault (a\n"
		"                           write-protect fault per first "
		"write), scan\n"
		"                           (PAGEMAP_SCAN in batches, Linux "
		"6.7+) or auto\n"
		"                           (scan where it works) (default "
		"auto)\n"
		"      --writeback-ms N     written pages go home at least "
		"this often; bounds\n"
		"                           what a crash of this host loses "
		"(default 1000)\n"
		"      --addr-file FILE     write the advertised data address "
		"here when ready\n"
		"                           (and \"metrics HOST:PORT\" on a "
		"second line)\n"
		"      --metrics-listen ADDR  serve Prometheus /metrics on "
		"HOST:PORT (off\n"
		"                           unless set; port 0: any free "
		"port; \"\": off)\n"
		"      --metrics-token-file FILE  answer /metrics only to "
		"requests with\n"
		"                           \"Authorization: Bearer TOKEN\", "
		"TOKEN the\n"
		"                           file's first line (default: "
		"none; \"\": none)\n"
		"      --key-file FILE      this node's key, or the cluster "
		"key "
		"(default:\n"
		"                           $FARPAGE_KEY_FILE, else "
		"/etc/farpage/node.key,\n"
		"                           else /etc/farpage/cluster.key; "
		"\"\": the default)\n"
		"      --page-encryption on|off  encrypt pages between nodes, "
		"or only\n"
		"                           authenticate them (default on)\n"
		"      --insecure           no authentication at all; the "
		"whole "
		"cluster\n"
		"                           must run so (benchmarks, trusted "
		"labs)\n"
		"      --log-level LEVEL    err|warn|info|debug (default "
		"info)\n"
		"  -h, --help               this text\n"
		"  -V, --version            print the version\n",
		FARPAGE_AGENT_SOCK_DEFAULT);
}

static int main_uint(const char *opt, const char *s, unsigned int min,
		     unsigned int *out)
{
	uint64_t v;

	if (util_u64_parse(s, &v) || v < min || v > 1000000000u) {
		fprintf(stderr, "farpage-node: %s: bad value '%s'\n", opt, s);
		return -EINVAL;
	}
	*out = (unsigned int)v;
	return 0;
}

/* Long options without a short one. */
enum {
	MAIN_OPT_DATA_CONNS = 0x100,
	MAIN_OPT_PEER_CONNS,
	MAIN_OPT_PEER_IDLE_MS,
	MAIN_OPT_SOCK_CLIENTS,
	MAIN_OPT_SOCK_CLIENTS_UID,
	MAIN_OPT_METRICS_TOKEN_FILE,
};

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
			"e.g. %s:%s\n",
			opt, addr, addr,
			strcmp(opt, "--coordinator") ? "7701" : "7700");
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

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "coordinator", required_argument, NULL, 'c' },
		{ "name", required_argument, NULL, 'n' },
		{ "zone", required_argument, NULL, 'Z' },
		{ "pool-size", required_argument, NULL, 'p' },
		{ "hugepages", required_argument, NULL, 'H' },
		{ "data-listen", required_argument, NULL, 'l' },
		{ "data-addr", required_argument, NULL, 'a' },
		{ "sock", required_argument, NULL, 's' },
		{ "allow-uid", required_argument, NULL, 'u' },
		{ "allow-gid", required_argument, NULL, 'g' },
		{ "transport", required_argument, NULL, 't' },
		{ "data-conns", required_argument, NULL, MAIN_OPT_DATA_CONNS },
		{ "peer-conns", required_argument, NULL, MAIN_OPT_PEER_CONNS },
		{ "peer-idle-ms", required_argument, NULL,
		  MAIN_OPT_PEER_IDLE_MS },
		{ "sock-clients", required_argument, NULL,
		  MAIN_OPT_SOCK_CLIENTS },
		{ "sock-clients-per-uid", required_argument, NULL,
		  MAIN_OPT_SOCK_CLIENTS_UID },
		{ "rdma-device", required_argument, NULL, 'd' },
		{ "gid-index", required_argument, NULL, 'G' },
		{ "rdma-depth", required_argument, NULL, 'D' },
		{ "rdma-direct", required_argument, NULL, 'r' },
		{ "fault-timeout-ms", required_argument, NULL, 'F' },
		{ "replica-timeout-ms", required_argument, NULL, 'O' },
		{ "data-stall-ms", required_argument, NULL, 'S' },
		{ "heartbeat-ms", required_argument, NULL, 'B' },
		{ "rebuild-rate", required_argument, NULL, 'E' },
		{ "inflight", required_argument, NULL, 'I' },
		{ "readahead", required_argument, NULL, 'R' },
		{ "spin-us", required_argument, NULL, 'U' },
		{ "fault-threads", required_argument, NULL, 'T' },
		{ "fault-mode", required_argument, NULL, 'M' },
		{ "cache-size", required_argument, NULL, 'C' },
		{ "writeback-ms", required_argument, NULL, 'W' },
		{ "cache-policy", required_argument, NULL, 'P' },
		{ "dirty-tracking", required_argument, NULL, 'Y' },
		{ "addr-file", required_argument, NULL, 'A' },
		{ "metrics-listen", required_argument, NULL, 'm' },
		{ "metrics-token-file", required_argument, NULL,
		  MAIN_OPT_METRICS_TOKEN_FILE },
		{ "key-file", required_argument, NULL, 'k' },
		{ "insecure", no_argument, NULL, 'i' },
		{ "page-encryption", required_argument, NULL, 'e' },
		{ "log-level", required_argument, NULL, 'L' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 },
	};
	struct node_cfg cfg = {
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
		.gid_index = -1,
		.fault_mode = "auto",
		.writeback_ms = 1000,
		.page_encryption = true,
	};
	enum log_level lvl = LOG_INFO;
	struct sigaction sa = { 0 };
	struct node_agent *agent = NULL;
	char host[MSG_NAME_MAX], why[400];
	struct actl_cred cred = { 0 };
	const char *key_file = NULL;
	int allow_given = 0;
	int c, ret;

	log_init("farpage-node", lvl);
	/* A mapping's per-page sets (megabytes for a big region) come from
	 * mmap(), pages zeroed by the kernel as they are first written: with
	 * glibc's threshold raised by the free of such a block (its default
	 * moves up to 32 MiB), the next big map's calloc()s would be memset
	 * on the heap whole. */
	mallopt(M_MMAP_THRESHOLD, 256 << 10);
	while ((c = getopt_long(argc, argv, "c:n:p:l:a:s:t:d:hV", opts,
				NULL)) != -1) {
		switch (c) {
		case 'c':
			cfg.coordinator = optarg;
			break;
		case 'n':
			cfg.name = optarg;
			break;
		case 'p':
			if (util_size_parse(optarg, &cfg.pool_size) ||
			    !cfg.pool_size) {
				fprintf(stderr,
					"farpage-node: --pool-size: bad size "
					"'%s'\n",
					optarg);
				return 2;
			}
			break;
		case 'H':
			if (!strcmp(optarg, "auto"))
				cfg.huge = POOL_HUGE_AUTO;
			else if (!strcmp(optarg, "on"))
				cfg.huge = POOL_HUGE_ON;
			else if (!strcmp(optarg, "off"))
				cfg.huge = POOL_HUGE_OFF;
			else {
				fprintf(stderr, "farpage-node: --hugepages: "
						"auto, on or off\n");
				return 2;
			}
			break;
		case 'l':
			cfg.data_listen = optarg;
			break;
		case 'a':
			cfg.data_addr = optarg;
			break;
		case 's':
			cfg.sock_path = optarg;
			break;
		case 'u':
		case 'g':
			if (main_allow(&cfg.allow, c == 'g', optarg))
				return 2;
			allow_given = 1;
			break;
		case 't':
			if (main_word("--transport", optarg, main_transports) <
			    0)
				return 2;
			cfg.transport = optarg;
			break;
		case 'F':
			if (main_uint("--fault-timeout-ms", optarg, 1,
				      &cfg.fault_timeout_ms))
				return 2;
			break;
		case 'O':
			if (main_uint("--replica-timeout-ms", optarg, 0,
				      &cfg.repl_timeout_ms))
				return 2;
			break;
		case 'S':
			if (main_uint("--data-stall-ms", optarg, 0,
				      &cfg.data_stall_ms))
				return 2;
			break;
		case 'E':
			if (util_size_parse(optarg, &cfg.rebuild_rate) ||
			    (cfg.rebuild_rate &&
			     cfg.rebuild_rate < (64u << 10))) {
				fprintf(stderr,
					"farpage-node: --rebuild-rate: 0 or a "
					"rate of at least 64K (bytes a "
					"second), "
					"not '%s'\n",
					optarg);
				return 2;
			}
			break;
		case MAIN_OPT_DATA_CONNS:
			if (main_uint("--data-conns", optarg, 16,
				      &cfg.data_conns))
				return 2;
			break;
		case MAIN_OPT_PEER_CONNS:
			if (main_uint("--peer-conns", optarg, 1,
				      &cfg.peer_conns))
				return 2;
			break;
		case MAIN_OPT_PEER_IDLE_MS:
			if (main_uint("--peer-idle-ms", optarg, 0,
				      &cfg.peer_idle_ms))
				return 2;
			break;
		case MAIN_OPT_SOCK_CLIENTS:
			if (main_uint("--sock-clients", optarg, 16,
				      &cfg.sock_clients))
				return 2;
			break;
		case MAIN_OPT_METRICS_TOKEN_FILE:
			cfg.metrics_token_file = *optarg ? optarg : NULL;
			break;
		case MAIN_OPT_SOCK_CLIENTS_UID:
			if (main_uint("--sock-clients-per-uid", optarg, 1,
				      &cfg.sock_clients_uid))
				return 2;
			break;
		case 'B':
			if (main_uint("--heartbeat-ms", optarg, 10,
				      &cfg.heartbeat_ms))
				return 2;
			break;
		case 'I':
			if (main_uint("--inflight", optarg, 16, &cfg.slots))
				return 2;
			break;
		case 'U':
			if (main_uint("--spin-us", optarg, 0, &cfg.spin_us) ||
			    cfg.spin_us > 10000) {
				fprintf(stderr,
					"farpage-node: --spin-us: 0..10000\n");
				return 2;
			}
			break;
		case 'T':
			if (main_uint("--fault-threads", optarg, 1,
				      &cfg.fault_threads))
				return 2;
			if (cfg.fault_threads > FLOOPS_MAX) {
				fprintf(stderr,
					"farpage-node: --fault-threads: "
					"1..%d\n",
					FLOOPS_MAX);
				return 2;
			}
			break;
		case 'R':
			if (main_uint("--readahead", optarg, 0, &cfg.readahead))
				return 2;
			if (cfg.readahead > 1024) {
				fprintf(stderr, "farpage-node: --readahead: at "
						"most 1024 pages\n");
				return 2;
			}
			break;
		case 'M':
			if (main_word("--fault-mode", optarg,
				      main_fault_modes) < 0)
				return 2;
			cfg.fault_mode = optarg;
			break;
		case 'C':
			if (util_size_parse(optarg, &cfg.cache_size) ||
			    cfg.cache_size < (1u << 20)) {
				fprintf(stderr,
					"farpage-node: --cache-size: a size of "
					"at least 1M, not '%s'\n",
					optarg);
				return 2;
			}
			break;
		case 'P':
			ret = main_word("--cache-policy", optarg,
					main_cache_policies);
			if (ret < 0)
				return 2;
			cfg.cache_fifo = ret == 1; /* fifo */
			break;
		case 'Y':
			ret = main_word("--dirty-tracking", optarg,
					main_dirty_modes);
			if (ret < 0)
				return 2;
			cfg.dirty_mode = ret; /* enum dscan_mode's order */
			break;
		case 'W':
			if (main_uint("--writeback-ms", optarg, 10,
				      &cfg.writeback_ms))
				return 2;
			break;
		case 'A':
			cfg.addr_file = optarg;
			break;
		case 'Z':
			if (!msg_name_is_valid(optarg)) {
				fprintf(stderr,
					"farpage-node: --zone: '%s' is not a "
					"valid name (1-63 of A-Z a-z 0-9 . _ "
					"-)\n",
					optarg);
				return 2;
			}
			cfg.zone = optarg;
			break;
		case 'm':
			/* "" (an empty setting in the units): off */
			cfg.metrics_listen = *optarg ? optarg : NULL;
			break;
		case 'd':
			cfg.rdma_device = optarg;
			break;
		case 'k':
			/* "" (an empty setting in the units): the default */
			key_file = *optarg ? optarg : NULL;
			break;
		case 'i':
			cred.insecure = true;
			break;
		case 'e':
			ret = main_word("--page-encryption", optarg,
					main_on_off);
			if (ret < 0)
				return 2;
			cfg.page_encryption = ret == 0;
			break;
		case 'r':
			ret = main_word("--rdma-direct", optarg, main_on_off);
			if (ret < 0)
				return 2;
			cfg.rdma_no_direct = ret != 0;
			break;
		case 'D':
			if (main_uint("--rdma-depth", optarg, 1,
				      &cfg.rdma_depth))
				return 2;
			break;
		case 'G': {
			unsigned int g;

			if (main_uint("--gid-index", optarg, 0, &g) || g > 255)
				return 2;
			cfg.gid_index = (int)g;
			break;
		}
		case 'L':
			if (log_level_parse(optarg, &lvl)) {
				fprintf(stderr, "farpage-node: --log-level: "
						"err, warn, info or debug\n");
				return 2;
			}
			log_init("farpage-node", lvl);
			break;
		case 'h':
			main_usage(stdout);
			return 0;
		case 'V':
			printf("farpage-node %s\n", FARPAGE_VERSION);
			return 0;
		default:
			main_usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "farpage-node: unexpected argument '%s'\n",
			argv[optind]);
		main_usage(stderr);
		return 2;
	}
	if (!cfg.name) {
		if (gethostname(host, sizeof(host)))
			snprintf(host, sizeof(host), "node");
		host[sizeof(host) - 1] = '\0';
		cfg.name = host;
	}
	if (!msg_name_is_valid(cfg.name)) {
		fprintf(stderr,
			"farpage-node: --name: '%s' is not a valid name "
			"(1-63 of A-Z a-z 0-9 . _ -)\n",
			cfg.name);
		return 2;
	}

	if (main_addr_check("--coordinator", cfg.coordinator) ||
	    (cfg.data_listen &&
	     main_addr_check("--data-listen", cfg.data_listen)))
		return 2;
	main_allow_default(&cfg, allow_given);

	/* No key, or not this node's: a setting to fix, not to retry. */
	if (!cred.insecure && actl_cred_load(&cred, key_file, AUTH_ROLE_NODE,
					     cfg.name, why, sizeof(why))) {
		log_err("%s", why);
		return 2;
	}
	cfg.cred = &cred;

	signal(SIGPIPE, SIG_IGN);
	/* From here a stop is taken, also while the agent starts. */
	sa.sa_handler = main_on_signal;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	ret = agent_create(&cfg, &agent);
	OPENSSL_cleanse(&cred, sizeof(cred)); /* the agent has its copy */
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
	ret = main_stop ? 0 : agent_run(agent);
	log_info("stopping");
	agent_destroy(main_agent_release());
	return ret ? 1 : 0;
}
