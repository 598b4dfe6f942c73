// SPDX-License-Identifier: MIT
/*
 * farpage vm: runs an unmodified QEMU with its guest RAM in a region.
 *
 * It makes a memfd the size of the region, sealed against writes, keeps it
 * open across exec and starts QEMU with libfarpage-preload.so in
 * LD_PRELOAD, a file memory backend on that memfd (share=on) as the
 * machine's RAM, and -m the region's size. The preload library maps the
 * region where QEMU maps the file (vm/preload.c). If it is not loaded the
 * kernel refuses QEMU's writable map of the sealed file and QEMU stops.
 */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "farpage.h"
#include "vm.h"

static const char cli_vm_usage[] =
	"usage: farpage vm [--prefetch] [--movable] [--preload PATH] "
	"[--dry-run]\n"
	"                  REGION -- QEMU [QEMU OPTIONS]\n"
	"\n"
	"Runs QEMU (an unmodified qemu-system-*) with its guest RAM in region\n"
	"REGION, mapped through the local agent: pages other nodes own are\n"
	"fetched when the guest touches them, and what the guest writes goes\n"
	"home (at the agent's write-back period, on eviction from its cache,\n"
	"and all of it when QEMU exits). The map is writable, so the region\n"
	"may have no other writable map in the cluster.\n"
	"\n"
	"To QEMU's options it adds:\n"
	"  -object memory-backend-file,id=" VM_BACKEND_ID
	",size=SIZE,mem-path=/proc/self/fd/N,\n"
	"                               share=on,align=2M\n"
	"  -machine memory-backend=" VM_BACKEND_ID "\n"
	"  -m SIZE   (unless given; it must then be the region's size)\n"
	"so QEMU's options must not choose another RAM backend (-mem-path,\n"
	"memory-backend=, -numa ... memdev=). The guest's RAM is the region's\n"
	"size, a whole number of MiB.\n"
	"\n"
	"  --prefetch      the agent also fetches the pages not yet touched,\n"
	"                  in the background\n"
	"  --movable       the VM can be migrated to another host (farpage\n"
	"                  migrate): its RAM is mapped movable, and this\n"
	"                  host's chunks of it also go through the agent's\n"
	"                  cache\n"
	"  --preload PATH  the preload library (default: $" VM_PRELOAD_ENV
	", else\n"
	"                  " VM_PRELOAD_NAME
	" in this program's build or install\n"
	"                  tree, else in " FARPAGE_PRELOAD_DIR ")\n"
	"  --dry-run       print the QEMU command line and environment, run "
	"nothing\n"
	"These options may also follow REGION; everything from '--' (or from\n"
	"QEMU's binary) on is QEMU's.\n"
	"\n"
	"A QEMU started with -incoming (a migration's destination) maps the\n"
	"RAM incoming: the guest's first touch of it waits until the source\n"
	"hands the region's write lease over (farpage migrate).\n"
	"\n"
	"Exits with QEMU's status, or 1 if QEMU could not be started (the\n"
	"region is unknown, the preload library is missing, ...).\n"
	"docs/vm.md: sizes, faults while the VM runs, limits.\n";

/* Refuses QEMU options that would choose another RAM backend. Returns
 * CLI_VM_HAS_M | CLI_VM_INCOMING as QEMU's options have -m, -incoming, or
 * -EINVAL. */
#define CLI_VM_HAS_M	1
#define CLI_VM_INCOMING 2

static int cli_vm_args_check(int argc, char **argv)
{
	static const char *const bad[] = { "memory-backend=", "memdev=" };
	int has = 0;

	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "-m") || !strcmp(a, "--m"))
			has |= CLI_VM_HAS_M;
		if (!strcmp(a, "-incoming") || !strcmp(a, "--incoming"))
			has |= CLI_VM_INCOMING;
		if (!strcmp(a, "-mem-path") || !strcmp(a, "--mem-path") ||
		    !strcmp(a, "-mem-prealloc")) {
			cli_err("vm: QEMU option %s: farpage vm gives QEMU its "
				"RAM; remove it",
				a);
			return -EINVAL;
		}
		for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
			if (strstr(a, bad[k])) {
				cli_err("vm: QEMU argument '%s': farpage vm "
					"gives QEMU its RAM (%s); remove %s",
					a, VM_BACKEND_ID, bad[k]);
				return -EINVAL;
			}
		}
	}
	return has;
}

