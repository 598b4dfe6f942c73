// SPDX-License-Identifier: MIT
/*
 * Benchmark helpers: clock, pinning, percentiles, options, the command
 * line, result lines.
 */
#include "bench.h"

#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

uint64_t bench_clock_ns(clockid_t clk)
{
	struct timespec ts;

	if (clock_gettime(clk, &ts))
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t bench_ns(void)
{
	return bench_clock_ns(CLOCK_MONOTONIC);
}

int bench_mcpu_read(struct bench_mcpu *m)
{
	unsigned long long v[8] = { 0 };
	char line[256];
	FILE *f;
	int n;

	*m = (struct bench_mcpu){ 0 };
	f = fopen("/proc/stat", "re");
	if (!f)
		return -errno;
	if (!fgets(line, sizeof(line), f))
		line[0] = '\0';
	fclose(f);
	n = sscanf(line, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0],
		   &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
	if (n < 8)
		return -EPROTO;
	/* user nice system idle iowait irq softirq steal */
	m->busy = v[0] + v[1] + v[2] + v[5] + v[6];
	m->t_ns = bench_ns();
	return 0;
}

double bench_mcpu_busy(const struct bench_mcpu *a, const struct bench_mcpu *b)
{
	long tck = sysconf(_SC_CLK_TCK);

	if (!a->t_ns || b->t_ns <= a->t_ns || b->busy < a->busy || tck <= 0)
		return 0;
	return (double)(b->busy - a->busy) / (double)tck /
	       ((double)(b->t_ns - a->t_ns) / 1e9);
}

int bench_cpu_pin(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return 0;
	if (cpu >= CPU_SETSIZE)
		return -EINVAL;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	/* pid 0 = the calling thread, not the whole process */
	if (sched_setaffinity(0, sizeof(set), &set) < 0)
		return -errno;
	return 0;
}

int bench_cpu_unpin(void)
{
	long n = sysconf(_SC_NPROCESSORS_CONF);
	cpu_set_t set;

	CPU_ZERO(&set);
	for (long i = 0; i < n && i < CPU_SETSIZE; i++)
		CPU_SET((int)i, &set);
	if (sched_setaffinity(0, sizeof(set), &set) < 0)
		return -errno;
	return 0;
}

int bench_cpu_now(void)
{
	return sched_getcpu();
}

uint64_t bench_pct(const uint64_t *v, size_t n, unsigned int permille)
{
	size_t rank;

	if (!n)
		return 0;
	rank = (n * permille + 999) / 1000;
	if (!rank)
		rank = 1;
	if (rank > n)
		rank = n;
	return v[rank - 1];
}

static int bench_u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

void bench_lat_summary(uint64_t *v, size_t n, struct bench_lat *st)
{
	double sum = 0;

	memset(st, 0, sizeof(*st));
	st->n = n;
	if (!n)
		return;
	qsort(v, n, sizeof(*v), bench_u64_cmp);
	for (size_t i = 0; i < n; i++)
		sum += (double)v[i];
	st->min = v[0];
	st->p50 = bench_pct(v, n, 500);
	st->p90 = bench_pct(v, n, 900);
	st->p99 = bench_pct(v, n, 990);
	st->p999 = bench_pct(v, n, 999);
	st->max = v[n - 1];
	st->mean = sum / (double)n;
}

int bench_lat_append(const char *path, const uint64_t *v, size_t n)
{
	FILE *f = fopen(path, "ae");
	int ret = 0;

	if (!f)
		return -errno;
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%llu\n", (unsigned long long)v[i]);
	if (ferror(f))
		ret = -EIO;
	if (fclose(f) && !ret)
		ret = -errno;
	return ret;
}

static int bench_opt_bad(const char *prog, const char *opt, const char *s)
{
	fprintf(stderr, "%s: %s: bad value '%s'\n", prog, opt, s);
	return -EINVAL;
}

int bench_opt_u64(const char *prog, const char *opt, const char *s,
		  uint64_t min, uint64_t max, uint64_t *out)
{
	uint64_t v;

	if (util_u64_parse(s, &v) || v < min || v > max)
		return bench_opt_bad(prog, opt, s);
	*out = v;
	return 0;
}

int bench_opt_size(const char *prog, const char *opt, const char *s,
		   uint64_t min, uint64_t max, uint64_t *out)
{
	uint64_t v;

	if (util_size_parse(s, &v) || v < min || v > max)
		return bench_opt_bad(prog, opt, s);
	*out = v;
	return 0;
}

int bench_opt_list(const char *prog, const char *opt, char *s, uint64_t min,
		   uint64_t max, unsigned int *v, unsigned int cap,
		   unsigned int *n)
{
	char *save = NULL, *w;
	uint64_t x;

	*n = 0;
	for (w = strtok_r(s, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
		if (*n == cap)
			return -EINVAL;
		if (bench_opt_u64(prog, opt, w, min, max, &x))
			return -EINVAL;
		v[(*n)++] = (unsigned int)x;
	}
	return *n ? 0 : -EINVAL;
}

int bench_opt_cpu(const char *prog, const char *opt, const char *s, int *out)
{
	uint64_t v;

	if (!strcmp(s, "none") || !strcmp(s, "-1")) {
		*out = -1;
		return 0;
	}
	if (util_u64_parse(s, &v) || v >= CPU_SETSIZE)
		return bench_opt_bad(prog, opt, s);
	*out = (int)v;
	return 0;
}

#define BENCH_CLI_OPTS_MAX 32
#define BENCH_CLI_COL	   20 /* where the option table's help starts */

/* The shared options, after a program's own. */
static const struct bench_opt bench_cli_common[] = {
	{ .name = "json",
	  .help = "one JSON object per line instead of key=value" },
	{ .name = "features",
	  .help = "one JSON line: this program's version, options and\n"
		  "features" },
	{ .name = "help", .help = "this text" },
	BENCH_OPT_END,
};

static void bench_cli_opt_usage(const struct bench_opt *o, FILE *f)
{
	const char *h = o->help, *nl;
	int w;

	w = fprintf(f, "  --%s%s%s", o->name, o->arg ? " " : "",
		    o->arg ? o->arg : "");
	if (w >= BENCH_CLI_COL) {
		fputc('\n', f);
		w = 0;
	}
	for (;;) {
		nl = strchr(h, '\n');
		fprintf(f, "%*s%.*s\n", BENCH_CLI_COL - w, "",
			(int)(nl ? nl - h : (ptrdiff_t)strlen(h)), h);
		if (!nl)
			break;
		h = nl + 1;
		w = 0;
	}
}

static void bench_cli_synopsis(const struct bench_cli *cli, FILE *f)
{
	const struct bench_opt *tabs[2] = { cli->opts, bench_cli_common };
	int indent = (int)strlen("usage: ") + (int)strlen(cli->prog);
	int col = fprintf(f, "usage: %s", cli->prog);
	char item[96];

	if (cli->pos)
		col += fprintf(f, " %s", cli->pos);
	for (int t = 0; t < 2; t++) {
		for (const struct bench_opt *o = tabs[t]; o->name; o++) {
			if (t == 1 && strcmp(o->name, "json"))
				continue;
			snprintf(item, sizeof(item), "[--%s%s%s]", o->name,
				 o->arg ? " " : "", o->arg ? o->arg : "");
			if (col + 1 + (int)strlen(item) > 72)
				col = fprintf(f, "\n%*s", indent, "") - 1;
			col += fprintf(f, " %s", item);
		}
	}
	fputc('\n', f);
}

void bench_cli_usage(const struct bench_cli *cli, FILE *f)
{
	if (cli->synopsis)
		fprintf(f, "usage: %s", cli->synopsis);
	else
		bench_cli_synopsis(cli, f);
	if (cli->about)
		fprintf(f, "\n%s", cli->about);
	fputc('\n', f);
	for (const struct bench_opt *o = cli->opts; o->name; o++)
		bench_cli_opt_usage(o, f);
	for (const struct bench_opt *o = bench_cli_common; o->name; o++)
		bench_cli_opt_usage(o, f);
}

/* --features: {"what": "features", "prog": P, "version": V, "options":
 * [...], "features": [...]}. Returns 0 or -errno. */
static int bench_cli_features(const struct bench_cli *cli)
{
	struct json_object *obj = json_object_new_object(), *opts, *feat;
	int err;

	opts = json_object_new_array();
	feat = json_object_new_array();
	err = obj && opts && feat ? 0 : -ENOMEM;
	if (!err)
		err = fp_json_set_str(obj, "what", "features") |
		      fp_json_set_str(obj, "prog", cli->prog) |
		      fp_json_set_str(obj, "version", FARPAGE_VERSION);
	for (const struct bench_opt *o = cli->opts; !err && o->name; o++)
		err = fp_json_push(opts, json_object_new_string(o->name));
	for (const char *const *s = cli->features; !err && s && *s; s++)
		err = fp_json_push(feat, json_object_new_string(*s));
	if (!err) {
		err = fp_json_set(obj, "options", opts);
		opts = NULL;
	}
	if (!err) {
		err = fp_json_set(obj, "features", feat);
		feat = NULL;
	}
	if (!err)
		err = fp_json_print(stdout, obj);
	json_object_put(opts);
	json_object_put(feat);
	json_object_put(obj);
	return err;
}

static int bench_cli_set(const struct bench_cli *cli, const struct bench_opt *o,
			 const char *arg)
{
	char name[64];
	char *copy;
	int ret;

	snprintf(name, sizeof(name), "--%s", o->name);
	switch (o->type) {
	case BENCH_OPT_FLAG:
		*(int *)o->dst = 1;
		return 0;
	case BENCH_OPT_STR:
		*(const char **)o->dst = arg;
		return 0;
	case BENCH_OPT_U64:
		return bench_opt_u64(cli->prog, name, arg, o->min, o->max,
				     o->dst);
	case BENCH_OPT_SIZE:
		return bench_opt_size(cli->prog, name, arg, o->min, o->max,
				      o->dst);
	case BENCH_OPT_CPU:
		return bench_opt_cpu(cli->prog, name, arg, o->dst);
	case BENCH_OPT_LIST:
		copy = strdup(arg);
		if (!copy)
			return -ENOMEM;
		ret = bench_opt_list(cli->prog, name, copy, o->min, o->max,
				     o->dst, o->cap, o->n);
		free(copy);
		if (ret)
			fprintf(stderr, "%s: %s: bad list '%s'\n", cli->prog,
				name, arg);
		return ret;
	case BENCH_OPT_FN:
		return o->parse(o->dst, name, arg);
	}
	return -EINVAL;
}

/* The getopt_long table of the program's options and the shared ones:
 * val = index into o[] (its own first), 'j', 'F', 'h' for the shared. */
static int bench_cli_table(const struct bench_cli *cli, struct option *lo)
{
	int n = 0;

	for (const struct bench_opt *o = cli->opts; o->name; o++, n++) {
		if (n == BENCH_CLI_OPTS_MAX)
			return -E2BIG;
		lo[n] = (struct option){ o->name,
					 o->arg ? required_argument
						: no_argument,
					 NULL, 256 + n };
	}
	lo[n++] = (struct option){ "json", no_argument, NULL, 'j' };
	lo[n++] = (struct option){ "features", no_argument, NULL, 'F' };
	lo[n++] = (struct option){ "help", no_argument, NULL, 'h' };
	lo[n] = (struct option){ 0 };
	return 0;
}

int bench_cli_parse(const struct bench_cli *cli, int argc, char **argv,
		    int *first)
{
	struct option lo[BENCH_CLI_OPTS_MAX + 4];
	int c;

	if (bench_cli_table(cli, lo)) {
		fprintf(stderr, "%s: too many options\n", cli->prog);
		return 2;
	}
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 'j':
			cli->out->json = 1;
			break;
		case 'F':
			return bench_cli_features(cli) ? 1 : 0;
		case 'h':
			bench_cli_usage(cli, stdout);
			return 0;
		default:
			if (c < 256) {
				bench_cli_usage(cli, stderr);
				return 2;
			}
			if (bench_cli_set(cli, &cli->opts[c - 256], optarg))
				return 2;
		}
	}
	if (first) {
		*first = optind;
	} else if (optind != argc) {
		fprintf(stderr, "%s: unexpected argument '%s'\n", cli->prog,
			argv[optind]);
		return 2;
	}
	return -1;
}

