// SPDX-License-Identifier: MIT
/*
 * farpage run: runs an unmodified, dynamically linked program with its
 * anonymous memory in a region.
 *
 * It checks the program can be preloaded (found, dynamically linked, of
 * this machine) and the region's size with the local agent, then execs the
 * program with libfarpage-run.so and jemalloc in LD_PRELOAD and the
 * region's name in the environment: the library maps the region before
 * main() and places the program's private anonymous mappings in it
 * (run/run_preload.c, docs/run.md).
 */
#include "cli.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "farpage.h"
#include "opts.h"
#include "run.h"
#include "run_id.h"
#include "util.h"

/* farpage run's own options. */
struct cli_run_opts {
	uint64_t cache, size;
	bool local, verbose, dry;
	const char *allocator, *preload;
};

static const struct opts_spec cli_run_spec;

/* --cache-size, --size: a size of at least o->min bytes. */
static int cli_run_set_size(const struct opts_opt *o, void *ctx,
			    const char *arg)
{
	uint64_t *v = (uint64_t *)(void *)((char *)ctx + o->off);

	if (util_size_parse(arg, v) < 0 || *v < o->min)
		return opts_usage_err(&cli_run_spec,
				      "--%s: '%s' is not a size (e.g. 64M, "
				      "1GiB)",
				      o->name, arg);
	return 0;
}

#define CLI_RUN_OFF(m) offsetof(struct cli_run_opts, m)

static const struct opts_opt cli_run_opts[] = {
	{ "cache-size", 0, "SIZE",
	  "the most of the program's memory the agent's cache keeps here "
	  "(e.g. 256M; default: the agent's own --cache-size bounds it, with "
	  "its other mappings); the rest lives at the region's owners",
	  OPTS_K_FN, cli_run_set_size, CLI_RUN_OFF(cache), 0, 0 },
	{ "local-only", 0, NULL,
	  "the same placement in local memory of the region's size instead "
	  "of the region (the ceiling to compare with): nothing is fetched, "
	  "--cache-size does not apply",
	  OPTS_K_TRUE, NULL, CLI_RUN_OFF(local), 0, 0 },
	{ "size", 0, "SIZE",
	  "with --local-only: the size of that memory, and no agent is asked "
	  "(default: the region's size, from the agent)",
	  OPTS_K_FN, cli_run_set_size, CLI_RUN_OFF(size), 1, 0 },
	{ "allocator", 0, "PATH|none",
	  "the malloc preloaded after the library (default: " RUN_ALLOCATOR_NAME
	  " from the dynamic loader's directories, Debian's libjemalloc2); "
	  "none: the program's own, whose memory glibc maps out of sight of "
	  "the library (it mostly stays local)",
	  OPTS_K_STR, NULL, CLI_RUN_OFF(allocator), 0, 0 },
	{ "preload", 0, "PATH",
	  "the library (default: $" RUN_PRELOAD_ENV ", else " RUN_PRELOAD_NAME
	  " in this program's build or install tree, else "
	  "in " FARPAGE_PRELOAD_DIR ")",
	  OPTS_K_STR, NULL, CLI_RUN_OFF(preload), 0, 0 },
	{ "dry-run", 0, NULL,
	  "print the environment and the command line, run nothing",
	  OPTS_K_TRUE, NULL, CLI_RUN_OFF(dry), 0, 0 },
	{ "verbose", 'v', NULL,
	  "a line before the program starts, and the library's counters when "
	  "it exits (ranges placed, bytes in use at most, discards)",
	  OPTS_K_TRUE, NULL, CLI_RUN_OFF(verbose), 0, 0 },
	{ "help", 'h', NULL, "this text", OPTS_K_HELP, NULL, 0, 0, 0 },
};