/* A memfd of @size QEMU can open but not map writable: only the preload
 * library's mmap() makes it the guest's RAM. The fd, or -errno. */
static int cli_vm_ram_file(const char *region, uint64_t size)
{
	char name[64 + MSG_NAME_MAX];
	int fd;

	snprintf(name, sizeof(name), "farpage-vm-%s", region);
	fd = memfd_create(name, MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) ||
	    fcntl(fd, F_ADD_SEALS,
		  F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL)) {
		int err = -errno;

		close(fd);
		return err;
	}
	return fd;
}

/* A variable QEMU's environment gets (cli_vm_run() sets them all). */
struct cli_vm_env {
	const char *name, *value;
};
#define CLI_VM_N_ENV 5

static void cli_vm_print(char **argv, const struct cli_vm_env *env, int n)
{
	for (int i = 0; i < n; i++)
		printf("%s=%s\n", env[i].name, env[i].value);
	for (; *argv; argv++)
		printf("%s%s", *argv, argv[1] ? " " : "\n");
}

/* The size of @region, which must be a whole number of MiB. Returns 0 or
 * CLI_EXIT_FAIL after saying why. */
static int cli_vm_region_size(const struct cli *c, const char *region,
			      uint64_t *out)
{
	struct farpage_map_opts o = { .agent_sock = c->agent_sock };
	uint64_t size;
	int ret;

	/* From the agent, with its node key: no admin key on this host. */
	ret = farpage_region_size(region, &o, &size);
	if (ret) {
		cli_err("vm %s: agent at %s: %s", region, c->agent_sock,
			farpage_strerror(ret));
		return CLI_EXIT_FAIL;
	}
	if (!size || size % (1u << 20)) {
		cli_err("vm: region %s is %llu bytes: guest RAM is a whole "
			"number of MiB",
			region, (unsigned long long)size);
		return CLI_EXIT_FAIL;
	}
	*out = size;
	return 0;
}

/* QEMU's command line: @qemu (@n_q words), then the memory backend @obj,
 * the machine's @mach and, unless it has one (@has_m), "-m @mem".
 * Returns it (calloc'd, the strings are the caller's) or NULL. */
static char **cli_vm_qargv(char **qemu, int n_q, int has_m, char *obj,
			   char *mach, char *mem)
{
	char **qargv, **q;

	qargv = calloc((size_t)n_q + 7, sizeof(*qargv));
	if (!qargv)
		return NULL;
	q = qargv;
	for (int i = 0; i < n_q; i++)
		*q++ = qemu[i];
	*q++ = (char *)"-object";
	*q++ = obj;
	*q++ = (char *)"-machine";
	*q++ = mach;
	if (!has_m) {
		*q++ = (char *)"-m";
		*q++ = mem;
	}
	*q = NULL;
	return qargv;
}

/* What farpage vm runs, on stderr before QEMU replaces it. */
static void cli_vm_say(const char *region, uint64_t size, const char *qemu,
		       const char *sock, const char *how)
{
	fprintf(stderr,
		"farpage vm: region %s (%llu MiB) as the guest RAM of %s, "
		"through the agent at %s%s\n",
		region, (unsigned long long)(size >> 20), qemu, sock, how);
	fflush(NULL);
}

/* farpage vm's own options. */
struct cli_vm_opts {
	const char *preload;
	int prefetch, movable, dry;
};

/*
 * Parses our options from optind up to the first operand or "--" ('+':
 * what follows is not ours). Returns -1 to go on, or the exit code.
 */
