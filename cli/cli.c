// SPDX-License-Identifier: MIT
/*
 * Helpers shared by the CLI commands: error lines, option values,
 * coordinator calls and the compact printing of chunk maps.
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actl.h"
#include "ctl.h"
#include "evl.h"
#include "farpage.h"
#include "net.h"
#include "util.h"

#define CLI_COLS	  80
#define CLI_OWNERS_FULL	  128 /* maps up to this many chunks print whole */
#define CLI_OWNERS_RUNS	  32  /* else as runs "1x512" if no more runs */
#define CLI_OWNERS_PERIOD 16  /* else as a repeated group up to this long */

void cli_err(const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "farpage: %s\n", line);
}

/*
 * The command words of @usage's first line ("usage: farpage region show
 * [--json] NAME" -> "farpage region show") into @buf.
 */
static const char *cli_usage_cmd(const char *usage, char *buf, size_t len)
{
	const char *p = usage, *w;
	size_t n = 0;

	if (!strncmp(p, "usage: ", 7))
		p += 7;
	buf[0] = '\0';
	while (*p && *p != '\n') {
		for (w = p; *p && *p != ' ' && *p != '\n'; p++)
			;
		/* Options, operands and ellipses end the command. */
		if (strspn(w, "abcdefghijklmnopqrstuvwxyz-") <
			    (size_t)(p - w) ||
		    *w == '-' || n + (size_t)(p - w) + 2 > len)
			break;
		n += (size_t)snprintf(buf + n, len - n, "%s%.*s", n ? " " : "",
				      (int)(p - w), w);
		while (*p == ' ')
			p++;
	}
	return n ? buf : "farpage";
}

int cli_usage_err(const char *usage, const char *fmt, ...)
{
	char line[1024], cmd[128];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	/* One line; the whole usage is a --help away (as the daemons say it). */
	fprintf(stderr, "farpage: %s\nTry '%s --help'.\n", line,
		cli_usage_cmd(usage, cmd, sizeof(cmd)));
	return CLI_EXIT_USAGE;
}

int cli_getopt_err(const char *usage, const char *cmd, int ret, char **argv)
{
	const char *arg = optind > 0 ? argv[optind - 1] : "?";

	if (ret == ':')
		return cli_usage_err(usage, "%s: option '%s' needs a value",
				     cmd, arg);
	if (optopt)
		return cli_usage_err(usage, "%s: unknown option '-%c'", cmd,
				     optopt);
	return cli_usage_err(usage, "%s: unknown option '%s'", cmd, arg);
}

int cli_opt_u64(const char *usage, const char *opt, const char *arg,
		uint64_t *out)
{
	if (util_u64_parse(arg, out) < 0) {
		cli_usage_err(usage, "%s: '%s' is not a number", opt, arg);
		return -EINVAL;
	}
	return 0;
}

int cli_opt_size(const char *usage, const char *opt, const char *arg,
		 uint64_t *out)
{
	if (util_size_parse(arg, out) < 0) {
		cli_usage_err(usage, "%s: '%s' is not a size (e.g. 64M, 1GiB)",
			      opt, arg);
		return -EINVAL;
	}
	return 0;
}