/* (at file scope: a line of the text is a line of the source) */
static const char cli_run_synopsis[] =
	"usage: farpage run [-v] [--cache-size SIZE]\n"
	"                   [--local-only [--size SIZE]]\n"
	"                   [--allocator PATH|none] [--preload PATH]\n"
	"                   [--dry-run] REGION -- PROGRAM [ARGS...]\n"
	"\n"
	"Runs PROGRAM, any dynamically linked program, unmodified, with its\n"
	"anonymous memory in region REGION, mapped through the local agent:\n"
	"its private anonymous mmap()s (its heap, with jemalloc preloaded)\n"
	"are placed in the region, which reads as zeroes for it; what the\n"
	"agent's cache does not keep here lives at the region's owners and\n"
	"is fetched when touched. munmap(), mremap() and madvise() keep\n"
	"their meaning. The map is writable: the region may have no other\n"
	"writable map in the cluster.\n"
	"\n"
	"Not placed (local memory): thread stacks, glibc's own allocations,\n"
	"MAP_SHARED memory, files. Refused: fork() once the program's\n"
	"memory is in the region (ENOMEM: the child would not have the\n"
	"heap), statically linked programs. The program's children run on\n"
	"local memory; an exec of the program itself (a wrapper script,\n"
	"#!/usr/bin/env) keeps the region.\n";

static const char cli_run_epilog[] =
	"These options may also follow REGION; everything after '--' (or\n"
	"from PROGRAM on) is the program's.\n"
	"\n"
	"Exits with PROGRAM's status; 1 if it could not be started (no\n"
	"agent, an unknown region, PROGRAM not found or statically linked,\n"
	"no allocator), 2 on a bad command line. PROGRAM exits 127 before\n"
	"main() if its memory cannot be put in the region (one line says\n"
	"why). docs/run.md: what is placed where, limits, the cache bound.\n";

static const struct opts_spec cli_run_spec = {
	.prog = "farpage run",
	.synopsis = cli_run_synopsis,
	.epilog = cli_run_epilog,
	.opts = cli_run_opts,
	.n = sizeof(cli_run_opts) / sizeof(cli_run_opts[0]),
	.usage_status = CLI_EXIT_USAGE,
	.stop_at_operand = true,
};

/* PROGRAM's file as execvp() finds it ($PATH when it has no '/') into
 * @out (PATH_MAX). Returns 0 or -errno (-ENOENT, -EACCES). */
static int cli_run_which(const char *prog, char *out)
{
	const char *path = getenv("PATH"), *p, *e;
	int err = -ENOENT;
	struct stat st;

	if (strchr(prog, '/')) {
		snprintf(out, PATH_MAX, "%s", prog);
		if (access(out, X_OK))
			return -errno;
		return 0;
	}
	if (!path)
		path = "/bin:/usr/bin"; /* execvp()'s default */
	for (p = path; *p; p = *e ? e + 1 : e) {
		int n;

		e = strchrnul(p, ':');
		/* an empty entry is the current directory */
		n = snprintf(out, PATH_MAX, "%.*s%s%s", (int)(e - p), p,
			     e > p ? "/" : "", prog);
		if (n >= PATH_MAX || stat(out, &st) || !S_ISREG(st.st_mode))
			continue;
		if (!access(out, X_OK))
			return 0;
		err = -EACCES;
	}
	return err;
}

/* This program's ELF machine (what the library was built for). */
static int cli_run_machine(void)
{
	Elf64_Ehdr eh;
	int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? pread(fd, &eh, sizeof(eh), 0) : -1;

	if (fd >= 0)
		close(fd);
	return n == (ssize_t)sizeof(eh) ? eh.e_machine : -1;
}

/* Whether ELF file @fd has a PT_INTERP (is dynamically linked): 1, 0, or
 * -1 if its program headers cannot be read. */
static int cli_run_has_interp(int fd, const Elf64_Ehdr *eh)
{
	for (unsigned int i = 0; i < eh->e_phnum; i++) {
		Elf64_Phdr ph;

		if (pread(fd, &ph, sizeof(ph),
			  (off_t)(eh->e_phoff +
				  (uint64_t)i * eh->e_phentsize)) !=
		    (ssize_t)sizeof(ph))
			return -1;
		if (ph.p_type == PT_INTERP)
			return 1;
	}
	return 0;
}

/*
 * Why the library cannot be preloaded into the program at @path (a
 * script: into its interpreter), or NULL if it can (or the file is
 * neither ELF nor a script: exec says what it is).
 */
