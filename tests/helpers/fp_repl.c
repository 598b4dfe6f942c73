// SPDX-License-Identifier: MIT
/*
 * fp_repl: the coordinator requests of replicated regions a shell test
 * needs while the CLI may not make them (test_replicas.sh). Authenticates
 * as the CLI does (admin, $FARPAGE_KEY_FILE), or --insecure.
 *
 *   fp_repl [--insecure] create COORD NAME SIZE REPLICAS
 *       REGION_CREATE NAME of SIZE bytes with REPLICAS replicas.
 *   fp_repl [--insecure] state COORD NAME
 *       REGION_GET NAME (wrepl): prints "state: replicas=R rgen=G
 *       missing=N rebuilding=N records=N" and, per replica, "rec: CHUNK
 *       REPLICA NODE OFF STATE".
 *   fp_repl [--insecure] compare COORD NAME SEED[:OLD]|- NODE=PID...
 *       REGION_GET NAME (wrepl), then every replica of every chunk read
 *       from its node's pool (agent NODE is process PID: its pool's
 *       memfds, through /proc/PID/fd; root) and compared page by page
 *       with the chunk's first replica, and with SEED's pattern unless
 *       "-" (a wrong page of seed OLD or one of the REPL_OLD_MAX - 1 before
 *       it, as the rounds of a test count, is named so). A
 *       line per differing page ("differ: ..."), per page not of
 *       the pattern ("wrong: ...") and per replica not SYNC ("notsync:
 *       ..."), the first REPL_SHOW_MAX of each, "chunk: C differ=N
 *       wrong=N" per chunk with any, then "compare: rgen=G
 *       chunks=N pages=N differ=N wrong=N notsync=N". Exit 1 if any count
 *       but chunks and pages is not 0.
 * COORD is one coordinator's address (host:port), not a list.
 * Exit 0, or 1 with the coordinator's error on stderr.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <unistd.h>

#include "actl.h"
#include "layout.h"
#include "msg.h"
#include "pattern.h"
#include "pool.h"

/* What memfd_create() names a pool segment (node/pool/pool.c). */
#define REPL_POOL_NAME "/memfd:farpage-pool"
/* Lines of each kind compare prints before it only counts. */
#define REPL_SHOW_MAX 32

static int repl_call(const char *coord, bool insecure, const struct msg *req,
		     struct msg *rep)
{
	struct actl_cred cred = { 0 };
	char why[400] = "";
	struct actl a;
	int ret;

	if (insecure)
		cred.insecure = true;
	else if (actl_cred_load(&cred, NULL, AUTH_ROLE_ADMIN, NULL, why,
				sizeof(why))) {
		fprintf(stderr, "fp_repl: %s\n", why);
		return -EPERM;
	}
	ret = actl_connect(coord, &cred, AUTH_ROLE_ADMIN, NULL, 10000, &a, why,
			   sizeof(why));
	if (ret) {
		fprintf(stderr, "fp_repl: %s: %s\n", coord,
			why[0] ? why : strerror(-ret));
		return ret;
	}
	ret = actl_call(&a, req, rep, 10000);
	actl_close(&a);
	if (!ret && rep->type == MSG_T_ERROR) {
		fprintf(stderr, "fp_repl: %s\n", rep->text);
		ret = -(int)(rep->err ? rep->err : EIO);
	}
	return ret;
}

static int repl_create(const char *coord, bool insecure, const char *name,
		       const char *size, const char *replicas)
{
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_REGION_CREATE);
	msg_strset(req.name, sizeof(req.name), name);
	req.size = strtoull(size, NULL, 0);
	req.replicas = strtoull(replicas, NULL, 0);
	ret = repl_call(coord, insecure, &req, &rep);
	msg_fini(&req);
	msg_fini(&rep);
	return ret ? 1 : 0;
}

/* A replicated region's layout as the coordinator has it now. */
struct repl_layout {
	struct msg rep;	      /* REGION */
	struct msg_chunk *ch; /* n_rec records, chunk-major */
	uint64_t r;	      /* replicas */
	uint64_t n_chunks;
	uint64_t n_rec;
};

static void repl_layout_fini(struct repl_layout *l)
{
	free(l->ch);
	l->ch = NULL;
	msg_fini(&l->rep);
}

/* REGION_GET @name with wrepl, its records expanded. Returns 0 or 1 (said
 * on stderr). */
static int repl_layout_get(const char *coord, bool insecure, const char *name,
			   struct repl_layout *l)
{
	struct msg req;
	int ret;

