// SPDX-License-Identifier: MIT
/*
 * libfarpage-run: the start (the constructor maps the region, or reserves
 * local memory, in the process `farpage run` started), the exit (the
 * counters), and fork() and daemon(), which the region does not survive.
 * run_preload.c has the rest.
 */
#define LOG_PREFIX "farpage run: "
#include "run_int.h"

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "farpage.h"
#include "log.h"
#include "run.h"
#include "run_id.h"

/* How long a map after an exec waits for the last image's write lease. */
#define RUN_LEASE_WAIT_S 10
#define RUN_LEASE_NAP_MS 50

typedef pid_t run_fork_fn(void);
typedef int run_daemon_fn(int nochdir, int noclose);

/*
 * The child of a fork() would not have the region (libfarpage mappings
 * are not inherited: the child would fault on its heap): refused, with
 * ENOMEM, which programs handle (Redis: "Can't save in background"), once
 * this image has placed anything in the region. Before that (a wrapper
 * script running commands before it execs the program) the child has
 * nothing there to miss: it runs on local memory, as a child does.
 * (A thread placing memory while another forks could still give the
 * child an allocator that points into the region: touching that is
 * SIGSEGV in the child, never wrong bytes.) vfork() and posix_spawn()
 * are fine: the child execs, and runs on local memory (it is not the
 * process `farpage run` started: run_is_mine()).
 */
pid_t fork(void)
{
	run_fork_fn *real = (run_fork_fn *)dlsym(RTLD_NEXT, "fork");
	pid_t pid;

	if (atomic_load(&run.base) && atomic_load(&run.placed)) {
		log_err("fork is not supported under farpage run: the child "
			"would not have the heap (%s); fork() fails with "
			"ENOMEM",
			run.label);
		atomic_fetch_add(&run.refused, 1);
		errno = ENOMEM;
		return -1;
	}
	if (!real) {
		errno = ENOSYS;
		return -1;
	}
	pid = real();
	if (!pid)
		atomic_store(&run.base, 0); /* all the kernel's from now */
	return pid;
}

/* glibc's daemon() forks inside libc, where fork() above cannot see it,
 * and the program goes on in the child: refused, or the program would
 * run on local memory. */
int daemon(int nochdir, int noclose)
{
	run_daemon_fn *real;

	if (atomic_load(&run.base)) {
		log_err("daemon() forks, and fork is not supported under "
			"farpage run: the child would not have the heap (%s); "
			"daemon() fails with ENOMEM; run the program in the "
			"foreground",
			run.label);
		atomic_fetch_add(&run.refused, 1);
		errno = ENOMEM;
		return -1;
	}
	real = (run_daemon_fn *)dlsym(RTLD_NEXT, "daemon");
	if (!real) {
		errno = ENOSYS;
		return -1;
	}
	return real(nochdir, noclose);
}

static void run_env_get(const char *name, char *dst, size_t len)
{
	const char *v = getenv(name);

	snprintf(dst, len, "%s", v ? v : "");
}

/*
 * Whether this process is the one `farpage run` started (or one it
 * exec'd itself into since): its children inherit the variables and run
 * on local memory. Started by hand without RUN_ENV_PID: it is, and its
 * children are told they are not.
 */
static int run_is_mine(void)
{
	const char *want = getenv(RUN_ENV_PID);
	char self[RUN_ID_LEN];

	if (run_id_self(self, sizeof(self)))
		return 0;
	if (!want)
		return !setenv(RUN_ENV_PID, self, 1);
	return !strcmp(want, self);
}

/* The program must not run with its memory elsewhere than asked: one line
 * saying why, and it ends before main(). */
static void run_fail(int err, const char *why)
{
	const char *sock = getenv(FARPAGE_AGENT_SOCK_ENV);

	if (!sock || !*sock)
		sock = FARPAGE_AGENT_SOCK_DEFAULT;
	if (run.local)
		log_errno(err, "%s: %s; %s not started (exit %d)", run.label,
			  why, program_invocation_short_name,
			  RUN_EXIT_NOREGION);
	else if (err == -ENOENT && access(sock, F_OK))
		log_err("cannot put %s's memory in region %s: no agent socket "
			"at %s; not started (exit %d)",
			program_invocation_short_name, run.region, sock,
			RUN_EXIT_NOREGION);
	else if (err == -ECONNREFUSED)
		log_err("cannot put %s's memory in region %s: no agent listens "
			"on %s; not started (exit %d)",
			program_invocation_short_name, run.region, sock,
			RUN_EXIT_NOREGION);
	else
		log_err("cannot put %s's memory in region %s through the agent "
			"at %s: %s: %s; not started (exit %d)",
			program_invocation_short_name, run.region, sock, why,
			farpage_strerror(err), RUN_EXIT_NOREGION);
	_exit(RUN_EXIT_NOREGION);
}

/* A number of bytes from the environment (RUN_ENV_*), or run_fail(). */
static uint64_t run_env_bytes(const char *name, const char *v)
{
	unsigned long long n;
	char *end;

	if (!*v)
		return 0;
	errno = 0;
	n = strtoull(v, &end, 10);
	if (errno || end == v || *end) {
		log_err("%s=%s is not a number of bytes", name, v);
		run_fail(-EINVAL, "the environment farpage run prepared");
	}
	return n;
}

/* dl_iterate_phdr(): the executable segment holding @fn, this
 * library's code, into run.text_*. */
