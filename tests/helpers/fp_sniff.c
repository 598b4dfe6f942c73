// SPDX-License-Identifier: MIT
/*
 * fp_sniff: what an on-path host sees of a cluster's traffic, for
 * test_wire_capture.sh. A real packet socket, no tcpdump.
 *
 *   fp_sniff capture DIR READY
 *       In the current network namespace: an AF_PACKET socket on every
 *       interface; the payload of every IPv4 TCP segment received (frames
 *       an interface sends are left out, so a bridged frame counts once:
 *       where it came in) is appended to DIR/<src>-<dst>.tcp, one file per
 *       direction of a connection, in sequence order (bytes already
 *       written, e.g. a retransmission, are skipped). READY is written
 *       once the socket is open. On SIGTERM or SIGINT it reads what is
 *       queued, closes the files and prints "capture: segments=N bytes=N
 *       flows=N truncated=N drops=N" (drops: the kernel's count of frames
 *       it could not queue; truncated: frames longer than the buffer).
 *   fp_sniff search DIR CLUSTER_KEY [--names A,B,...] [--pages SEED N]...
 *                   [--string S]...
 *       Searches every .tcp file of DIR for what must never cross in clear: the
 *       cluster key's secret, the admin key, the node key of each name,
 *       the pair key of every two names, the CBOR text strings of the
 *       control messages' field names that carry or describe secrets
 *       ("pkey", "rkey", "mraddr", "daddr", "nodes"), each S as is, and
 *       the test pattern (common/pattern.h) of pages 0..N-1 of seed SEED:
 *       any of their first 8 words at any offset. Prints one line per
 *       find ("found: WHAT in FILE at OFFSET", the first few of each),
 *       then "search: files=N bytes=N found=K pattern_hits=P". Exits 0
 *       if nothing was found, 1 if something was, 2 on an error.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"
#include "pattern.h"

#define SNIFF_FRAME_MAX	 (256u << 10)
#define SNIFF_FLOWS_MAX	 900
#define SNIFF_RCVBUF	 (64 << 20)
#define SNIFF_SHOW_MAX	 3 /* finds printed per needle */
#define SNIFF_WORDS	 8 /* pattern words of each page looked for */
#define SNIFF_NEEDLE_MAX 96
#define SNIFF_AHEAD_MAX	 (64u << 20) /* bytes kept out of order, a flow */

static volatile sig_atomic_t sniff_stop;

static void sniff_on_signal(int sig)
{
	(void)sig;
	sniff_stop = 1;
}

/* A segment that came before those in front of it, kept until they do. */
struct sniff_seg {
	struct sniff_seg *next;
	uint32_t seq;
	size_t len;
	uint8_t data[];
};

struct sniff_flow {
	uint32_t saddr, daddr;
	uint16_t sport, dport;
	bool have_seq;
	uint32_t next_seq;	 /* the next byte to write */
	struct sniff_seg *ahead; /* by seq */
	size_t ahead_bytes;
	FILE *f;
};

struct sniff_cap {
	const char *dir;
	struct sniff_flow flows[SNIFF_FLOWS_MAX];
	unsigned int n_flows;
	uint64_t segments, bytes, truncated, lost_flows, gaps;
};

static struct sniff_flow *sniff_flow_get(struct sniff_cap *c, uint32_t saddr,
					 uint16_t sport, uint32_t daddr,
					 uint16_t dport)
{
	char path[512], s[INET_ADDRSTRLEN], d[INET_ADDRSTRLEN];
	struct sniff_flow *fl;

	for (unsigned int i = 0; i < c->n_flows; i++) {
		fl = &c->flows[i];
		if (fl->saddr == saddr && fl->daddr == daddr &&
		    fl->sport == sport && fl->dport == dport)
			return fl;
	}
	if (c->n_flows == SNIFF_FLOWS_MAX) {
		c->lost_flows++;
		return NULL;
	}
	inet_ntop(AF_INET, &saddr, s, sizeof(s));
	inet_ntop(AF_INET, &daddr, d, sizeof(d));
	snprintf(path, sizeof(path), "%s/%s_%u-%s_%u.tcp", c->dir, s,
		 ntohs(sport), d, ntohs(dport));
	fl = &c->flows[c->n_flows];
	memset(fl, 0, sizeof(*fl));
	fl->f = fopen(path, "ae");
	if (!fl->f) {
		fprintf(stderr, "fp_sniff: %s: %s\n", path, strerror(errno));
		c->lost_flows++;
		return NULL;
	}
	fl->saddr = saddr;
	fl->daddr = daddr;
	fl->sport = sport;
	fl->dport = dport;
	c->n_flows++;
	return fl;
}