static int cli_vm_opts_parse(int argc, char **argv, struct cli_vm_opts *o)
{
	static const struct option opts[] = {
		{ "prefetch", no_argument, NULL, 'p' },
		{ "movable", no_argument, NULL, 'm' },
		{ "preload", required_argument, NULL, 'l' },
		{ "dry-run", no_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int ret;

	while ((ret = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
		switch (ret) {
		case 'p':
			o->prefetch = 1;
			break;
		case 'm':
			o->movable = 1;
			break;
		case 'l':
			o->preload = optarg;
			break;
		case 'n':
			o->dry = 1;
			break;
		case 'h':
			fputs(cli_vm_usage, stdout);
			return CLI_EXIT_OK;
		default:
			return cli_getopt_err(cli_vm_usage, "vm", ret, argv);
		}
	}
	return -1;
}

int cli_vm_run(const struct cli *c, int argc, char **argv)
{
	struct cli_vm_opts o = { 0 };
	const char *region, *ld;
	char preload[PATH_MAX];
	char obj[256 + PATH_MAX], mach[64], mem[32], fd_s[16], flags[64];
	char *ld_value = NULL;
	struct cli_vm_env env[CLI_VM_N_ENV];
	int has, fd = -1, ret, n_q;
	char **qargv = NULL;
	uint64_t size;

	ret = cli_vm_opts_parse(argc, argv, &o);
	if (ret >= 0)
		return ret;
	if (optind >= argc)
		return cli_usage_err(cli_vm_usage, "vm: missing region name");
	region = argv[optind++];
	/* Ours may follow REGION too, up to "--" or QEMU's binary. */
	if (optind < argc && strcmp(argv[optind], "--")) {
		ret = cli_vm_opts_parse(argc, argv, &o);
		if (ret >= 0)
			return ret;
	}
	if (optind < argc && !strcmp(argv[optind], "--"))
		optind++;
	if (optind >= argc)
		return cli_usage_err(cli_vm_usage,
				     "vm: missing the QEMU command after "
				     "'%s --'",
				     region);
	n_q = argc - optind;
	has = cli_vm_args_check(n_q, argv + optind);
	if (has < 0)
		return CLI_EXIT_USAGE;
	if (cli_preload_find("vm", o.preload, VM_PRELOAD_ENV, "vm",
			     VM_PRELOAD_NAME, preload))
		return CLI_EXIT_FAIL;

	if (cli_vm_region_size(c, region, &size))
		return CLI_EXIT_FAIL;
	fd = cli_vm_ram_file(region, size);
	if (fd < 0) {
		cli_err("vm: a memfd for QEMU to open: %s", strerror(-fd));
		return CLI_EXIT_FAIL;
	}

	snprintf(obj, sizeof(obj),
		 "memory-backend-file,id=%s,size=%lluM,mem-path=/proc/self/"
		 "fd/%d,share=on,align=2M",
		 VM_BACKEND_ID, (unsigned long long)(size >> 20), fd);
	snprintf(mach, sizeof(mach), "memory-backend=%s", VM_BACKEND_ID);
	snprintf(mem, sizeof(mem), "%lluM", (unsigned long long)(size >> 20));
	snprintf(fd_s, sizeof(fd_s), "%d", fd);
	ld = getenv("LD_PRELOAD");
	ret = -ENOMEM;
	if (asprintf(&ld_value, "%s%s%s", preload, ld && *ld ? ":" : "",
		     ld && *ld ? ld : "") < 0) {
		ld_value = NULL;
		goto out;
	}
	env[0] = (struct cli_vm_env){ "LD_PRELOAD", ld_value };
	env[1] = (struct cli_vm_env){ VM_ENV_REGION, region };
	env[2] = (struct cli_vm_env){ VM_ENV_FD, fd_s };
	/* A migration's destination takes the lease from the source. */
	snprintf(flags, sizeof(flags), "%s%s%s", o.prefetch ? "prefetch," : "",
		 o.movable ? "movable," : "",
		 has & CLI_VM_INCOMING ? "incoming," : "");
	env[3] = (struct cli_vm_env){ VM_ENV_FLAGS, flags };
	env[4] = (struct cli_vm_env){ FARPAGE_AGENT_SOCK_ENV, c->agent_sock };

	qargv = cli_vm_qargv(argv + optind, n_q, has & CLI_VM_HAS_M, obj, mach,
			     mem);
	if (!qargv)
		goto out;
	if (o.dry) {
		cli_vm_print(qargv, env, CLI_VM_N_ENV);
		ret = 0;
		goto out;
	}
	for (int i = 0; i < CLI_VM_N_ENV; i++) {
		if (setenv(env[i].name, env[i].value, 1)) {
			ret = -errno;
			goto out;
		}
	}
	cli_vm_say(region, size, qargv[0], c->agent_sock,
		   has & CLI_VM_INCOMING
			   ? " (incoming: it runs once the source "
			     "hands the region over)"
		   : o.movable ? " (movable)"
			       : "");
	execvp(qargv[0], qargv);
	ret = -errno;
	cli_err("vm: cannot run %s: %s", qargv[0], strerror(errno));
out:
	if (ret == -ENOMEM)
		cli_err("vm: out of memory");
	free(ld_value);
	free(qargv);
	close(fd);
	return ret ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