	l->ch = NULL;
	msg_init(&l->rep, MSG_T_NONE);
	msg_init(&req, MSG_T_REGION_GET);
	msg_strset(req.name, sizeof(req.name), name);
	req.want_repl = 1;
	ret = repl_call(coord, insecure, &req, &l->rep);
	msg_fini(&req);
	if (ret) {
		msg_fini(&l->rep);
		return 1;
	}
	ret = layout_msg_to_runs(&l->rep);
	l->r = l->rep.replicas ? l->rep.replicas : 1;
	l->n_chunks = layout_chunks_of(l->rep.size, l->rep.chunk_size);
	l->n_rec = l->n_chunks * l->r;
	/* fp_repl's own limits: three replicas, whole pages */
	if (!ret && (l->r > 3 || l->n_rec > UINT32_MAX ||
		     l->rep.chunk_size % PATTERN_PAGE))
		ret = -EBADMSG;
	if (!ret && l->n_rec)
		ret = layout_runs_expand(l->rep.runs, l->rep.n_runs,
					 l->rep.chunk_size, (uint32_t)l->n_rec,
					 &l->ch);
	if (ret) {
		fprintf(stderr, "fp_repl: region %s: %s\n", name,
			strerror(-ret));
		repl_layout_fini(l);
		return 1;
	}
	return 0;
}

/* The state of record @i (replica i % r of chunk i / r). */
static uint64_t repl_layout_state(const struct repl_layout *l, uint64_t i)
{
	for (uint32_t k = 0; k < l->rep.n_rstates; k++)
		if (l->rep.rstates[k].chunk == i / l->r &&
		    l->rep.rstates[k].replica == i % l->r)
			return l->rep.rstates[k].state;
	return MSG_RS_SYNC;
}

static int repl_state(const char *coord, bool insecure, const char *name)
{
	uint64_t missing = 0, rebuilding = 0;
	struct repl_layout l;

	if (repl_layout_get(coord, insecure, name, &l))
		return 1;
	for (uint32_t i = 0; i < l.rep.n_rstates; i++) {
		if (l.rep.rstates[i].state == MSG_RS_MISSING)
			missing++;
		else
			rebuilding++;
	}
	printf("state: replicas=%" PRIu64 " rgen=%" PRIu64 " missing=%" PRIu64
	       " rebuilding=%" PRIu64 " records=%" PRIu64 "\n",
	       l.r, l.rep.rgen, missing, rebuilding, l.n_rec);
	for (uint64_t i = 0; i < l.n_rec; i++)
		printf("rec: %" PRIu64 " %" PRIu64 " %" PRIu64 " %#" PRIx64
		       " %" PRIu64 "\n",
		       i / l.r, i % l.r, l.ch[i].node, l.ch[i].off,
		       repl_layout_state(&l, i));
	repl_layout_fini(&l);
	return 0;
}

/* ---- an agent's pool, read as root from outside ---- */

/*
 * Agent @node's pool: segment i (pool offset i * POOL_SEG) is the memfd
 * the agent maps at base + i * POOL_SEG, opened read-only through
 * /proc/PID/fd (the agent's own descriptor of it).
 */
struct repl_pool {
	uint64_t node;
	long pid;
	int *fds;
	uint32_t n_segs;
};

/* One mapping of a pool segment in /proc/PID/maps. */
struct repl_seg {
	uint64_t start;
	uint64_t ino;
	unsigned int maj, min;
};