/* Writes what of @data (at @seq, not past the flow's next byte) lies
 * past that byte. */
static void sniff_flow_write(struct sniff_cap *c, struct sniff_flow *fl,
			     uint32_t seq, const uint8_t *data, size_t len)
{
	uint32_t behind = fl->next_seq - seq;

	/* bytes written already (a retransmission) */
	if (behind >= len)
		return;
	data += behind;
	len -= behind;
	if (fwrite(data, 1, len, fl->f) != len)
		fprintf(stderr, "fp_sniff: write: %s\n", strerror(errno));
	fl->next_seq += (uint32_t)len;
	c->bytes += len;
}

/* The first kept segment, written as if its gap were filled. */
static void sniff_flow_skip(struct sniff_cap *c, struct sniff_flow *fl)
{
	struct sniff_seg *g = fl->ahead;

	fl->ahead = g->next;
	fl->ahead_bytes -= g->len;
	if ((int32_t)(g->seq - fl->next_seq) > 0)
		fl->next_seq = g->seq;
	sniff_flow_write(c, fl, g->seq, g->data, g->len);
	free(g);
}

/* Writes kept segments the stream has reached. */
static void sniff_flow_drain(struct sniff_cap *c, struct sniff_flow *fl)
{
	while (fl->ahead && (int32_t)(fl->ahead->seq - fl->next_seq) <= 0)
		sniff_flow_skip(c, fl);
}

/* A segment into its flow's stream: written in order of seq. */
static void sniff_flow_put(struct sniff_cap *c, struct sniff_flow *fl,
			   uint32_t seq, const uint8_t *data, size_t len)
{
	struct sniff_seg *g, **pp;

	if (!fl->have_seq) {
		fl->have_seq = true;
		fl->next_seq = seq;
	}
	if ((int32_t)(seq - fl->next_seq) <= 0) {
		sniff_flow_write(c, fl, seq, data, len);
		sniff_flow_drain(c, fl);
		return;
	}
	g = malloc(sizeof(*g) + len);
	if (!g) {
		fprintf(stderr, "fp_sniff: no memory for a segment\n");
		exit(2);
	}
	g->seq = seq;
	g->len = len;
	memcpy(g->data, data, len);
	for (pp = &fl->ahead; *pp && (int32_t)((*pp)->seq - seq) <= 0;
	     pp = &(*pp)->next)
		;
	g->next = *pp;
	*pp = g;
	fl->ahead_bytes += len;
	/* a segment the capture never saw: go on past its gap */
	while (fl->ahead_bytes > SNIFF_AHEAD_MAX) {
		c->gaps++;
		sniff_flow_skip(c, fl);
		sniff_flow_drain(c, fl);
	}
}

/* One received frame: its TCP payload into its flow's file. */
static void sniff_frame(struct sniff_cap *c, const uint8_t *p, size_t n)
{
	const struct ether_header *eh = (const void *)p;
	struct iphdr ip;
	struct tcphdr th;
	size_t ihl, thl, tot, len;
	const uint8_t *data;
	struct sniff_flow *fl;
	uint32_t seq;

	if (n < sizeof(*eh) || ntohs(eh->ether_type) != ETHERTYPE_IP)
		return;
	p += sizeof(*eh);
	n -= sizeof(*eh);
	if (n < sizeof(ip))
		return;
	memcpy(&ip, p, sizeof(ip));
	ihl = (size_t)ip.ihl * 4;
	tot = ntohs(ip.tot_len);
	/* a GSO frame past 64 KiB says 0: it is all there is */
	if (!tot || tot > n)
		tot = n;
	if (ip.version != 4 || ip.protocol != IPPROTO_TCP || ihl < 20 ||
	    tot < ihl + sizeof(th) || (ntohs(ip.frag_off) & 0x1fff))
		return;
	memcpy(&th, p + ihl, sizeof(th));
	thl = (size_t)th.doff * 4;
	if (thl < sizeof(th) || ihl + thl > tot)
		return;
	data = p + ihl + thl;
	len = tot - ihl - thl;
	seq = ntohl(th.seq);
	if (th.syn) {
		/* the stream starts after it: no segment is taken for a
		 * retransmission because a later one came first */
		fl = sniff_flow_get(c, ip.saddr, th.source, ip.daddr, th.dest);
		if (fl) {
			fl->have_seq = true;
			fl->next_seq = seq + 1;
		}
		return;
	}
	if (!len)
		return;
	c->segments++;
	fl = sniff_flow_get(c, ip.saddr, th.source, ip.daddr, th.dest);
	if (fl)
		sniff_flow_put(c, fl, seq, data, len);
}

