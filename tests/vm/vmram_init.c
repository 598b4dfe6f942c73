// SPDX-License-Identifier: MIT
/*
 * fp_vmram_init: /init (PID 1) of the initramfs tests/vm/vmram-boot.sh
 * boots. Writes common/pattern.h's pattern over a range of guest-physical
 * RAM that the kernel command line reserved (memmap=SIZE$BASE), reads it
 * back, reports on the console and powers the VM off.
 *
 * Kernel command line: fpvm.base=B fpvm.size=S (bytes, or with a K, M or G
 * suffix; page-aligned) fpvm.seed=N [fpvm.expect=E] (decimal or 0x hex).
 * Page i of the range is guest-physical page B/4096 + i and holds
 * pattern(seed, B/4096 + i), so the host finds the same bytes at offset
 * B + i*4096 of the guest's RAM backend. The range is mapped through
 * /dev/mem: CONFIG_STRICT_DEVMEM refuses System RAM, but E820 reserved
 * ranges above 1 MiB are neither RAM nor claimed by a driver. mmap(), not
 * read()/write(): those end at the kernel's direct map (EFAULT above it).
 *
 * Console lines (the only output):
 *   vm-ram: boot-to-init S.SSS s
 *   vm-ram: prev seed=E pages=N mismatches=M        (with fpvm.expect)
 *   vm-ram: write N pages X MB/s, read-check Y MB/s
 *   vm-ram: ok pages=N mismatches=0                 (or vm-ram: FAIL ...)
 *
 * With fpvm.loop=1 (a VM that migrates while it writes) the guest writes
 * seed N's pattern, then round by round seed N+1's, N+2's, ...: each page
 * is checked to hold the previous round's pattern just before it is
 * overwritten, so a write lost anywhere (a page of the source that never
 * reached the destination) is seen on the page it hit. It prints
 *   vm-ram: loop round R ok                         (every round)
 * looks at the console's input between rounds, and on a "q" line checks
 * the last round once more and ends:
 *   vm-migrate: ok pages=N mismatches=0 rounds=R seed=S
 * S = N + R is the pattern the range holds when the VM powers off.
 * fpvm.rate=M paces the writes at M MiB/s (default: as fast as it can);
 * fpvm.idle=1 writes no round: the guest only waits for the "q" line (an
 * idle VM) and checks seed N's pattern.
 * A FAIL verdict is also written to QEMU's isa-debug-exit port (0xf4), if
 * the VM has one, so QEMU exits with status 3 rather than 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/io.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "pattern.h"

/* QEMU's -device isa-debug-exit,iobase=0xf4: writing V exits with 2V+1 */
#define VMRAM_EXIT_PORT 0xf4
#define VMRAM_CMDLINE	4096

struct vmram_cfg {
	uint64_t base;
	uint64_t size;
	uint64_t seed;
	uint64_t expect;
	uint64_t loop;
	uint64_t rate; /* MiB/s, 0: unpaced */
	uint64_t idle;
	bool has_base, has_size, has_seed, has_expect;
};

