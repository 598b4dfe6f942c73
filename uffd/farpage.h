/* SPDX-License-Identifier: MIT */
/*
 * libfarpage: map a farpage region into this process.
 *
 * farpage_map() asks the local agent (farpage-node) for the region's layout,
 * reserves an address range, maps the chunks this node owns straight from
 * the agent's pool (MAP_SHARED: writes land in the pool and are what remote
 * readers fetch) and maps the rest from the agent's cache of remote pages
 * (a shmem memfd), registered with userfaultfd: the agent resolves faults
 * by landing pages from their owners in the cache, learns of writes through
 * write-protect faults, and writes written pages home (farpage_flush(), at
 * unmap, in the background, and when it evicts them from its bounded
 * cache). Without minor faults on shmem, faults are served by copying and
 * writes to remote-owned pages stay private to this mapping.
 *
 * If the agent dies, faulting threads never see zero-filled pages: they wait
 * up to agent_timeout_ms for an agent to come back on the same socket path
 * (the mapping is handed over to it, and it serves them: an agent can be
 * restarted under running guests) and otherwise get SIGBUS (BUS_ADRERR) on
 * every page not yet fetched. A writable mapping is handed over only if it
 * still holds the region's write lease (no other mapping took it while the
 * agent was away); if not, the lease is lost for good: its unflushed
 * writes are dropped, every remote page raises SIGBUS, and flushes fail.
 *
 * The mapped range is not inherited across fork(): the child does not have
 * it (touching it there is SIGSEGV), and a warning is printed.
 */
#ifndef UFFD_FARPAGE_H
#define UFFD_FARPAGE_H

#include <stddef.h>
#include <stdint.h>

#define FARPAGE_AGENT_SOCK_DEFAULT "/run/farpage/agent.sock"
#define FARPAGE_AGENT_SOCK_ENV	   "FARPAGE_AGENT_SOCK"
#define FARPAGE_AGENT_TIMEOUT_ENV  "FARPAGE_AGENT_TIMEOUT_MS"

struct farpage_map;

struct farpage_map_opts {
	/* Agent socket; NULL = $FARPAGE_AGENT_SOCK or the default path. */
	const char *agent_sock;
	/* How long faults wait for a dead agent before SIGBUS;
	 * 0 = $FARPAGE_AGENT_TIMEOUT_MS or 5000. */
	unsigned int agent_timeout_ms;
	/* FARPAGE_MAP_* */
	unsigned int flags;
	/* Bytes of this mapping the agent's cache holds at most (rounded
	 * down to pages; the agent's own --cache-size bounds all mappings
	 * together besides); 0: no bound of its own. Cache mode only. */
	uint64_t cache_bytes;
};

/*
 * Region @name's size in bytes, as the local agent (@opts->agent_sock;
 * @opts may be NULL) knows it: the agent looks it up with its own node
 * key, as a read-only map of it would (the node must be one of its
 * readers or writers), and nothing is mapped. For a program that must
 * size something before it maps (farpage vm: QEMU's -m). Returns 0 or
 * -errno (the agent's reason is logged).
 */
int farpage_region_size(const char *name, const struct farpage_map_opts *opts,
			uint64_t *size);

/* The agent fetches the whole region in the background (pages not yet
 * touched), keeping room for faults, which always go first. */
#define FARPAGE_MAP_PREFETCH 1u
/*
 * Read-only: the range is PROT_READ (a write is SIGSEGV) and needs no
 * write lease, so any number of hosts may map the region so. Without it a
 * map is writable, and at most one writable map of a region exists in the
 * cluster at a time: another gets -EBUSY (the agent logs who holds it).
 */
#define FARPAGE_MAP_RDONLY 2u
/*
 * Writable, and movable: the write lease can be handed to a mapping of the
 * region on another host (farpage_agent_handover(), a VM's migration).
 * Nothing of it is mapped from this host's pool, so every page of it goes
 * through the agent's cache (chunks placed here are copied in and written
 * back like a peer's). Needs cache mode (-EOPNOTSUPP without it).
 */
#define FARPAGE_MAP_MOVABLE 4u
/*
 * A movable map that takes the write lease from a hand-over: it maps at
 * once without the lease, and every fault waits until the lease is free
 * (handed over: the pages written before are home) and the agent has taken
 * it; a fault that waits longer than the agent's fault timeout raises
 * SIGBUS. Implies FARPAGE_MAP_MOVABLE.
 */