int cli_opt_ids(const char *usage, const char *opt, const char *arg,
		uint64_t **out, uint32_t *n)
{
	uint64_t *ids;
	char *copy, *tok, *save;
	uint32_t cnt = 1, i = 0;
	int ret = 0;

	for (const char *p = arg; *p; p++)
		cnt += *p == ',';
	ids = calloc(cnt, sizeof(*ids));
	copy = strdup(arg);
	if (!ids || !copy) {
		ret = -ENOMEM;
		cli_err("%s: %s", opt, strerror(ENOMEM));
		goto out_free;
	}
	for (tok = strtok_r(copy, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (util_u64_parse(tok, &ids[i]) < 0 || !ids[i] ||
		    ids[i] > UINT32_MAX) {
			cli_usage_err(usage, "%s: '%s' is not a node id", opt,
				      tok);
			ret = -EINVAL;
			goto out_free;
		}
		i++;
	}
	if (!i) {
		cli_usage_err(usage, "%s: empty list of node ids", opt);
		ret = -EINVAL;
		goto out_free;
	}
	free(copy);
	*out = ids;
	*n = i;
	return 0;
out_free:
	free(copy);
	free(ids);
	return ret;
}

/* The coordinator address calls start at: the one that answered last. */
static const char *cli_coord_addr(const struct cli *c)
{
	return c->coords && !c->coords->err ? c->coords->l.addr[c->coords->cur]
					    : c->coordinator;
}

/* What cli_coord_call() does with the outcome of a call (@said: the
 * failure is printed already). */
static int cli_coord_result(const struct cli *c, const char *what, int ret,
			    int said, struct msg *rep, enum msg_type want)
{
	if (said)
		return ret;
	/* No key, or the handshake refused: cli_coord_call_once() said so. */
	if ((ret == -EACCES || ret == -EPERM) && rep->type == MSG_T_NONE)
		return ret;
	if (ret < 0 && rep->type == MSG_T_ERROR) {
		cli_err("%s: %s", what,
			rep->text[0] ? rep->text : strerror(-ret));
		return ret;
	}
	if (ret < 0) {
		/* Nothing decoded: the coordinator is unreachable or broke
		 * the protocol; say which coordinator. */
		char why[NI_MAXHOST + 64];

		msg_init(rep, MSG_T_NONE);
		if (net_addr_unresolved(cli_coord_addr(c), why, sizeof(why))) {
			cli_err("%s: coordinator %s: %s", what,
				cli_coord_addr(c), why);
			return ret;
		}
		cli_err("%s: coordinator %s: %s%s", what, cli_coord_addr(c),
			strerror(-ret),
			ret == -EBADMSG && c->insecure
				? " (it may require a key: this call was "
				  "--insecure)"
				: "");
		return ret;
	}
	if (want != MSG_T_NONE && rep->type != want) {
		cli_err("%s: coordinator %s sent '%s', expected '%s'", what,
			cli_coord_addr(c), msg_type_name(rep->type),
			msg_type_name(want));
		return -EPROTO;
	}
	return 0;
}

/* The admin key (loaded at the first call; -EPERM printed if it cannot
 * be), or NULL. */
static const struct actl_cred *cli_coord_cred(const struct cli *c)
{
	static struct actl_cred cred;
	static int cred_ret = 1; /* 1: not loaded yet */
	char why[400];

	if (cred_ret == 1) {
		if (c->insecure) {
			cli_err("warning: --insecure: traffic with coordinator "
				"%s is unauthenticated and unencrypted: anyone "
				"on the path can read and change it",
				c->coordinator);
			cred.insecure = true;
			cred_ret = 0;
		} else {
			cred_ret = actl_cred_load(&cred, c->key_file,
						  AUTH_ROLE_ADMIN, NULL, why,
						  sizeof(why));
			if (cred_ret)
				cli_err("%s", why);
		}
	}
	return cred_ret ? NULL : &cred;
}

/*
 * The connection of this command to the coordinator: one session for all
 * its calls (`status` makes 2 + one per region), so that the coordinator
 * logs one session per command.
 */
static struct cli_conn {
	char addr[ADDRLIST_ADDR_LEN];
	struct actl a;
	bool open;
} cli_conn;

static void cli_conn_close(void)
{
	if (!cli_conn.open)
		return;
	actl_close(&cli_conn.a);
	cli_conn.open = false;
}

/* True if the idle connection is of no more use: the coordinator closed
 * it, or sent what nobody asked for. */
static bool cli_conn_stale(void)
{
	struct pollfd p = { .fd = cli_conn.a.fd, .events = POLLIN };

	return poll(&p, 1, 0) != 0;
}

/* One call to @addr on the command's connection (made, or made again if
 * it is to another address or closed); a refused handshake's reason in
 * @why. Returns as actl_connect(), then as actl_call(). */
static int cli_coord_call_at(const struct cli *c, const char *addr,
			     const struct actl_cred *cred,
			     const struct msg *req, struct msg *rep, char *why,
			     size_t why_len)
{
	static bool registered;
	int ret;

	why[0] = '\0';
	if (cli_conn.open && (strcmp(cli_conn.addr, addr) || cli_conn_stale()))
		cli_conn_close();
	if (!cli_conn.open) {
		ret = actl_connect(addr, cred, AUTH_ROLE_ADMIN, NULL,
				   c->timeout_ms, &cli_conn.a, why, why_len);
		if (ret)
			return ret;
		snprintf(cli_conn.addr, sizeof(cli_conn.addr), "%s", addr);
		cli_conn.open = true;
		if (!registered)
			registered = !atexit(cli_conn_close);
	}
	ret = actl_call(&cli_conn.a, req, rep, c->timeout_ms);
	/* Nothing decoded: the connection is in an unknown state. */
	if (ret < 0 && rep->type == MSG_T_NONE)
		cli_conn_close();
	return ret;
}

/*
 * The call round the list (cli.h): from the address that answered last,
 * on to the next while one fails on the connection (@rep empty) or is not
 * the leader. If none answers, each one's line is printed (*@said).
 */
static int cli_coord_call_list(const struct cli *c, const char *what,
			       const struct actl_cred *cred,
			       const struct msg *req, struct msg *rep,
			       int *said)
{
	struct cli_coords *cc = c->coords;
	char why[400], lines[ADDRLIST_MAX][ADDRLIST_ADDR_LEN + 420];
	uint32_t at = cc->cur;
	int ret = 0;

	for (uint32_t i = 0; i < cc->l.n; i++, at = addrlist_next(&cc->l, at)) {
		msg_init(rep, MSG_T_NONE);
		ret = cli_coord_call_at(c, cc->l.addr[at], cred, req, rep, why,
					sizeof(why));
		if (!ret ||
		    (rep->type != MSG_T_NONE && ret != -COORD_ERR_NOT_LEADER)) {
			cc->cur = at;
			return ret;
		}
		if (!why[0] && rep->type != MSG_T_ERROR)
			net_addr_unresolved(cc->l.addr[at], why, sizeof(why));
		snprintf(lines[i], sizeof(lines[i]), "coordinator %s: %s",
			 cc->l.addr[at],
			 why[0] ? why
			 : rep->type == MSG_T_ERROR && rep->text[0]
				 ? rep->text
				 : strerror(-ret));
		msg_fini(rep);
		msg_init(rep, MSG_T_NONE);
	}
	for (uint32_t i = 0; i < cc->l.n; i++)
		cli_err("%s: %s", what, lines[i]);
	*said = 1;
	return ret;
}

/*
 * One call on a connection of its own, authenticated with the admin key
 * (loaded at the first call). A key that cannot be loaded (-EPERM) or a
 * refused handshake (-EACCES) is printed here, and @rep stays empty. With
 * several coordinators, as cli_coord_call_list().
 */
static int cli_coord_call_once(const struct cli *c, const char *what,
			       const struct msg *req, struct msg *rep,
			       int *said)
{
	const struct actl_cred *cred;
	char why[400];
	int ret;

	*said = 0;
	/* A bad address is said before a missing key. */
	if (c->coords && c->coords->err) {
		cli_err("%s: --coordinator: %s", what, c->coords->why);
		*said = 1;
		return -EINVAL;
	}
	cred = cli_coord_cred(c);
	if (!cred)
		return -EPERM;
	if (c->coords && c->coords->l.n > 1)
		return cli_coord_call_list(c, what, cred, req, rep, said);
	ret = cli_coord_call_at(c, cli_coord_addr(c), cred, req, rep, why,
				sizeof(why));
	/* not connected: refused (or no key for the role) */
	if (rep->type == MSG_T_NONE && (ret == -EACCES || (ret && why[0]))) {
		cli_err("%s: coordinator %s: %s", what, cli_coord_addr(c), why);
		return ret == -EACCES ? ret : -EACCES;
	}
	return ret;
}

int cli_coord_call(const struct cli *c, const char *what, const struct msg *req,
		   struct msg *rep, enum msg_type want)
{
	int ret, said;

	msg_init(rep, MSG_T_NONE);
	ret = cli_coord_call_once(c, what, req, rep, &said);
	return cli_coord_result(c, what, ret, said, rep, want);
}

int cli_coord_call_wait(const struct cli *c, const char *what,
			const struct msg *req, struct msg *rep,
			enum msg_type want, unsigned int wait_ms)
{
	uint64_t deadline = evl_now_ms() + wait_ms;
	int ret, said = 0, printed;

	for (;;) {
		msg_init(rep, MSG_T_NONE);
		ret = cli_coord_call_once(c, what, req, rep, &printed);
		if (ret != -EAGAIN || rep->type != MSG_T_ERROR ||
		    evl_now_ms() >= deadline)
			break;
		if (!said)
			fprintf(stderr, "farpage: %s: %s; waiting up to %u s\n",
				what, rep->text, wait_ms / 1000);
		said = 1;
		msg_fini(rep);
		usleep(CLI_RETRY_MS * 1000);
	}
	return cli_coord_result(c, what, ret, printed, rep, want);
}

const char *cli_repl_health(const struct msg *r, uint32_t *lost,
			    uint32_t *missing, uint32_t *rebuilding)
{
	uint64_t R = r->replicas ? r->replicas : 1;
	uint32_t l = 0, m = 0, b = 0, short_ = 0;

	for (uint32_t i = 0; i < r->n_rstates;) {
		uint64_t c = r->rstates[i].chunk, bad = 0;

		for (; i < r->n_rstates && r->rstates[i].chunk == c; i++) {
			m += r->rstates[i].state == MSG_RS_MISSING;
			b += r->rstates[i].state == MSG_RS_REBUILDING;
			bad++;
		}
		short_++;
		l += bad >= R;
	}
	*lost = l;
	*missing = m;
	*rebuilding = b;
	return l ? "lost" : short_ ? "degraded" : "ok";
}

void cli_progress_start(struct cli_progress *p, const struct cli *c,
			const char *what, uint64_t total)
{
	cli_progress_start_unit(p, c, what, total, "pages", 4096);
}

void cli_progress_start_unit(struct cli_progress *p, const struct cli *c,
			     const char *what, uint64_t total, const char *unit,
			     uint64_t unit_bytes)
{
	memset(p, 0, sizeof(*p));
	p->what = what;
	p->unit = unit;
	p->unit_bytes = unit_bytes;
	p->total = total;
	p->on = total && !c->quiet && isatty(STDERR_FILENO);
	p->t0_ms = evl_now_ms();
}

void cli_progress_set(struct cli_progress *p, uint64_t done)
{
	uint64_t now, ms, left;
	double mbs;
	char eta[32];

	if (!p->on)
		return;
	now = evl_now_ms();
	if (now - p->last_ms < CLI_PROGRESS_MS)
		return;
	p->last_ms = now;
	ms = now - p->t0_ms;
	if (done > p->total)
		done = p->total;
	mbs = ms ? (double)done * (double)p->unit_bytes / 1e6 /
			      ((double)ms / 1000)
		 : 0;
	if (done && done < p->total) {
		left = (uint64_t)((double)ms * (double)(p->total - done) /
				  (double)done / 1000);
		snprintf(eta, sizeof(eta), "ETA %llu:%02llu",
			 (unsigned long long)(left / 60),
			 (unsigned long long)(left % 60));
	} else {
		snprintf(eta, sizeof(eta), "ETA -:--");
	}
	/* \033[K: the rest of the line, of a longer line before */
	fprintf(stderr, "\r%s: %llu/%llu %s (%llu%%) %.0f MB/s %s\033[K",
		p->what, (unsigned long long)done, (unsigned long long)p->total,
		p->unit, (unsigned long long)(done * 100 / p->total), mbs, eta);
	fflush(stderr);
	p->drawn = true;
}

void cli_progress_end(struct cli_progress *p)
{
	if (p->drawn)
		fputs("\r\033[K", stderr);
	p->drawn = false;
}

uint64_t cli_region_chunks(const struct msg_region *r)
{
	uint64_t R = r->replicas ? r->replicas : 1;

	/* The list leaves the chunk maps out. */
	if (!r->n_chunks && r->chunk_size)
		return (r->size + r->chunk_size - 1) / r->chunk_size;
	return r->n_chunks / R;
}

const char *cli_size_str(uint64_t bytes, char *buf, size_t len)
{
	util_size_fmt(bytes, buf, len);
	return buf;
}

int cli_chunks_count(const struct msg_chunk *chunks, uint32_t n, uint64_t **ids,
		     uint64_t **counts, uint32_t *n_ids)
{
	uint64_t *id = NULL, *cnt = NULL, *tmp;
	uint32_t u = 0, cap = 0, j;

	for (uint32_t i = 0; i < n; i++) {
		/* Few distinct owners: a linear search is enough. */
		for (j = 0; j < u && id[j] != chunks[i].node; j++)
			;
		if (j < u) {
			cnt[j]++;
			continue;
		}
		if (u == cap) {
			cap = cap ? 2 * cap : 8;
			tmp = realloc(id, cap * sizeof(*id));
			if (!tmp)
				goto err;
			id = tmp;
			tmp = realloc(cnt, cap * sizeof(*cnt));
			if (!tmp)
				goto err;
			cnt = tmp;
		}
		id[u] = chunks[i].node;
		cnt[u++] = 1;
	}
	/* By node id; insertion sort, there are few. */
	for (uint32_t i = 1; i < u; i++) {
		uint64_t ki = id[i], kc = cnt[i];

		for (j = i; j > 0 && id[j - 1] > ki; j--) {
			id[j] = id[j - 1];
			cnt[j] = cnt[j - 1];
		}
		id[j] = ki;
		cnt[j] = kc;
	}
	*ids = id;
	*counts = cnt;
	*n_ids = u;
	return 0;
err:
	free(id);
	free(cnt);
	return -ENOMEM;
}

/* A line of words folded at CLI_COLS, continuation lines aligned. */
struct cli_fold {
	FILE *f;
	const char *indent;
	size_t col;
	size_t hang; /* columns of the label the words follow */
};

static void cli_fold_start(struct cli_fold *fo, FILE *f, const char *indent,
			   const char *label)
{
	fo->f = f;
	fo->indent = indent;
	fo->hang = strlen(label);
	fo->col = strlen(indent) + fo->hang;
	fprintf(f, "%s%s", indent, label);
}

static void cli_fold_word(struct cli_fold *fo, const char *word)
{
	size_t len = strlen(word);

	if (fo->col + 1 + len > CLI_COLS &&
	    fo->col > strlen(fo->indent) + fo->hang) {
		fprintf(fo->f, "\n%s%*s", fo->indent, (int)fo->hang, "");
		fo->col = strlen(fo->indent) + fo->hang;
	}
	fprintf(fo->f, " %s", word);
	fo->col += 1 + len;
}

static void cli_fold_end(struct cli_fold *fo)
{
	fputc('\n', fo->f);
}

/* Smallest p <= max such that the map repeats with period p, or 0. */
static uint32_t cli_chunks_period(const struct msg_chunk *chunks, uint32_t n,
				  uint32_t max)
{
	for (uint32_t p = 1; p <= max && p < n; p++) {
		uint32_t i;

		for (i = p; i < n && chunks[i].node == chunks[i - p].node; i++)
			;
		if (i == n)
			return p;
	}
	return 0;
}

void cli_chunks_print(FILE *f, const char *indent,
		      const struct msg_chunk *chunks, uint32_t n)
{
	uint64_t *ids = NULL, *counts = NULL;
	struct cli_fold fo;
	uint32_t n_ids, runs = 0, period, limit = n;
	char word[64];

	if (!n) {
		fprintf(f, "%sowners: (no chunks)\n", indent);
		return;
	}
	if (!cli_chunks_count(chunks, n, &ids, &counts, &n_ids)) {
		cli_fold_start(&fo, f, indent, "chunks per node:");
		for (uint32_t i = 0; i < n_ids; i++) {
			snprintf(word, sizeof(word), "%llu=%llu",
				 (unsigned long long)ids[i],
				 (unsigned long long)counts[i]);
			cli_fold_word(&fo, word);
		}
		cli_fold_end(&fo);
		free(ids);
		free(counts);
	}

	for (uint32_t i = 0; i < n; i++)
		runs += !i || chunks[i].node != chunks[i - 1].node;
	period = cli_chunks_period(chunks, n, CLI_OWNERS_PERIOD);

	cli_fold_start(&fo, f, indent, "owners:");
	if (n > CLI_OWNERS_FULL && runs <= CLI_OWNERS_RUNS) {
		/* Blocks of chunks per owner: "1x512 2x512". */
		for (uint32_t i = 0, len = 1; i < n; i++, len++) {
			if (i + 1 < n && chunks[i + 1].node == chunks[i].node)
				continue;
			snprintf(word, sizeof(word), "%llux%u",
				 (unsigned long long)chunks[i].node, len);
			cli_fold_word(&fo, word);
			len = 0;
		}
	} else if (n > CLI_OWNERS_FULL && period) {
		/* Interleaved: "(1 2)x512", then a partial group if any. */
		char group[CLI_OWNERS_PERIOD * 12 + 16];
		size_t pos = 0;

		for (uint32_t i = 0; i < period; i++)
			pos += snprintf(group + pos, sizeof(group) - pos,
					"%s%llu", i ? " " : "(",
					(unsigned long long)chunks[i].node);
		snprintf(group + pos, sizeof(group) - pos, ")x%u", n / period);
		cli_fold_word(&fo, group);
		for (uint32_t i = n - n % period; i < n; i++) {
			snprintf(word, sizeof(word), "%llu",
				 (unsigned long long)chunks[i].node);
			cli_fold_word(&fo, word);
		}
	} else {
		if (n > CLI_OWNERS_FULL)
			limit = CLI_OWNERS_FULL;
		for (uint32_t i = 0; i < limit; i++) {
			snprintf(word, sizeof(word), "%llu",
				 (unsigned long long)chunks[i].node);
			cli_fold_word(&fo, word);
		}
		if (limit < n) {
			snprintf(word, sizeof(word),
				 "... (%u more; see region show)", n - limit);
			cli_fold_word(&fo, word);
		}
	}
	cli_fold_end(&fo);
}

int cli_map(const struct cli *c, const char *what, const char *name,
	    unsigned int flags, struct farpage_map **m)
{
	struct farpage_map_opts mo = { .agent_sock = c->agent_sock,
				       .flags = flags };
	int ret;

	ret = farpage_map(name, &mo, m);
	if (ret == -ENOENT && access(c->agent_sock, F_OK) < 0)
		cli_err("%s: no agent socket at %s", what, c->agent_sock);
	else if (ret == -ECONNREFUSED)
		cli_err("%s: no agent listens on %s", what, c->agent_sock);
	else if (ret < 0)
		cli_err("%s: cannot map it through the agent at %s: %s", what,
			c->agent_sock, farpage_strerror(ret));
	return ret;
}

int cli_help_json(const char *usage, const char *cmd, int argc, char **argv,
		  int *json)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "json", no_argument, NULL, 'j' },
		{ 0 },
	};
	int ret;

	while ((ret = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (ret == 'h') {
			fputs(usage, stdout);
			return CLI_EXIT_OK;
		}
		if (ret == 'j' && json) {
			*json = 1;
			continue;
		}
		if (ret == 'j')
			return cli_usage_err(
				usage, "%s: unknown option '--json'", cmd);
		return cli_getopt_err(usage, cmd, ret, argv);
	}
	return -1;
}