static int run_text_find(struct dl_phdr_info *info, size_t size, void *fn)
{
	(void)size;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr;

		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) &&
		    (uintptr_t)fn - lo < ph->p_memsz) {
			run.text_lo = lo;
			run.text_len = ph->p_memsz;
			return 1;
		}
	}
	return 0;
}

/*
 * The region, mapped anonymous. After an exec of this process (a wrapper
 * script) the image before held the region's write lease until the exec
 * closed its connection: a refusal (-EBUSY) is asked again for a while.
 */
static int run_region_open(uint64_t cache, const char **why)
{
	struct timespec t0, now, nap = { 0, RUN_LEASE_NAP_MS * 1000000l };
	int ret, again = !!getenv(RUN_ENV_MAPPED);

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		ret = run_back_region_open(&run.back, run.region, cache, why);
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (ret != -EBUSY || !again ||
		    now.tv_sec - t0.tv_sec >= RUN_LEASE_WAIT_S)
			break;
		nanosleep(&nap, NULL);
	}
	/* (the variable goes to what this process execs into) */
	if (!ret && setenv(RUN_ENV_MAPPED, "1", 1)) {
		*why = "the environment";
		return -errno;
	}
	return ret;
}

/* The backing and the allocator over it. Returns 0 or -errno (*@why). */
static int run_open(uint64_t cache, uint64_t size, const char **why)
{
	struct run_range_free *slots;
	size_t n;
	int ret;

	if (run.local) {
		*why = "reserving local memory of its size";
		ret = run_back_local_open(&run.back, size);
	} else {
		ret = run_region_open(cache, why);
	}
	if (ret)
		return ret;
	/* Local memory the allocator's worst case needs (a free range
	 * every other page), reserved, touched as it is used. */
	n = run_range_slots(run.back.size, RUN_PAGE);
	slots = (void *)syscall(SYS_mmap, NULL, n * sizeof(*slots), RUN_RW,
				MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
				0);
	if (slots == MAP_FAILED) {
		*why = "reserving the allocator's table";
		return -errno;
	}
	*why = "its size";
	return run_range_init(&run.rr, run.back.size, RUN_PAGE, slots, n);
}

__attribute__((constructor)) static void run_init(void)
{
	char cache_s[32], size_s[32], local_s[8], verbose_s[8];
	const char *why = "";
	uint64_t cache, size;
	int ret;

	/* Loaded outside `farpage run`, or into a child of the program:
	 * does nothing. */
	if (!getenv(RUN_ENV_REGION) || !run_is_mine())
		return;
	log_init("farpage-run", LOG_INFO);
	run_env_get(RUN_ENV_REGION, run.region, sizeof(run.region));
	run_env_get(RUN_ENV_CACHE, cache_s, sizeof(cache_s));
	run_env_get(RUN_ENV_SIZE, size_s, sizeof(size_s));
	run_env_get(RUN_ENV_LOCAL, local_s, sizeof(local_s));
	run_env_get(RUN_ENV_VERBOSE, verbose_s, sizeof(verbose_s));
	run.local = !strcmp(local_s, "1");
	run.verbose = !strcmp(verbose_s, "1");
	snprintf(run.label, sizeof(run.label), "%s%s",
		 run.local ? "local memory in place of region " : "region ",
		 run.region);
	cache = run_env_bytes(RUN_ENV_CACHE, cache_s);
	size = run_env_bytes(RUN_ENV_SIZE, size_s);
	/* Read the time zone now: the first log line would (gmtime_r()),
	 * and it may come from inside the program's allocator. */
	tzset();
	/* (everything goes to the kernel until base is set) */
	ret = run_open(cache, size, &why);
	if (!ret &&
	    dl_iterate_phdr(run_text_find, (void *)run_text_find) != 1) {
		ret = -ENOENT;
		why = "finding the library's own code";
	}
	if (ret)
		run_fail(ret, why);
	run.size = run.back.size;
	atomic_store_explicit(&run.base, (uintptr_t)run.back.base,
			      memory_order_release);
	if (run.verbose)
		log_info("%s's anonymous memory goes to %s: %zu MiB at %p%s",
			 program_invocation_short_name, run.label,
			 run.size >> 20, run.back.base,
			 run.local ? ""
			 : cache   ? ", its cache bounded"
				   : "");
}

/*
 * At exit the region stays mapped, on purpose. Other threads may still
 * run, and destructors after this one still free() into it; and nothing
 * in it needs to go home: the memory is private and ends with the process
 * (farpage_unmap() would first send every written page home). The agent
 * drops the mapping when the process's connection closes.
 */
__attribute__((destructor)) static void run_fini(void)
{
	uint64_t used, used_max;

	if (!atomic_load(&run.base) || !run.verbose)
		return;
	pthread_mutex_lock(&run.lock);
	used = run.rr.used;
	used_max = run.rr.used_max;
	pthread_mutex_unlock(&run.lock);
	log_info("%s: placed=%" PRIu64 " in_use=%" PRIu64 " in_use_max=%" PRIu64
		 " size=%zu discards=%" PRIu64 " discarded=%" PRIu64
		 " refused=%" PRIu64 " lost=%" PRIu64,
		 run.label, (uint64_t)run.placed, used, used_max, run.size,
		 (uint64_t)run.discards, (uint64_t)run.discarded,
		 (uint64_t)run.refused, (uint64_t)run.lost);
}