static int repl_seg_cmp(const void *a, const void *b)
{
	const struct repl_seg *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

/* The pool's mappings, sorted; checked to be segments side by side. */
static int repl_pool_maps(struct repl_pool *p, struct repl_seg **out,
			  uint32_t *n_out)
{
	struct repl_seg *segs = NULL, *t;
	uint32_t n = 0, cap = 0;
	char path[64], line[512];
	int ret = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%ld/maps", p->pid);
	f = fopen(path, "re");
	if (!f) {
		ret = -errno;
		fprintf(stderr, "fp_repl: %s: %s\n", path, strerror(-ret));
		return ret;
	}
	while (fgets(line, sizeof(line), f)) {
		unsigned long long start, end, off, ino;
		unsigned int maj, min;
		int at = -1;

		if (sscanf(line, "%llx-%llx %*s %llx %x:%x %llu %n", &start,
			   &end, &off, &maj, &min, &ino, &at) != 6 ||
		    at < 0 ||
		    strncmp(line + at, REPL_POOL_NAME,
			    strlen(REPL_POOL_NAME)) ||
		    (line[at + strlen(REPL_POOL_NAME)] != ' ' &&
		     line[at + strlen(REPL_POOL_NAME)] != '\n'))
			continue;
		if (end - start != POOL_SEG || off) {
			fprintf(stderr,
				"fp_repl: agent %ld: a pool mapping of %llu "
				"bytes at file offset %llu, not one segment\n",
				p->pid, end - start, off);
			ret = -EPROTO;
			break;
		}
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			t = realloc(segs, cap * sizeof(*segs));
			if (!t) {
				ret = -ENOMEM;
				break;
			}
			segs = t;
		}
		segs[n++] = (struct repl_seg){ start, ino, maj, min };
	}
	fclose(f);
	if (!ret && !n) {
		fprintf(stderr, "fp_repl: agent %ld maps no %s\n", p->pid,
			REPL_POOL_NAME);
		ret = -ENOENT;
	}
	if (!ret)
		qsort(segs, n, sizeof(*segs), repl_seg_cmp);
	for (uint32_t i = 1; !ret && i < n; i++) {
		if (segs[i].start != segs[0].start + (uint64_t)i * POOL_SEG) {
			fprintf(stderr,
				"fp_repl: agent %ld: pool segments not side "
				"by side (segment %u at %#" PRIx64 ")\n",
				p->pid, i, segs[i].start);
			ret = -EPROTO;
		}
	}
	if (ret) {
		free(segs);
		return ret;
	}
	*out = segs;
	*n_out = n;
	return 0;
}

static void repl_pool_fini(struct repl_pool *p)
{
	for (uint32_t i = 0; p->fds && i < p->n_segs; i++)
		if (p->fds[i] >= 0)
			close(p->fds[i]);
	free(p->fds);
	p->fds = NULL;
	p->n_segs = 0;
}

/* Opens every segment of agent p->pid's pool. Returns 0 or -errno (said). */
static int repl_pool_open(struct repl_pool *p)
{
	struct repl_seg *segs = NULL;
	char dpath[64], path[336], link[256];
	struct dirent *e;
	uint32_t n = 0, found = 0;
	int ret;
	DIR *d;

	p->fds = NULL;
	p->n_segs = 0;
	ret = repl_pool_maps(p, &segs, &n);
	if (ret)
		return ret;
	p->fds = malloc(n * sizeof(*p->fds));
	if (!p->fds) {
		free(segs);
		return -ENOMEM;
	}
	p->n_segs = n;
	for (uint32_t i = 0; i < n; i++)
		p->fds[i] = -1;
	snprintf(dpath, sizeof(dpath), "/proc/%ld/fd", p->pid);
	d = opendir(dpath);
	if (!d) {
		ret = -errno;
		fprintf(stderr, "fp_repl: %s: %s\n", dpath, strerror(-ret));
		goto out;
	}
	while ((e = readdir(d))) {
		struct stat st;
		ssize_t len;
		uint32_t i;
		int fd;

		snprintf(path, sizeof(path), "%s/%s", dpath, e->d_name);
		len = readlink(path, link, sizeof(link) - 1);
		if (len < 0)
			continue;
		link[len] = '\0';
		if (strncmp(link, REPL_POOL_NAME, strlen(REPL_POOL_NAME)))
			continue;
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			ret = -errno;
			fprintf(stderr, "fp_repl: %s: %s\n", path,
				strerror(-ret));
			break;
		}
		if (fstat(fd, &st)) {
			ret = -errno;
			close(fd);
			break;
		}
		for (i = 0; i < n; i++)
			if (segs[i].ino == st.st_ino &&
			    segs[i].maj == major(st.st_dev) &&
			    segs[i].min == minor(st.st_dev))
				break;
		if (i == n || p->fds[i] >= 0) {
			close(fd); /* not mapped, or a second descriptor */
			continue;
		}
		p->fds[i] = fd;
		found++;
	}
	closedir(d);
	if (!ret && found != n) {
		fprintf(stderr,
			"fp_repl: agent %ld maps %u pool segments, holds "
			"descriptors of %u\n",
			p->pid, n, found);
		ret = -EPROTO;
	}
out:
	free(segs);
	if (ret)
		repl_pool_fini(p);
	return ret;
}

/* Page [@off, @off + PATTERN_PAGE) of pool @p into @buf. Returns 0 or
 * -errno. */
static int repl_pool_page(const struct repl_pool *p, uint64_t off, void *buf)
{
	uint64_t seg = off / POOL_SEG;
	ssize_t n;

	if (off % PATTERN_PAGE || seg >= p->n_segs)
		return -ERANGE;
	n = pread(p->fds[seg], buf, PATTERN_PAGE, (off_t)(off % POOL_SEG));
	if (n < 0)
		return -errno;
	return n == PATTERN_PAGE ? 0 : -EIO;
}