static void bench_out_key(struct bench_out *o, const char *key)
{
	printf(" %s=", key);
	o->n++;
}

void bench_out_begin(struct bench_out *o, const char *what)
{
	o->n = 0;
	o->err = 0;
	if (o->json) {
		o->obj = json_object_new_object();
		o->err = o->obj ? fp_json_set_str(o->obj, "what", what)
				: -ENOMEM;
	} else {
		printf("%s:", what);
	}
}

void bench_out_str(struct bench_out *o, const char *key, const char *val)
{
	if (o->json) {
		if (o->obj)
			o->err |= fp_json_set_str(o->obj, key, val);
		return;
	}
	bench_out_key(o, key);
	printf("%s", val);
}

void bench_out_u64(struct bench_out *o, const char *key, uint64_t val)
{
	if (o->json) {
		if (o->obj)
			o->err |= fp_json_set_u64(o->obj, key, val);
		return;
	}
	bench_out_key(o, key);
	printf("%llu", (unsigned long long)val);
}

void bench_out_int(struct bench_out *o, const char *key, int val)
{
	if (o->json) {
		if (o->obj)
			o->err |= fp_json_set_int(o->obj, key, val);
		return;
	}
	bench_out_key(o, key);
	printf("%d", val);
}

void bench_out_dbl(struct bench_out *o, const char *key, double val)
{
	/* 4 significant figures below 1000 are plenty for latencies */
	int decimals = val < 1000 ? 3 : 1;

	if (o->json) {
		if (o->obj)
			o->err |= fp_json_set_dbl(o->obj, key, val, decimals);
		return;
	}
	bench_out_key(o, key);
	printf("%.*f", decimals, val);
}

void bench_out_lat(struct bench_out *o, const struct bench_lat *st)
{
	bench_out_u64(o, "samples", st->n);
	bench_out_dbl(o, "p50_us", st->p50 / 1e3);
	bench_out_dbl(o, "p90_us", st->p90 / 1e3);
	bench_out_dbl(o, "p99_us", st->p99 / 1e3);
	bench_out_dbl(o, "p999_us", st->p999 / 1e3);
	bench_out_dbl(o, "max_us", st->max / 1e3);
	bench_out_dbl(o, "min_us", st->min / 1e3);
	bench_out_dbl(o, "mean_us", st->mean / 1e3);
}

void bench_out_end(struct bench_out *o)
{
	if (!o->json) {
		fputs("\n", stdout);
		fflush(stdout);
		return;
	}
	if (o->obj && !o->err)
		o->err = fp_json_print(stdout, o->obj);
	if (o->err)
		fprintf(stderr, "bench: JSON result: %s\n",
			strerror(o->err == -EIO ? EIO : ENOMEM));
	json_object_put(o->obj);
	o->obj = NULL;
}