static int sniff_capture(const char *dir, const char *ready)
{
	struct sigaction sa = { .sa_handler = sniff_on_signal };
	struct tpacket_stats st = { 0 };
	socklen_t sl = sizeof(st);
	struct sniff_cap *c;
	uint8_t *buf;
	int fd, rcv = SNIFF_RCVBUF;
	FILE *f;

	c = calloc(1, sizeof(*c));
	buf = malloc(SNIFF_FRAME_MAX);
	if (!c || !buf)
		return 2;
	c->dir = dir;
	fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
	if (fd < 0) {
		perror("fp_sniff: AF_PACKET socket");
		return 2;
	}
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcv, sizeof(rcv)))
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	f = fopen(ready, "we");
	if (!f || fputs("ready\n", f) < 0 || fclose(f)) {
		perror("fp_sniff: ready file");
		return 2;
	}
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		struct sockaddr_ll from;
		socklen_t fl = sizeof(from);
		ssize_t n;

		/* once stopped: what is queued still, then out */
		if (!sniff_stop && poll(&p, 1, 200) <= 0)
			continue;
		n = recvfrom(fd, buf, SNIFF_FRAME_MAX, MSG_TRUNC | MSG_DONTWAIT,
			     (struct sockaddr *)&from, &fl);
		if (n < 0) {
			if (errno == EAGAIN && sniff_stop)
				break;
			if (errno == EAGAIN || errno == EINTR)
				continue;
			perror("fp_sniff: recvfrom");
			return 2;
		}
		if (from.sll_pkttype == PACKET_OUTGOING)
			continue;
		if ((size_t)n > SNIFF_FRAME_MAX) {
			c->truncated++;
			n = SNIFF_FRAME_MAX;
		}
		sniff_frame(c, buf, (size_t)n);
	}
	getsockopt(fd, SOL_PACKET, PACKET_STATISTICS, &st, &sl);
	close(fd);
	for (unsigned int i = 0; i < c->n_flows; i++) {
		struct sniff_flow *fl = &c->flows[i];

		/* what never had its gap filled: a segment not seen */
		while (fl->ahead) {
			c->gaps++;
			sniff_flow_skip(c, fl);
			sniff_flow_drain(c, fl);
		}
		fclose(fl->f);
	}
	printf("capture: segments=%llu bytes=%llu flows=%u truncated=%llu "
	       "drops=%u lost_flows=%llu gaps=%llu\n",
	       (unsigned long long)c->segments, (unsigned long long)c->bytes,
	       c->n_flows, (unsigned long long)c->truncated, st.tp_drops,
	       (unsigned long long)c->lost_flows, (unsigned long long)c->gaps);
	free(buf);
	free(c);
	return 0;
}

/* ---- search ---- */

struct sniff_needle {
	char what[96];
	uint8_t b[SNIFF_NEEDLE_MAX];
	size_t len;
	unsigned int found;
};

struct sniff_search {
	struct sniff_needle *n;
	size_t n_needles, cap;
	/* pattern words: an open-addressing set, 0 = empty */
	uint64_t *words;
	uint32_t *word_page; /* page of each slot, for the report */
	uint64_t *word_seed;
	size_t word_slots;
	uint64_t pattern_hits;
	unsigned int found;
};

static int sniff_needle_add(struct sniff_search *s, const char *what,
			    const void *b, size_t len)
{
	struct sniff_needle *n;

	if (len > SNIFF_NEEDLE_MAX)
		return -EINVAL;
	if (s->n_needles == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 32;
		void *p = realloc(s->n, cap * sizeof(*s->n));

		if (!p)
			return -ENOMEM;
		s->n = p;
		s->cap = cap;
	}
	n = &s->n[s->n_needles++];
	memset(n, 0, sizeof(*n));
	snprintf(n->what, sizeof(n->what), "%.*s", (int)sizeof(n->what) - 1,
		 what);
	memcpy(n->b, b, len);
	n->len = len;
	return 0;
}

/* A field name as CBOR encodes a short text string: 0x60 | len, bytes. */
static int sniff_cbor_add(struct sniff_search *s, const char *name)
{
	uint8_t b[24];
	size_t l = strlen(name);
	char what[64];

	if (l > 23)
		return -EINVAL;
	b[0] = (uint8_t)(0x60 | l);
	memcpy(b + 1, name, l);
	snprintf(what, sizeof(what), "CBOR field name \"%s\"", name);
	return sniff_needle_add(s, what, b, l + 1);
}