/* ---- compare ---- */

/* How many seeds before OLD compare tries on a wrong page (rounds). */
#define REPL_OLD_MAX 64

struct repl_cmp {
	uint64_t pages, differ, wrong, notsync;
	uint64_t seed, old; /* pages must be seed's; old only names them */
	bool check_seed, check_old;
};

/* Says page @page of replica @q is not k->seed's, and what it is. */
static void repl_cmp_wrong(const struct repl_cmp *k, uint64_t c, uint64_t page,
			   uint64_t q, uint64_t node, size_t words,
			   const uint64_t *w)
{
	char what[64] = "";
	bool zero = true;

	for (size_t i = 0; i < PATTERN_WORDS && zero; i++)
		zero = !w[i];
	if (zero)
		snprintf(what, sizeof(what), " (zero)");
	for (uint64_t s = k->old, i = 0;
	     !zero && k->check_old && i < REPL_OLD_MAX && i <= k->old; i++, s--)
		if (!pattern_check(w, s, page)) {
			snprintf(what, sizeof(what), " (seed %" PRIu64 ")", s);
			break;
		}
	printf("wrong: chunk %" PRIu64 " page %" PRIu64 " replica %" PRIu64
	       " (node %" PRIu64 "): %zu words not seed %" PRIu64 "%s\n",
	       c, page, q, node, words, k->seed, what);
}

static const char *repl_state_name(uint64_t st)
{
	return st == MSG_RS_SYNC	 ? "SYNC"
	       : st == MSG_RS_MISSING	 ? "MISSING"
	       : st == MSG_RS_REBUILDING ? "REBUILDING"
					 : "?";
}

static struct repl_pool *repl_pool_of(struct repl_pool *pools, int n_pools,
				      uint64_t node)
{
	for (int i = 0; i < n_pools; i++)
		if (pools[i].node == node)
			return &pools[i];
	return NULL;
}

/* Chunk @c: every replica's pages against replica 0's and the pattern. */
static int repl_cmp_chunk(const struct repl_layout *l, uint64_t c,
			  struct repl_pool *pools, int n_pools,
			  struct repl_cmp *k)
{
	uint64_t cs = l->rep.chunk_size, r = l->r;
	uint64_t len = l->rep.size - c * cs, pages;
	uint64_t differ = k->differ, wrong = k->wrong;
	uint64_t buf[3][PATTERN_WORDS];
	struct repl_pool *rp[3] = { NULL };
	bool use[3] = { false };

	if (len > cs)
		len = cs;
	pages = len / PATTERN_PAGE;
	for (uint64_t q = 0; q < r; q++) {
		const struct msg_chunk *rec = &l->ch[c * r + q];
		uint64_t st = repl_layout_state(l, c * r + q);

		use[q] = st == MSG_RS_SYNC;
		if (!use[q] && k->notsync++ < REPL_SHOW_MAX)
			printf("notsync: chunk %" PRIu64 " replica %" PRIu64
			       " node %" PRIu64 " %s\n",
			       c, q, rec->node, repl_state_name(st));
		if (!use[q])
			continue;
		rp[q] = repl_pool_of(pools, n_pools, rec->node);
		if (!rp[q]) {
			fprintf(stderr,
				"fp_repl: chunk %" PRIu64 " replica %" PRIu64
				" is on node %" PRIu64 ": no PID given\n",
				c, q, rec->node);
			return -ENOENT;
		}
		if (rec->off % PATTERN_PAGE || rec->off > UINT64_MAX - cs ||
		    rec->off + cs > (uint64_t)rp[q]->n_segs * POOL_SEG) {
			fprintf(stderr,
				"fp_repl: chunk %" PRIu64 " replica %" PRIu64
				" at %#" PRIx64 " is not inside node %" PRIu64
				"'s pool of %u segments\n",
				c, q, rec->off, rec->node, rp[q]->n_segs);
			return -ERANGE;
		}
	}
	for (uint64_t pg = 0; pg < pages; pg++) {
		uint64_t page = (c * cs) / PATTERN_PAGE + pg;
		int first = -1;

		for (uint64_t q = 0; q < r; q++) {
			const struct msg_chunk *rec = &l->ch[c * r + q];
			size_t words;
			int ret;

			if (!use[q])
				continue;
			ret = repl_pool_page(
				rp[q], rec->off + pg * PATTERN_PAGE, buf[q]);
			if (ret) {
				fprintf(stderr,
					"fp_repl: node %" PRIu64
					" page at %#" PRIx64 ": %s\n",
					rec->node, rec->off + pg * PATTERN_PAGE,
					strerror(-ret));
				return ret;
			}
			if (first < 0) {
				first = (int)q;
			} else if (memcmp(buf[first], buf[q], PATTERN_PAGE) &&
				   k->differ++ < REPL_SHOW_MAX) {
				printf("differ: chunk %" PRIu64 " page %" PRIu64
				       ": replica %d (node %" PRIu64
				       " off %#" PRIx64 ") and replica %" PRIu64
				       " (node %" PRIu64 " off %#" PRIx64 ")\n",
				       c, page, first,
				       l->ch[c * r + first].node,
				       l->ch[c * r + first].off +
					       pg * PATTERN_PAGE,
				       q, rec->node,
				       rec->off + pg * PATTERN_PAGE);
			}
			if (!k->check_seed)
				continue;
			words = pattern_check(buf[q], k->seed, page);
			if (words && k->wrong++ < REPL_SHOW_MAX)
				repl_cmp_wrong(k, c, page, q, rec->node, words,
					       buf[q]);
		}
		k->pages++;
	}
	if (k->differ != differ || k->wrong != wrong)
		printf("chunk: %" PRIu64 " differ=%" PRIu64 " wrong=%" PRIu64
		       "\n",
		       c, k->differ - differ, k->wrong - wrong);
	return 0;
}