static const char *cli_run_elf_why(const char *path, int depth)
{
	char buf[256], *interp, *end;
	const char *why = NULL;
	Elf64_Ehdr eh;
	struct stat st;
	ssize_t n;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	n = pread(fd, buf, sizeof(buf) - 1, 0);
	if (n > 2 && buf[0] == '#' && buf[1] == '!' && depth < 4) {
		buf[n] = 0;
		interp = buf + 2 + strspn(buf + 2, " \t");
		end = interp + strcspn(interp, " \t\n");
		*end = 0;
		close(fd);
		return *interp ? cli_run_elf_why(interp, depth + 1) : NULL;
	}
	if (n < (ssize_t)sizeof(eh) || memcmp(buf, ELFMAG, SELFMAG)) {
		close(fd);
		return NULL;
	}
	memcpy(&eh, buf, sizeof(eh));
	if (eh.e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh.e_machine != cli_run_machine())
		why = "is a program of another word size or machine: the "
		      "library is not loaded into it";
	else if (cli_run_has_interp(fd, &eh) == 0)
		why = "is statically linked: LD_PRELOAD cannot place its "
		      "memory";
	else if (!fstat(fd, &st) &&
		 (((st.st_mode & S_ISUID) && st.st_uid != geteuid()) ||
		  ((st.st_mode & S_ISGID) && st.st_gid != getegid())))
		why = "is set-user-ID or set-group-ID: the loader ignores "
		      "LD_PRELOAD for it";
	close(fd);
	return why;
}

/* @name's real path into @out (PATH_MAX) if it is a readable file in
 * directory @dir (@len bytes of it). */
static int cli_run_lib_in(const char *dir, size_t len, const char *name,
			  char *out)
{
	char cand[PATH_MAX + 64];

	if (!len || len >= PATH_MAX)
		return 0;
	snprintf(cand, sizeof(cand), "%.*s/%s", (int)len, dir, name);
	return realpath(cand, out) && !access(out, R_OK);
}

/*
 * The allocator to preload after the library into @out (PATH_MAX), ""
 * for none: --allocator, else libjemalloc.so.2 where the dynamic loader
 * looks ($LD_LIBRARY_PATH, then its system directories). Returns 0 or
 * -errno after saying why.
 */
static int cli_run_allocator(const char *opt, char *out)
{
	static const char *const sys[] = {
		"/usr/local/lib/" FARPAGE_LIBARCH,
		"/lib/" FARPAGE_LIBARCH,
		"/usr/lib/" FARPAGE_LIBARCH,
		"/usr/local/lib",
		"/lib",
		"/usr/lib",
	};
	const char *llp = getenv("LD_LIBRARY_PATH");

	*out = 0;
	if (opt && !strcmp(opt, "none"))
		return 0;
	if (opt) {
		if (!realpath(opt, out) || access(out, R_OK)) {
			int err = errno;

			cli_err("run: allocator %s: %s", opt, strerror(err));
			return -err;
		}
		return 0;
	}
	for (const char *p = llp; p && *p;) {
		size_t n = strcspn(p, ":");

		if (cli_run_lib_in(p, n, RUN_ALLOCATOR_NAME, out))
			return 0;
		p += n + (p[n] == ':');
	}
	for (size_t i = 0; i < sizeof(sys) / sizeof(sys[0]); i++)
		if (cli_run_lib_in(sys[i], strlen(sys[i]), RUN_ALLOCATOR_NAME,
				   out))
			return 0;
	cli_err("run: no %s (Debian package libjemalloc2) in $LD_LIBRARY_PATH, "
		"/usr/local/lib, /lib or /usr/lib: install it, or give "
		"--allocator PATH (or none: the program's own malloc, whose "
		"memory then mostly stays local)",
		RUN_ALLOCATOR_NAME);
	return -ENOENT;
}

/* Region @region's size from the agent, which looks it up with its own
 * node key. Returns 0 or CLI_EXIT_FAIL after saying why. */