static size_t sniff_slot(const struct sniff_search *s, uint64_t w)
{
	return (size_t)((w * 0x9e3779b97f4a7c15ull) >> 20) % s->word_slots;
}

static int sniff_pages_add(struct sniff_search *s, uint64_t seed,
			   uint64_t pages)
{
	size_t need = 0;

	for (size_t i = 0; i < s->word_slots; i++)
		need += s->words[i] != 0;
	need = 2 * (need + pages * SNIFF_WORDS) + 64;
	if (need > s->word_slots) {
		/* rebuild bigger */
		uint64_t *w = calloc(need, sizeof(*w)), *sd;
		uint32_t *pg = calloc(need, sizeof(*pg));
		size_t old = s->word_slots;
		uint64_t *ow = s->words, *osd = s->word_seed;
		uint32_t *opg = s->word_page;

		sd = calloc(need, sizeof(*sd));
		if (!w || !pg || !sd)
			return -ENOMEM;
		s->words = w;
		s->word_page = pg;
		s->word_seed = sd;
		s->word_slots = need;
		for (size_t i = 0; i < old; i++) {
			size_t k;

			if (!ow[i])
				continue;
			for (k = sniff_slot(s, ow[i]); s->words[k];
			     k = (k + 1) % s->word_slots)
				;
			s->words[k] = ow[i];
			s->word_page[k] = opg[i];
			s->word_seed[k] = osd[i];
		}
		free(ow);
		free(opg);
		free(osd);
	}
	for (uint64_t p = 0; p < pages; p++)
		for (uint64_t i = 0; i < SNIFF_WORDS; i++) {
			uint64_t v = pattern_word(seed, p, i);
			size_t k;

			if (!v)
				continue;
			for (k = sniff_slot(s, v);
			     s->words[k] && s->words[k] != v;
			     k = (k + 1) % s->word_slots)
				;
			s->words[k] = v;
			s->word_page[k] = (uint32_t)p;
			s->word_seed[k] = seed;
		}
	return 0;
}

static int sniff_keys_add(struct sniff_search *s, const char *keyfile,
			  const char *names)
{
	char why[200], what[200], *list, *save = NULL, *tok;
	const char *nm[64];
	unsigned int n = 0;
	struct auth_key c, k;
	uint8_t pk[AUTH_KEY_LEN];
	int ret = 0;

	if (auth_key_load(keyfile, &c, why, sizeof(why))) {
		fprintf(stderr, "fp_sniff: %s: %s\n", keyfile, why);
		return -EINVAL;
	}
	if (c.role != AUTH_ROLE_CLUSTER) {
		fprintf(stderr, "fp_sniff: %s: not a cluster key\n", keyfile);
		return -EINVAL;
	}
	ret = sniff_needle_add(s, "the cluster key", c.secret, AUTH_KEY_LEN);
	if (!ret && !auth_key_derive(&c, AUTH_ROLE_ADMIN, NULL, &k))
		ret = sniff_needle_add(s, "the admin key", k.secret,
				       AUTH_KEY_LEN);
	list = strdup(names ? names : "");
	if (!list)
		return -ENOMEM;
	for (tok = strtok_r(list, ",", &save); tok && n < 64;
	     tok = strtok_r(NULL, ",", &save))
		nm[n++] = tok;
	for (unsigned int i = 0; !ret && i < n; i++) {
		if (auth_key_derive(&c, AUTH_ROLE_NODE, nm[i], &k)) {
			fprintf(stderr, "fp_sniff: bad node name %s\n", nm[i]);
			ret = -EINVAL;
			break;
		}
		snprintf(what, sizeof(what), "the node key of %s", nm[i]);
		ret = sniff_needle_add(s, what, k.secret, AUTH_KEY_LEN);
		for (unsigned int j = i + 1; !ret && j < n; j++) {
			if (auth_pair_key(&c, nm[i], nm[j], pk)) {
				ret = -EINVAL;
				break;
			}
			snprintf(what, sizeof(what),
				 "the pair key of %s and %s", nm[i], nm[j]);
			ret = sniff_needle_add(s, what, pk, AUTH_KEY_LEN);
		}
	}
	free(list);
	return ret;
}