#define FARPAGE_MAP_INCOMING 8u

/*
 * Anonymous: the region is this process's private memory (`farpage run`
 * puts a program's heap there). Whatever its pages held before reads as
 * zeroes in this mapping: nothing is fetched for a page until this
 * mapping wrote it and it left the cache (it went home then).
 * farpage_discard() zeroes ranges of it again. Its zeroed pages are known
 * to the agent alone, so it is never handed over to a restarted agent:
 * when the agent dies, faults wait the agent timeout, then raise SIGBUS.
 * Writable (not with FARPAGE_MAP_RDONLY, MOVABLE or PREFETCH); needs cache
 * mode (-EOPNOTSUPP without it).
 */
#define FARPAGE_MAP_ANON 16u

/*
 * Maps region @name. @opts may be NULL. On success *out owns the mapping
 * until farpage_unmap(). Returns 0, -ENOENT if no such region, -ECONNREFUSED
 * / -ENOENT if no agent listens on the socket, -EACCES if the agent or
 * the coordinator refused it (their reason is logged), -EPERM/-ENOSYS if
 * userfaultfd is not available, -ENOMEM, or another -errno.
 */
int farpage_map(const char *name, const struct farpage_map_opts *opts,
		struct farpage_map **out);

/*
 * Like farpage_map(), at @addr, for a program that placed the memory itself
 * (a hypervisor's guest RAM): the range [@addr, @addr + @len) is replaced
 * as by mmap(MAP_FIXED), and on failure may be left unmapped. @addr must
 * be 2 MiB aligned and @len the region's mapped size (its chunks, whole;
 * farpage_map_size() of a map of it rounded up to the chunk size); -EINVAL
 * otherwise.
 */
int farpage_map_at(const char *name, const struct farpage_map_opts *opts,
		   void *addr, size_t len, struct farpage_map **out);

/*
 * Unmaps, sends home every page written through the mapping (as
 * farpage_flush()), waits until the agent has given the region's write
 * lease back and the coordinator acknowledged it (a writable map on
 * another host may follow at once), and frees; NULL is a no-op. Returns 0
 * or -errno (the mapping is freed either way; an error means written
 * pages may not be home, or the lease not given back yet: the agent
 * keeps trying; -ENOLCK: the write lease was lost, see farpage_flush()).
 * A process that exits without it: the agent sends the pages home and
 * gives the lease back on its own, later.
 */
int farpage_unmap(struct farpage_map *m);

/*
 * Like msync(): returns 0 once every page that was written through the
 * mapping before the call is in its owner's pool (and the coordinator, if
 * it can be reached, confirmed the mapping still holds the write lease),
 * or -errno if some could not be written home (-ETIMEDOUT: none landed
 * for the agent's fault timeout; the agent keeps them and keeps trying;
 * they are never dropped). A flush that makes progress, however slowly,
 * does not time out. -ENOLCK: the mapping's write
 * lease was lost (another mapping took it): what it wrote and had not
 * sent home is dropped, for good, and every touch of a remote page raises
 * SIGBUS from then on. -EIO: pages could never go home and were dropped
 * (a region of one replica: their owner restarted; of more: a chunk lost
 * every replica in sync, and then every flush fails, naming the lost
 * chunks, once the rest is home). While the agent is gone, and when it
 * dies during the flush, it waits for the mapping to be handed to a
 * restarted one, which sends the pages home (-ENOTCONN if none came
 * within the agent timeout). 0 at once for a read-only map; -EOPNOTSUPP
 * when faults are served by copying (a kernel without minor faults on
 * shmem, or an agent run with --fault-mode copy): writes then stay in
 * this process.
 */
int farpage_flush(struct farpage_map *m);

/*
 * The last flush of a mapping the process will not write again (it is
 * about to exit, say, without unmapping): makes the mapping read-only (a
 * write to it from now on raises SIGSEGV), then flushes as
 * farpage_flush(). The agent then knows that nothing can be written after
 * its scan: when the process exits, no page is sent home again. Without
 * it (an exit after a plain flush), the agent cannot tell what was written
 * between the last flush and the exit, so it counts every page it holds
 * for the mapping as written and sends them all home again. Reads go on
 * as before; farpage_unmap() may follow. Returns as farpage_flush(), or
 * -errno of mprotect().
 */
int farpage_flush_final(struct farpage_map *m);

