// SPDX-License-Identifier: MIT
/*
 * libfarpage-preload: puts a stock QEMU's guest RAM in a farpage region.
 *
 * `farpage vm REGION -- qemu-system-x86_64 ...` creates a memfd the size of
 * the region, sealed against writes, and starts QEMU with this library in
 * LD_PRELOAD, the memfd inherited as fd FARPAGE_VM_FD, and a file memory
 * backend on /proc/self/fd/FARPAGE_VM_FD (share=on). QEMU opens that file
 * and maps it MAP_SHARED | MAP_FIXED at the address it chose for the RAM;
 * the mmap() here recognises the file (same inode) and maps the region
 * there with farpage_map_at() instead. Every other mmap() goes straight to
 * the kernel.
 *
 * Without this library in the process (LD_PRELOAD dropped, a QEMU that maps
 * its RAM some other way) the kernel refuses QEMU's writable shared map of
 * the sealed memfd and QEMU stops with "unable to map backing store": a
 * guest never runs on local memory in the region's place.
 *
 * munmap() of the RAM sends written pages home first (farpage_unmap()); at
 * exit they are sent home (farpage_flush()) before the process ends.
 */
#define LOG_PREFIX "farpage vm: "
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "farpage.h"
#include "log.h"
#include "vm.h"

/* The one guest RAM of this process. */
static struct {
	char region[128];
	dev_t dev;
	ino_t ino;
	unsigned int flags; /* FARPAGE_MAP_* */
	int armed;	    /* the environment named a RAM file */
	pthread_mutex_t lock;
	struct farpage_map *map;
	_Atomic(uintptr_t) base; /* of map; 0 when none */
	size_t len;
} vm = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Set while this library's own calls map and unmap: straight through. */
static __thread int vm_inside;