static void sniff_search_buf(struct sniff_search *s, const char *file,
			     const uint8_t *b, size_t len)
{
	unsigned int shown = 0;

	for (size_t i = 0; i < s->n_needles; i++) {
		struct sniff_needle *n = &s->n[i];
		const uint8_t *p = b, *end = b + len, *hit;

		while (p < end &&
		       (hit = memmem(p, (size_t)(end - p), n->b, n->len))) {
			if (n->found++ < SNIFF_SHOW_MAX)
				printf("found: %s in %s at %zu\n", n->what,
				       file, (size_t)(hit - b));
			s->found++;
			p = hit + 1;
		}
	}
	if (!s->word_slots)
		return;
	for (size_t i = 0; i + 8 <= len; i++) {
		uint64_t v;
		size_t k;

		memcpy(&v, b + i, 8);
		if (!v)
			continue;
		for (k = sniff_slot(s, v); s->words[k] && s->words[k] != v;
		     k = (k + 1) % s->word_slots)
			;
		if (!s->words[k])
			continue;
		s->pattern_hits++;
		if (shown++ < SNIFF_SHOW_MAX)
			printf("found: page pattern (seed %llu, page %u) in %s "
			       "at %zu\n",
			       (unsigned long long)s->word_seed[k],
			       s->word_page[k], file, i);
	}
}

static int sniff_search_dir(struct sniff_search *s, const char *dir)
{
	char pat[512];
	glob_t g = { 0 };
	uint64_t total = 0;
	size_t files;
	int ret;

	snprintf(pat, sizeof(pat), "%s/*.tcp", dir);
	ret = glob(pat, 0, NULL, &g);
	if (ret && ret != GLOB_NOMATCH)
		return 2;
	files = ret ? 0 : g.gl_pathc;
	ret = 0;
	for (size_t i = 0; !ret && i < files; i++) {
		const char *path = g.gl_pathv[i], *base = strrchr(path, '/');
		struct stat st;
		uint8_t *b = NULL;
		FILE *f;

		f = fopen(path, "re");
		if (!f || fstat(fileno(f), &st))
			ret = 2;
		else if (!(b = malloc((size_t)st.st_size + 1)) ||
			 fread(b, 1, (size_t)st.st_size, f) !=
				 (size_t)st.st_size)
			ret = 2;
		if (ret) {
			fprintf(stderr, "fp_sniff: cannot read %s\n", path);
		} else {
			sniff_search_buf(s, base ? base + 1 : path, b,
					 (size_t)st.st_size);
			total += (uint64_t)st.st_size;
		}
		free(b);
		if (f)
			fclose(f);
	}
	if (files)
		globfree(&g);
	if (ret)
		return ret;
	printf("search: files=%zu bytes=%llu found=%u pattern_hits=%llu\n",
	       files, (unsigned long long)total, s->found,
	       (unsigned long long)s->pattern_hits);
	return s->found || s->pattern_hits ? 1 : 0;
}

static int sniff_search(int argc, char **argv)
{
	static const char *const fields[] = { "pkey", "rkey", "mraddr", "daddr",
					      "nodes" };
	struct sniff_search s = { 0 };
	const char *names = NULL;
	int ret = 0;

	for (int i = 4; i < argc; i++) {
		if (!strcmp(argv[i], "--names") && i + 1 < argc) {
			names = argv[++i];
		} else if (!strcmp(argv[i], "--pages") && i + 2 < argc) {
			ret = sniff_pages_add(&s,
					      strtoull(argv[i + 1], NULL, 0),
					      strtoull(argv[i + 2], NULL, 0));
			i += 2;
		} else if (!strcmp(argv[i], "--string") && i + 1 < argc) {
			char what[96];

			snprintf(what, sizeof(what), "the string \"%.60s\"",
				 argv[i + 1]);
			ret = sniff_needle_add(&s, what, argv[i + 1],
					       strlen(argv[i + 1]));
			i++;
		} else {
			fprintf(stderr, "fp_sniff: bad argument %s\n", argv[i]);
			return 2;
		}
		if (ret)
			return 2;
	}
	if (sniff_keys_add(&s, argv[3], names))
		return 2;
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		if (sniff_cbor_add(&s, fields[i]))
			return 2;
	ret = sniff_search_dir(&s, argv[2]);
	free(s.n);
	free(s.words);
	free(s.word_page);
	free(s.word_seed);
	return ret;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 4 && !strcmp(argv[1], "capture"))
		return sniff_capture(argv[2], argv[3]);
	if (argc >= 4 && !strcmp(argv[1], "search"))
		return sniff_search(argc, argv);
	fprintf(stderr,
		"usage: fp_sniff capture DIR READY\n"
		"       fp_sniff search DIR CLUSTER_KEY [--names A,B,...] "
		"[--pages SEED N]... [--string S]...\n");
	return 2;
}