/*
 * Like madvise(MADV_DONTNEED) on private anonymous memory, for a
 * FARPAGE_MAP_ANON mapping: the pages of [@addr, @addr + @len) (page
 * aligned, inside the mapping) read as zeroes from now on; what they held
 * leaves the cache, is never sent home and is never fetched again. The
 * caller must not touch the range meanwhile. Safe from any thread (one
 * discard at a time per mapping). Returns 0, -EINVAL (not page aligned,
 * outside the mapping, or not FARPAGE_MAP_ANON) or another -errno.
 */
int farpage_discard(struct farpage_map *m, void *addr, size_t len);

void *farpage_map_addr(const struct farpage_map *m);
size_t farpage_map_size(const struct farpage_map *m);
size_t farpage_map_chunk_size(const struct farpage_map *m);
/* Id of this node, and owner node id of the byte at @off. */
uint64_t farpage_map_node(const struct farpage_map *m);
uint64_t farpage_map_owner(const struct farpage_map *m, size_t off);
/* 1 if the byte at @off is backed by this node's pool (never faults). */
int farpage_map_is_local(const struct farpage_map *m, size_t off);
/* 1 if remote pages are served from the agent's cache (writes to them go
 * home, and survive MADV_DONTNEED as on any shared mapping); 0 if they are
 * copied in (writes to them stay private to this mapping). */
int farpage_map_is_cached(const struct farpage_map *m);

/*
 * The agent's counters as of now (faults served, remote, local, errors,
 * poisoned pages). Returns 0 or -errno.
 */
struct farpage_stats {
	uint64_t faults;
	uint64_t remote;
	uint64_t local;
	uint64_t errors;
	uint64_t poisoned;
	/* the cache of remote pages; limit 0: faults are served by copying */
	uint64_t cache_limit;	     /* bytes it may hold */
	uint64_t cache_resident;     /* bytes it holds */
	uint64_t cache_resident_max; /* the most it held */
	uint64_t cache_dirty;	     /* bytes written, not yet home */
	uint64_t cache_hits;	     /* faults on pages it held */
	uint64_t cache_misses;	     /* faults that fetched */
	uint64_t cache_evictions;    /* pages dropped from it */
	uint64_t cache_writebacks;   /* pages written home */
	uint64_t cache_wb_errors;    /* write-backs that failed (retried) */
	uint64_t cache_wp_faults;    /* first writes to a page seen */
	uint64_t cache_file_max;     /* the most bytes its memfds had
					allocated (the kernel's count) */
};
int farpage_agent_stats(const char *agent_sock, struct farpage_stats *st);

/*
 * Sends home what every mapping of region @name through the agent at
 * @agent_sock (NULL: the default) has written (farpage_flush() for all of
 * them). Returns 0, or -errno (the agent logs why).
 */
int farpage_agent_flush(const char *agent_sock, const char *name);

/*
 * farpage_agent_flush(), then the pages of region @name that the agent's
 * cache holds clean leave it (a page written since the flush began stays):
 * their next touch fetches them again. A migration's source drops its
 * cache this way before the switch-over, so that the hand-over has little
 * left to take from the process. *@pages (if not NULL): the pages that
 * left, the agent's eviction counter's growth (0 if it could not be
 * read). Returns 0, or -errno as farpage_agent_flush().
 */
int farpage_agent_flush_drop(const char *agent_sock, const char *name,
			     uint64_t *pages);

/*
 * Hands the write lease of region @name's movable mapping through the
 * agent at @agent_sock (NULL: the default) to whoever takes it next (an
 * FARPAGE_MAP_INCOMING map on another host): every page it wrote goes home,
 * its pages leave the process (its next touches wait), and the lease is
 * given back. The process must not write the mapping meanwhile (a VM is
 * stopped for its switch-over). If nobody takes the lease, the mapping's
 * next fault takes it back and the process runs on; if somebody did, that
 * fault raises SIGBUS. Returns 0, -ENOENT (no writable mapping of @name
 * there), -EOPNOTSUPP (not mapped FARPAGE_MAP_MOVABLE), -EAGAIN (it was
 * written during the hand-over: nothing changed), or the flush's error
 * (nothing changed: the mapping keeps the lease). *@pages (if not NULL):
 * the pages the agent wrote home meanwhile, its write-back counter's
 * growth (0 if it could not be read).
 */
int farpage_agent_handover(const char *agent_sock, const char *name,
			   uint64_t *pages);

/* Human-readable text for a farpage_*() return value. */
const char *farpage_strerror(int err);

#endif