static void *vm_sys_mmap(void *addr, size_t len, int prot, int flags, int fd,
			 off_t off)
{
	return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

static int vm_sys_munmap(void *addr, size_t len)
{
	return (int)syscall(SYS_munmap, addr, len);
}

static void vm_env_take(const char *name, char *dst, size_t len)
{
	const char *v = getenv(name);

	snprintf(dst, len, "%s", v ? v : "");
	unsetenv(name); /* QEMU's own children are not guests */
}

__attribute__((constructor)) static void vm_init(void)
{
	char fd_s[16], flags_s[64];
	struct stat st;
	char *end;
	long fd;

	if (!getenv(VM_ENV_REGION))
		return; /* loaded outside `farpage vm`: does nothing */
	log_init("farpage-preload", LOG_INFO);
	vm_env_take(VM_ENV_REGION, vm.region, sizeof(vm.region));
	vm_env_take(VM_ENV_FD, fd_s, sizeof(fd_s));
	vm_env_take(VM_ENV_FLAGS, flags_s, sizeof(flags_s));
	errno = 0;
	fd = strtol(fd_s, &end, 10);
	if (errno || end == fd_s || *end || fd < 0 || fd > INT32_MAX ||
	    fstat((int)fd, &st)) {
		/* QEMU then fails to map the sealed file: it stops. */
		log_err("%s=%s: not an open file; the guest RAM cannot be "
			"placed in region %s",
			VM_ENV_FD, fd_s, vm.region);
		return;
	}
	vm.dev = st.st_dev;
	vm.ino = st.st_ino;
	if (strstr(flags_s, "prefetch,"))
		vm.flags |= FARPAGE_MAP_PREFETCH;
	if (strstr(flags_s, "movable,"))
		vm.flags |= FARPAGE_MAP_MOVABLE;
	if (strstr(flags_s, "incoming,"))
		vm.flags |= FARPAGE_MAP_INCOMING;
	vm.armed = 1;
}

static int vm_is_ram_file(int fd)
{
	struct stat st;

	return fd >= 0 && vm.armed && !fstat(fd, &st) && st.st_dev == vm.dev &&
	       st.st_ino == vm.ino;
}

/* Maps the region in QEMU's place. The address, or MAP_FAILED and errno. */
static void *vm_map_ram(void *addr, size_t len, int prot, int flags, off_t off)
{
	struct farpage_map_opts o = { .flags = vm.flags };
	struct farpage_map *m = NULL;
	void *ret = MAP_FAILED;
	int err;

	if (!(flags & MAP_SHARED) || off || !(prot & PROT_WRITE)) {
		log_err("region %s: QEMU maps its RAM file with flags %#x, "
			"prot %#x, offset %lld; farpage needs a writable "
			"shared map of all of it (share=on, not readonly)",
			vm.region, (unsigned int)flags, (unsigned int)prot,
			(long long)off);
		errno = EINVAL;
		return MAP_FAILED;
	}
	pthread_mutex_lock(&vm.lock);
	vm_inside = 1;
	if (vm.map) {
		log_err("region %s: QEMU maps its RAM file a second time; "
			"one guest RAM per region",
			vm.region);
		err = -EBUSY;
	} else if (flags & MAP_FIXED) {
		err = farpage_map_at(vm.region, &o, addr, len, &m);
	} else {
		err = farpage_map(vm.region, &o, &m);
		if (!err && len != farpage_map_size(m)) {
			log_err("region %s is %zu bytes, QEMU's RAM %zu",
				vm.region, farpage_map_size(m), len);
			farpage_unmap(m);
			m = NULL;
			err = -EINVAL;
		}
	}
	if (err) {
		log_err("cannot put the guest RAM (%zu MiB at %p) in region "
			"%s: %s",
			len >> 20, addr, vm.region, farpage_strerror(err));
		errno = -err;
	} else {
		vm.map = m;
		vm.len = len;
		ret = farpage_map_addr(m);
		atomic_store(&vm.base, (uintptr_t)ret);
		log_info("guest RAM %p..%p (%zu MiB) is region %s: %s", ret,
			 (void *)((uintptr_t)ret + len), len >> 20, vm.region,
			 farpage_map_is_cached(m)
				 ? "remote pages cached here, writes go home"
				 : "remote pages copied in, writes stay here");
	}
	vm_inside = 0;
	pthread_mutex_unlock(&vm.lock);
	return ret;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if (!vm_inside && vm_is_ram_file(fd))
		return vm_map_ram(addr, len, prot, flags, off);
	return vm_sys_mmap(addr, len, prot, flags, fd, off);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return mmap(addr, len, prot, flags, fd, off);
}

/* One line on how sending the written pages home went. */
static void vm_report(int err, const char *doing, const char *done)
{
	if (err)
		log_errno(err, "region %s: %s", vm.region, doing);
	else
		log_info("region %s: %s", vm.region, done);
}

/* Unmapping any of the RAM unmaps all of it, written pages sent home. */
int munmap(void *addr, size_t len)
{
	uintptr_t base = atomic_load(&vm.base), a = (uintptr_t)addr;
	int err;

	if (vm_inside || !base || a >= base + vm.len || a + len <= base)
		return vm_sys_munmap(addr, len);
	pthread_mutex_lock(&vm.lock);
	if (vm.map) {
		vm_inside = 1;
		atomic_store(&vm.base, 0);
		err = farpage_unmap(vm.map);
		vm.map = NULL;
		vm_inside = 0;
		vm_report(err, "unmapping the guest RAM",
			  "guest RAM unmapped, every written page home");
	}
	pthread_mutex_unlock(&vm.lock);
	return vm_sys_munmap(addr, len);
}

/* QEMU exits without unmapping its RAM: what the guest wrote goes home
 * now, while the process still holds the mapping. No vCPU or device runs
 * any more (QEMU stops them before it exits), so the RAM is made
 * read-only first: the agent then knows nothing was written after its
 * scan, and sends nothing home again once QEMU is gone. */
__attribute__((destructor)) static void vm_fini(void)
{
	int err;

	pthread_mutex_lock(&vm.lock);
	if (vm.map) {
		vm_inside = 1;
		err = farpage_flush_final(vm.map);
		vm_inside = 0;
		if (err == -EOPNOTSUPP)
			log_warn("region %s: faults were served by copying: "
				 "what the guest wrote to remote pages stays "
				 "in this process and ends with it",
				 vm.region);
		else
			vm_report(err,
				  "sending the guest's written pages home at "
				  "exit",
				  "QEMU exits, every written page home");
	}
	pthread_mutex_unlock(&vm.lock);
}