static int cli_run_region_size(const struct cli *c, const char *region,
			       const struct cli_run_opts *o, uint64_t *out)
{
	struct farpage_map_opts mo = { .agent_sock = c->agent_sock };
	const char *hint = o->local ? " (or give --size)" : "";
	int ret;

	ret = farpage_region_size(region, &mo, out);
	if (ret == -ENOENT && access(c->agent_sock, F_OK) < 0)
		cli_err("run %s: no agent socket at %s%s", region,
			c->agent_sock, hint);
	else if (ret == -ECONNREFUSED)
		cli_err("run %s: no agent listens on %s%s", region,
			c->agent_sock, hint);
	else if (ret == -ENOENT)
		cli_err("run: no region '%s' (the agent at %s knows none)",
			region, c->agent_sock);
	else if (ret)
		cli_err("run %s: agent at %s: %s", region, c->agent_sock,
			farpage_strerror(ret));
	return ret ? CLI_EXIT_FAIL : 0;
}

/* A variable of the program's environment; value NULL: unset. */
struct cli_run_env {
	const char *name, *value;
};
#define CLI_RUN_N_ENV 10

/*
 * The program's environment: the library first in LD_PRELOAD (its mmap()
 * must win over the allocator's), then the allocator, then what was
 * there; jemalloc's options before the program's own; the library's
 * variables (every one of them: none inherited from elsewhere); @nums:
 * the cache's and the size's bytes and this process's run_id_self().
 * Strings in @ld and @mc are malloc'd for the caller to free. Returns 0
 * or -ENOMEM.
 */
static int cli_run_env_make(const struct cli *c, const char *region,
			    const struct cli_run_opts *o, const char *lib,
			    const char *alloc, char *nums[3],
			    struct cli_run_env *env, char **ld, char **mc)
{
	const char *old_ld = getenv("LD_PRELOAD"),
		   *old_mc = getenv("MALLOC_CONF");

	*mc = NULL;
	if (asprintf(ld, "%s%s%s%s%s", lib, *alloc ? ":" : "", alloc,
		     old_ld && *old_ld ? ":" : "",
		     old_ld && *old_ld ? old_ld : "") < 0) {
		*ld = NULL;
		return -ENOMEM;
	}
	if (*alloc && asprintf(mc, "%s%s%s", RUN_MALLOC_CONF,
			       old_mc && *old_mc ? "," : "",
			       old_mc && *old_mc ? old_mc : "") < 0) {
		*mc = NULL;
		return -ENOMEM;
	}
	env[0] = (struct cli_run_env){ "LD_PRELOAD", *ld };
	env[1] = (struct cli_run_env){ "MALLOC_CONF", *alloc ? *mc : old_mc };
	env[2] = (struct cli_run_env){ RUN_ENV_REGION, region };
	env[3] = (struct cli_run_env){ RUN_ENV_CACHE,
				       o->cache && !o->local ? nums[0] : NULL };
	env[4] = (struct cli_run_env){ RUN_ENV_LOCAL, o->local ? "1" : NULL };
	env[5] =
		(struct cli_run_env){ RUN_ENV_SIZE, o->local ? nums[1] : NULL };
	env[6] = (struct cli_run_env){ RUN_ENV_VERBOSE,
				       o->verbose ? "1" : NULL };
	env[7] = (struct cli_run_env){ FARPAGE_AGENT_SOCK_ENV, c->agent_sock };
	/* this process, which exec turns into the program */
	env[8] = (struct cli_run_env){ RUN_ENV_PID, nums[2] };
	env[9] = (struct cli_run_env){ RUN_ENV_MAPPED, NULL };
	return 0;
}

static int cli_run_env_set(const struct cli_run_env *env)
{
	for (int i = 0; i < CLI_RUN_N_ENV; i++) {
		if (env[i].value ? setenv(env[i].name, env[i].value, 1)
				 : unsetenv(env[i].name))
			return -errno;
	}
	return 0;
}

static void cli_run_print(const struct cli_run_env *env, char **argv)
{
	for (int i = 0; i < CLI_RUN_N_ENV; i++)
		if (env[i].value)
			printf("%s=%s\n", env[i].name, env[i].value);
	for (; *argv; argv++)
		printf("%s%s", *argv, argv[1] ? " " : "\n");
}

/*
 * Parses the command line: options, REGION, more options, "--", PROGRAM.
 * Returns -1 to go on (*@region, *@prog_i: PROGRAM's index), or the exit
 * code.
 */