static int repl_compare(const char *coord, bool insecure, const char *name,
			const char *seed, char **pairs, int n_pairs)
{
	struct repl_cmp k = { 0 };
	struct repl_pool *pools;
	struct repl_layout l;
	int ret = 0, n_pools = 0;

	if (strcmp(seed, "-")) {
		const char *at = seed;
		char *end;

		errno = 0;
		k.seed = strtoull(at, &end, 0);
		if (!errno && end != at && *end == ':') {
			at = end + 1;
			k.old = strtoull(at, &end, 0);
			k.check_old = true;
		}
		if (errno || end == at || *end) {
			fprintf(stderr, "fp_repl: bad seed '%s'\n", seed);
			return 2;
		}
		k.check_seed = true;
	}
	pools = calloc((size_t)n_pairs, sizeof(*pools));
	if (!pools)
		return 1;
	for (int i = 0; i < n_pairs; i++) {
		unsigned long long node;
		long pid;
		int at = -1;

		if (sscanf(pairs[i], "%llu=%ld%n", &node, &pid, &at) != 2 ||
		    at < 0 || pairs[i][at] || pid <= 0) {
			fprintf(stderr, "fp_repl: bad NODE=PID '%s'\n",
				pairs[i]);
			ret = 2;
			goto out;
		}
		pools[i].node = node;
		pools[i].pid = pid;
		if (repl_pool_open(&pools[i])) {
			ret = 1;
			goto out;
		}
		n_pools++;
	}
	if (repl_layout_get(coord, insecure, name, &l)) {
		ret = 1;
		goto out;
	}
	for (uint64_t c = 0; c < l.n_chunks && !ret; c++)
		if (repl_cmp_chunk(&l, c, pools, n_pools, &k))
			ret = 1;
	if (!ret) {
		printf("compare: rgen=%" PRIu64 " chunks=%" PRIu64
		       " pages=%" PRIu64 " differ=%" PRIu64 " wrong=%" PRIu64
		       " notsync=%" PRIu64 "\n",
		       l.rep.rgen, l.n_chunks, k.pages, k.differ, k.wrong,
		       k.notsync);
		ret = k.differ || k.wrong || k.notsync;
	}
	repl_layout_fini(&l);
out:
	for (int i = 0; i < n_pools; i++)
		repl_pool_fini(&pools[i]);
	free(pools);
	return ret;
}

int main(int argc, char **argv)
{
	bool insecure = argc > 1 && !strcmp(argv[1], "--insecure");

	argv += insecure;
	argc -= insecure;
	if (argc == 6 && !strcmp(argv[1], "create"))
		return repl_create(argv[2], insecure, argv[3], argv[4],
				   argv[5]);
	if (argc == 4 && !strcmp(argv[1], "state"))
		return repl_state(argv[2], insecure, argv[3]);
	if (argc >= 5 && !strcmp(argv[1], "compare"))
		return repl_compare(argv[2], insecure, argv[3], argv[4],
				    argv + 5, argc - 5);
	fprintf(stderr, "usage: fp_repl [--insecure] create COORD NAME SIZE "
			"REPLICAS | state COORD NAME | compare COORD NAME "
			"SEED[:OLD]|- NODE=PID...\n");
	return 2;
}