int cli_help_only(const char *usage, const char *cmd, int argc, char **argv)
{
	return cli_help_json(usage, cmd, argc, argv, NULL);
}

int cli_preload_find(const char *cmd, const char *opt, const char *env,
		     const char *subdir, const char *name, char *out)
{
	char exe[PATH_MAX], sub[64];
	const char *const dirs[][2] = {
		{ exe, sub },
		{ exe, "/" FARPAGE_PRELOAD_RELDIR },
		{ "", FARPAGE_PRELOAD_DIR },
	};
	ssize_t n;

	if (!opt)
		opt = getenv(env);
	if (opt && *opt) {
		if (!realpath(opt, out) || access(out, R_OK)) {
			int err = errno;

			cli_err("%s: preload library %s: %s", cmd, opt,
				strerror(err));
			return -err;
		}
		return 0;
	}
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return -errno;
	exe[n] = 0;
	*strrchr(exe, '/') = 0;
	snprintf(sub, sizeof(sub), "/../%s", subdir);
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		char cand[PATH_MAX + 256];

		snprintf(cand, sizeof(cand), "%s%s/%s", dirs[i][0], dirs[i][1],
			 name);
		if (realpath(cand, out) && !access(out, R_OK))
			return 0;
	}
	cli_err("%s: no %s in %s/../%s, %s/%s or %s; give --preload PATH", cmd,
		name, exe, subdir, exe, FARPAGE_PRELOAD_RELDIR,
		FARPAGE_PRELOAD_DIR);
	return -ENOENT;
}