static int cli_run_parse(int argc, char **argv, struct cli_run_opts *o,
			 const char **region, int *prog_i)
{
	int ret;

	ret = opts_parse(&cli_run_spec, argc, argv, o);
	if (ret != OPTS_GO_ON)
		return ret;
	if (optind >= argc)
		return opts_usage_err(&cli_run_spec, "missing the region name");
	*region = argv[optind++];
	if (!msg_name_is_valid(*region))
		return opts_usage_err(&cli_run_spec,
				      "'%s' is not a region name", *region);
	/* Ours may follow REGION too, up to "--" or PROGRAM. */
	if (optind < argc && strcmp(argv[optind], "--")) {
		ret = opts_parse(&cli_run_spec, argc, argv, o);
		if (ret != OPTS_GO_ON)
			return ret;
	}
	if (optind < argc && !strcmp(argv[optind], "--"))
		optind++;
	if (optind >= argc)
		return opts_usage_err(&cli_run_spec,
				      "missing the program after '%s --'",
				      *region);
	if (o->size && !o->local)
		return opts_usage_err(&cli_run_spec,
				      "--size is for --local-only (a region "
				      "has its own size)");
	*prog_i = optind;
	return -1;
}

/* What the program needs before it can be started: its file, checked;
 * the library; the allocator. Returns 0 or CLI_EXIT_FAIL after saying
 * why. */
static int cli_run_prepare(const char *prog, const struct cli_run_opts *o,
			   char *path, char *lib, char *alloc)
{
	const char *why;
	int ret;

	ret = cli_run_which(prog, path);
	if (ret) {
		cli_err("run: %s: %s", prog,
			ret == -ENOENT ? "command not found" : strerror(-ret));
		return CLI_EXIT_FAIL;
	}
	why = cli_run_elf_why(path, 0);
	if (why) {
		cli_err("run: %s %s", prog, why);
		return CLI_EXIT_FAIL;
	}
	if (cli_preload_find("run", o->preload, RUN_PRELOAD_ENV, "run",
			     RUN_PRELOAD_NAME, lib) ||
	    cli_run_allocator(o->allocator, alloc))
		return CLI_EXIT_FAIL;
	return 0;
}

int cli_run_run(const struct cli *c, int argc, char **argv)
{
	struct cli_run_opts o = { 0 };
	char path[PATH_MAX], lib[PATH_MAX], alloc[PATH_MAX];
	char cache_s[32], size_s[32], id[RUN_ID_LEN];
	char *nums[3] = { cache_s, size_s, id };
	struct cli_run_env env[CLI_RUN_N_ENV];
	char *ld = NULL, *mc = NULL, sz[32];
	const char *region = NULL;
	uint64_t size = 0;
	int ret, pi = 0;

	ret = cli_run_parse(argc, argv, &o, &region, &pi);
	if (ret >= 0)
		return ret;
	ret = cli_run_prepare(argv[pi], &o, path, lib, alloc);
	if (ret)
		return ret;
	if (o.local && o.size)
		size = (o.size + 4095) & ~4095ull;
	else if (cli_run_region_size(c, region, &o, &size))
		return CLI_EXIT_FAIL;

	snprintf(cache_s, sizeof(cache_s), "%llu", (unsigned long long)o.cache);
	snprintf(size_s, sizeof(size_s), "%llu", (unsigned long long)size);
	ret = run_id_self(id, sizeof(id));
	if (!ret)
		ret = cli_run_env_make(c, region, &o, lib, alloc, nums, env,
				       &ld, &mc);
	if (!ret && o.dry) {
		cli_run_print(env, argv + pi);
		goto out;
	}
	if (!ret)
		ret = cli_run_env_set(env);
	if (ret) {
		cli_err("run: setting the program's environment: %s",
			strerror(-ret));
		goto out;
	}
	if (o.verbose) {
		fprintf(stderr,
			"farpage run: %s's anonymous memory in %s %s (%s)%s%s, "
			"allocator %s\n",
			argv[pi], o.local ? "local memory for" : "region",
			region, cli_size_str(size, sz, sizeof(sz)),
			o.local ? "" : ", through the agent at ",
			o.local ? "" : c->agent_sock, *alloc ? alloc : "none");
		fflush(NULL);
	}
	execv(path, argv + pi);
	ret = -errno;
	cli_err("run: cannot run %s: %s", path, strerror(errno));
out:
	free(ld);
	free(mc);
	return ret ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