static double vmram_now(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One console line per call, in one write(). */
__attribute__((format(printf, 2, 3))) static void
vmram_say(int con, const char *fmt, ...)
{
	char line[256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	if (write(con, line, (size_t)n) < 0)
		return;
}

/* Returns 0 and the value of "123", "0x7b", "64M", or -EINVAL. */
static int vmram_parse_u64(const char *s, bool suffix, uint64_t *out)
{
	unsigned long long v;
	unsigned int shift = 0;
	char *end;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
		v = strtoull(s + 2, &end, 16);
	else
		v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	if (suffix && *end) {
		switch (*end++) {
		case 'k':
		case 'K':
			shift = 10;
			break;
		case 'm':
		case 'M':
			shift = 20;
			break;
		case 'g':
		case 'G':
			shift = 30;
			break;
		default:
			return -EINVAL;
		}
	}
	if (*end)
		return -EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

/* The value of @word if it starts with @key ("fpvm.seed="), else NULL. */
static const char *vmram_param(const char *word, const char *key)
{
	size_t len = strlen(key);

	return strncmp(word, key, len) ? NULL : word + len;
}

/*
 * Takes one word of the kernel command line into @cfg if it is an fpvm.*
 * parameter. Returns 0, or -EINVAL if its value is bad.
 */
static int vmram_cfg_word(struct vmram_cfg *cfg, const char *word)
{
	const char *v;
	int ret = 0;

	if ((v = vmram_param(word, "fpvm.base="))) {
		ret = vmram_parse_u64(v, true, &cfg->base);
		cfg->has_base = true;
	} else if ((v = vmram_param(word, "fpvm.size="))) {
		ret = vmram_parse_u64(v, true, &cfg->size);
		cfg->has_size = true;
	} else if ((v = vmram_param(word, "fpvm.seed="))) {
		ret = vmram_parse_u64(v, false, &cfg->seed);
		cfg->has_seed = true;
	} else if ((v = vmram_param(word, "fpvm.expect="))) {
		ret = vmram_parse_u64(v, false, &cfg->expect);
		cfg->has_expect = true;
	} else if ((v = vmram_param(word, "fpvm.loop="))) {
		ret = vmram_parse_u64(v, false, &cfg->loop);
	} else if ((v = vmram_param(word, "fpvm.rate="))) {
		ret = vmram_parse_u64(v, false, &cfg->rate);
	} else if ((v = vmram_param(word, "fpvm.idle="))) {
		ret = vmram_parse_u64(v, false, &cfg->idle);
	}
	return ret;
}

/*
 * Fills @cfg from the fpvm.* words of /proc/cmdline. Returns 0, or -errno
 * with a reason in @why.
 */
static int vmram_cfg_read(struct vmram_cfg *cfg, char *why, size_t why_len)
{
	char buf[VMRAM_CMDLINE], *word, *save;
	ssize_t n;
	int fd, e;

	fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		e = errno;
		snprintf(why, why_len, "cannot open /proc/cmdline: %s",
			 strerror(e));
		return -e;
	}
	n = read(fd, buf, sizeof(buf) - 1);
	e = errno;
	close(fd);
	if (n < 0) {
		snprintf(why, why_len, "cannot read /proc/cmdline: %s",
			 strerror(e));
		return -e;
	}
	buf[n] = '\0';
	memset(cfg, 0, sizeof(*cfg));
	for (word = strtok_r(buf, " \t\n", &save); word;
	     word = strtok_r(NULL, " \t\n", &save)) {
		if (vmram_cfg_word(cfg, word) < 0) {
			snprintf(why, why_len, "bad parameter %s", word);
			return -EINVAL;
		}
	}
	if (!cfg->has_base || !cfg->has_size || !cfg->has_seed) {
		snprintf(why, why_len,
			 "fpvm.base, fpvm.size and fpvm.seed are required "
			 "on the kernel command line");
		return -EINVAL;
	}
	if (cfg->base % PATTERN_PAGE || cfg->size % PATTERN_PAGE ||
	    !cfg->size || cfg->base + cfg->size < cfg->base) {
		snprintf(why, why_len,
			 "fpvm.base=%" PRIu64 " fpvm.size=%" PRIu64
			 ": need a non-empty range of whole 4 KiB pages",
			 cfg->base, cfg->size);
		return -EINVAL;
	}
	return 0;
}

/*
 * Pages of @mem (@pages from guest-physical page @first) that differ from
 * pattern(@seed); the first bad one in @first_bad (UINT64_MAX if none).
 */
static uint64_t vmram_check(const unsigned char *mem, uint64_t pages,
			    uint64_t first, uint64_t seed, uint64_t *first_bad)
{
	uint64_t bad = 0;

	*first_bad = UINT64_MAX;
	for (uint64_t i = 0; i < pages; i++) {
		if (!pattern_check(mem + i * PATTERN_PAGE, seed, first + i))
			continue;
		if (!bad)
			*first_bad = first + i;
		bad++;
	}
	return bad;
}

static void vmram_say_first_bad(int con, const unsigned char *mem,
				uint64_t first, uint64_t seed, uint64_t page)
{
	const unsigned char *p = mem + (page - first) * PATTERN_PAGE;
	uint64_t w, want;
	size_t i;

	for (i = 0; i < PATTERN_WORDS - 1; i++) {
		memcpy(&w, p + i * sizeof(w), sizeof(w));
		if (w != pattern_word(seed, page, i))
			break;
	}
	memcpy(&w, p + i * sizeof(w), sizeof(w));
	want = pattern_word(seed, page, i);
	vmram_say(con,
		  "vm-ram: first bad page: guest-physical 0x%" PRIx64
		  " (seed=%" PRIu64 "): %zu of %zu words differ, word %zu "
		  "is 0x%016" PRIx64 ", expected 0x%016" PRIx64,
		  page * PATTERN_PAGE, seed, pattern_check(p, seed, page),
		  (size_t)PATTERN_WORDS, i, w, want);
}

/* A "q" line on the console's input (read without waiting). */
static bool vmram_told_quit(void)
{
	char buf[64];
	ssize_t n;

	while ((n = read(STDIN_FILENO, buf, sizeof(buf))) > 0)
		if (memchr(buf, 'q', (size_t)n))
			return true;
	return false;
}

/* Waits until @bytes written since @t0 are no more than @mib_s allows. */
static void vmram_pace(double t0, uint64_t bytes, uint64_t mib_s)
{
	double due = t0 + (double)bytes / (double)(mib_s << 20),
	       now = vmram_now(CLOCK_MONOTONIC);

	if (due > now) {
		struct timespec ts = {
			.tv_sec = (time_t)(due - now),
			.tv_nsec = (long)((due - now -
					   (double)(time_t)(due - now)) *
					  1e9),
		};

		nanosleep(&ts, NULL);
	}
}

/*
 * fpvm.loop=1: rounds of check-then-overwrite over the range (@pages from
 * guest-physical page @first) until a "q" line; seed @seed's pattern is
 * there already. Returns true when every page of every round held the
 * previous round's pattern.
 */
static bool vmram_loop(int con, unsigned char *mem, uint64_t pages,
		       uint64_t first, uint64_t seed,
		       const struct vmram_cfg *cfg)
{
	const struct timespec idle_ts = { .tv_nsec = 50 * 1000 * 1000 };
	uint64_t round = 0, bad, first_bad;
	int fl = fcntl(STDIN_FILENO, F_GETFL);

	if (fl < 0 || fcntl(STDIN_FILENO, F_SETFL, fl | O_NONBLOCK) < 0) {
		vmram_say(con, "vm-ram: FAIL no console input: %s",
			  strerror(errno));
		return false;
	}
	while (!vmram_told_quit()) {
		double t0 = vmram_now(CLOCK_MONOTONIC);

		if (cfg->idle) {
			nanosleep(&idle_ts, NULL);
			continue;
		}
		round++;
		for (uint64_t i = 0; i < pages; i++) {
			unsigned char *p = mem + i * PATTERN_PAGE;

			/* fpvm.rate: ahead of the rate, wait for it */
			if (cfg->rate && !(i % 64))
				vmram_pace(t0, i * PATTERN_PAGE, cfg->rate);

			if (pattern_check(p, seed + round - 1, first + i)) {
				vmram_say(con,
					  "vm-ram: FAIL loop round %" PRIu64
					  " page %" PRIu64
					  " lost the round before's write",
					  round, i);
				vmram_say_first_bad(con, mem, first,
						    seed + round - 1,
						    first + i);
				return false;
			}
			pattern_fill(p, seed + round, first + i);
		}
		vmram_say(con, "vm-ram: loop round %" PRIu64 " ok", round);
	}
	bad = vmram_check(mem, pages, first, seed + round, &first_bad);
	if (bad) {
		vmram_say_first_bad(con, mem, first, seed + round, first_bad);
		vmram_say(con,
			  "vm-ram: FAIL vm-migrate pages=%" PRIu64
			  " mismatches=%" PRIu64 " rounds=%" PRIu64
			  " seed=%" PRIu64,
			  pages, bad, round, seed + round);
		return false;
	}
	vmram_say(con,
		  "vm-migrate: ok pages=%" PRIu64
		  " mismatches=0 rounds=%" PRIu64 " seed=%" PRIu64,
		  pages, round, seed + round);
	return true;
}

/*
 * Runs the test on the console @con. Returns true when every check passed
 * (the "vm-ram: ok" line was printed).
 */
static bool vmram_run(int con)
{
	uint64_t pages, first, bad, prev_bad = 0, first_bad;
	struct vmram_cfg cfg;
	unsigned char *mem;
	char why[192];
	double t0, t1, t2;
	int fd, e;

	if (vmram_cfg_read(&cfg, why, sizeof(why)) < 0) {
		vmram_say(con, "vm-ram: FAIL %s", why);
		return false;
	}
	pages = cfg.size / PATTERN_PAGE;
	first = cfg.base / PATTERN_PAGE;

	fd = open("/dev/mem", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		e = errno;
		vmram_say(con, "vm-ram: FAIL cannot open /dev/mem: %s",
			  strerror(e));
		return false;
	}
	/* no O_SYNC: that would map it uncached (slow under KVM) */
	mem = mmap(NULL, cfg.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		   (off_t)cfg.base);
	e = errno;
	close(fd);
	if (mem == MAP_FAILED) {
		vmram_say(con,
			  "vm-ram: FAIL cannot map /dev/mem at 0x%" PRIx64
			  " size 0x%" PRIx64 ": %s (is it reserved: memmap="
			  "SIZE$BASE?)",
			  cfg.base, cfg.size, strerror(e));
		return false;
	}

	if (cfg.has_expect) {
		prev_bad =
			vmram_check(mem, pages, first, cfg.expect, &first_bad);
		vmram_say(con,
			  "vm-ram: prev seed=%" PRIu64 " pages=%" PRIu64
			  " mismatches=%" PRIu64,
			  cfg.expect, pages, prev_bad);
		if (prev_bad)
			vmram_say_first_bad(con, mem, first, cfg.expect,
					    first_bad);
	}

	t0 = vmram_now(CLOCK_MONOTONIC);
	for (uint64_t i = 0; i < pages; i++)
		pattern_fill(mem + i * PATTERN_PAGE, cfg.seed, first + i);
	t1 = vmram_now(CLOCK_MONOTONIC);
	bad = vmram_check(mem, pages, first, cfg.seed, &first_bad);
	t2 = vmram_now(CLOCK_MONOTONIC);
	vmram_say(con,
		  "vm-ram: write %" PRIu64 " pages %.1f MB/s, read-check "
		  "%.1f MB/s",
		  pages, (double)cfg.size / (t1 - t0) / 1e6,
		  (double)cfg.size / (t2 - t1) / 1e6);
	if (bad)
		vmram_say_first_bad(con, mem, first, cfg.seed, first_bad);
	if (!bad && !prev_bad && cfg.loop) {
		bool ok = vmram_loop(con, mem, pages, first, cfg.seed, &cfg);

		munmap(mem, cfg.size);
		return ok;
	}
	munmap(mem, cfg.size);

	if (bad || prev_bad) {
		if (prev_bad)
			vmram_say(con,
				  "vm-ram: FAIL pages=%" PRIu64
				  " mismatches=%" PRIu64 " (prev seed=%" PRIu64
				  ": %" PRIu64 " mismatches)",
				  pages, bad, cfg.expect, prev_bad);
		else
			vmram_say(con,
				  "vm-ram: FAIL pages=%" PRIu64
				  " mismatches=%" PRIu64,
				  pages, bad);
		return false;
	}
	vmram_say(con, "vm-ram: ok pages=%" PRIu64 " mismatches=0", pages);
	return true;
}

static void vmram_mount(int con, const char *type, const char *dir)
{
	int e;

	if (mkdir(dir, 0755) && errno != EEXIST) {
		e = errno;
		vmram_say(con, "vm-ram: mkdir %s: %s", dir, strerror(e));
	}
	if (mount(type, dir, type, 0, NULL) && errno != EBUSY) {
		e = errno;
		vmram_say(con, "vm-ram: mount %s on %s: %s", type, dir,
			  strerror(e));
	}
}

int main(void)
{
	/* CLOCK_BOOTTIME is the clock /proc/uptime shows */
	double boot_to_init = vmram_now(CLOCK_BOOTTIME);
	bool ok;
	int con;

	/* the kernel opened /dev/console (its built-in initramfs has it) */
	con = STDOUT_FILENO;
	vmram_mount(con, "proc", "/proc");
	vmram_mount(con, "devtmpfs", "/dev");
	if (fcntl(con, F_GETFD) < 0) {
		con = open("/dev/console", O_WRONLY | O_NOCTTY | O_CLOEXEC);
		if (con < 0)
			con = open("/dev/ttyS0",
				   O_WRONLY | O_NOCTTY | O_CLOEXEC);
	}
	/* SeaBIOS leaves "Booting from ROM.." without a newline */
	vmram_say(con, "%s", "");
	vmram_say(con, "vm-ram: boot-to-init %.3f s", boot_to_init);

	ok = vmram_run(con);

	sync();
	/* what is still in the UART's buffer would be lost at power-off */
	tcdrain(con);
	if (!ok && !ioperm(VMRAM_EXIT_PORT, 1, 1))
		outb(1, VMRAM_EXIT_PORT);
	reboot(RB_POWER_OFF);
	/* PID 1 must not return: the kernel would panic (and reboot) */
	for (;;)
		pause();
}
