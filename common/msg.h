/* SPDX-License-Identifier: MIT */
/*
 * Control messages: CBOR maps {"v": MSG_VERSION, "t": <type>, <fields>...}
 * described by one schema table (msg.c). Used between coordinator, agents
 * and the CLI (TCP) and between libfarpage and its agent (Unix socket).
 *
 * A decoded message is a flat struct msg: each field has one member; the
 * schema says which fields a type carries and which are required. Fields a
 * type does not carry must not appear on the wire (-EBADMSG); optional ones
 * that are absent decode as zero / empty. Every field is type- and
 * range-checked during decode.
 */
#ifndef COMMON_MSG_H
#define COMMON_MSG_H

#include <stddef.h>
#include <stdint.h>

#define MSG_VERSION  1
#define MSG_PKEY_LEN 32	 /* pair key bytes in a node record */
#define MSG_NAME_MAX 64	 /* bytes incl. NUL: region and node names */
#define MSG_ADDR_MAX 64	 /* "host:port" incl. NUL */
#define MSG_TEXT_MAX 256 /* error text incl. NUL */
/* A coordinator that does not lead (several on one etcd) answers a change
 * with MSG_T_ERROR of this err, text "not the leader (leader: ADDR)":
 * clients ask the next coordinator of their list. */
#define COORD_ERR_NOT_LEADER EREMCHG
#define MSG_XPORT_MAX	     16 /* "tcp", "verbs" incl. NUL */
#define MSG_GID_LEN	     16
#define MSG_LIST_MAX	     (1u << 20) /* elements in any list */
#define MSG_DEPTH_MAX	     4		/* nesting of arrays/maps */
/* CBOR items in one message, checked by a scan before anything is decoded
 * (the decoder reads fields straight from the bytes: it allocates only the
 * lists, at most a few bytes of struct per byte of frame); the largest
 * legal message, a REGION of 2^18 chunks, has ~1.9 Mi. */
#define MSG_ITEMS_MAX (1u << 21)

enum msg_type {
	MSG_T_NONE = 0,
	/* replies */
	MSG_T_OK,    /* generic success, no fields */
	MSG_T_ERROR, /* err (positive errno), text */
	/* node <-> coordinator */
	MSG_T_NODE_JOIN,   /* name, data_addr, pool_size, instance, [zone]
			      -> JOINED */
	MSG_T_NODE_JOINED, /* node, lease_ms, cid */
	MSG_T_HEARTBEAT,   /* node, instance, [peers], [epoch, cid: the
			      region epoch synced, of those tables],
			      [extents cleared], [taken, rebuilt, failed:
			      rebuild task ids], [rchk: digests asked
			      for are answered], [sums], [unreach:
			      replica owners its write-back fails to
			      reach], [synced: answer with it] ->
			      HEARTBEAT_ACK */
	MSG_T_NODE_LIST,   /* -> NODES */
	MSG_T_NODES,	   /* nodes, [gone] */
	/* regions */
	MSG_T_REGION_CREATE, /* name, size, [chunk_size], [place] | [owners],
				[writers], [readers], [replicas],
				[rflags: MSG_REGION_COHERENT] */
	MSG_T_REGION_GET,    /* name, [wruns], [wrepl] -> REGION; a region
				of replicas > 1 without wrepl: EPROTONOSUPPORT;
				a node key the region's readers leave out:
				EACCES */
	MSG_T_REGION,	     /* name, size, chunk_size, epoch, chunks,
				[writers], [readers] (older logs: none),
				[replicas, rgen, rstates]: n_chunks *
				replicas chunk records, chunk-major,
				[rflags: MSG_REGION_COHERENT] */
	MSG_T_REGION_LIST,   /* -> REGIONS */
	MSG_T_REGIONS,	     /* regions */
	MSG_T_REGION_DELETE, /* name -> OK */
	/* queue-pair endpoints and memory regions (verbs) */
	MSG_T_ENDPOINT_PUT, /* node, peer, qpn, lid, gid, gid_index, psn, mtu */
	MSG_T_ENDPOINT_GET, /* node, peer -> ENDPOINT */
	MSG_T_ENDPOINT,	    /* node, peer, qpn, lid, gid, gid_index, psn, mtu */
	MSG_T_MR_PUT,	    /* node, mr_addr, rkey, mr_len -> OK */
	/* libfarpage <-> agent (Unix socket) */
	MSG_T_MAP,	   /* name, [flags], [wgen], [size: with MSG_MAP_ANON,
			      the most bytes of it the cache may hold; 0 or
			      none: no bound of its own] -> MAP_LAYOUT */
	MSG_T_MAP_LAYOUT,  /* name, node, size, chunk_size, epoch, pool_size,
			      chunks, [instance: the agent's], [cid],
			      [flags]; SCM_RIGHTS: the cache memfd if
			      flags has MSG_MAP_CACHE, else nothing */
	MSG_T_MAP_UFFD,	   /* base, features, [flags]; SCM_RIGHTS: uffd -> OK */
	MSG_T_AGENT_STATS, /* -> AGENT_STAT */
	MSG_T_AGENT_STAT,  /* node, faults, remote, local, errors, poisoned,
			      peers */
	/* coordinator -> node: the heartbeat's answer */
	MSG_T_HEARTBEAT_ACK, /* epoch, ngen, cid, [extents to clear],
				[fence], [tasks], [checks: only to a node
				whose heartbeat has rchk], [synced: only
				to one whose heartbeat has synced] */
	/* change records only (write-ahead log), never requests */
	MSG_T_SCRUB,	  /* node, epoch, extents: freed by a delete at
			     epoch, to be cleared by the owner before reuse;
			     fence: the same, of replicas out of their set */
	MSG_T_SCRUB_DONE, /* node, extents: cleared by the owner, free */
	/* write leases: request and change record alike */
	MSG_T_WRITE_LEASE,   /* name, node, instance, lease, [wgen: resume the
				lease of that generation] -> OK {wgen}, EBUSY,
				or ENOLCK (lease lost); as a record: wgen
				granted (absent in older logs: 0) */
	MSG_T_WRITE_RELEASE, /* name, node, lease -> OK */
	/* libfarpage/CLI <-> agent */
	MSG_T_FLUSH, /* name -> OK once every page of its mappings here that
			was dirty is home */
	/* libfarpage -> agent, after MAP_LAYOUT: the pool segments under
	 * region bytes [base, base + size), all in chunks the layout places
	 * on this node (MSG_POOL_SEG aligned, at most MSG_POOL_SEGS_MAX) ->
	 * MAP_FDS {base, size}; SCM_RIGHTS: one memfd per segment, in order,
	 * read-only for a read-only map. With extents, the segments under
	 * those byte ranges instead, in order (ascending, apart; base is the
	 * first one's offset, size their total) */
	MSG_T_MAP_FDS,
	/* libfarpage -> agent, on the mapping's connection once the range is
	 * unmapped: the mapping ends; OK once what it wrote is home and its
	 * write lease is given back (the coordinator acknowledged), or the
	 * error that kept it */
	MSG_T_UNMAP,
	/* admin -> coordinator: who may take a region's write lease:
	 * name, [writers] (none: any node) -> OK; as a record the same. A
	 * holder no longer allowed loses the lease (a LEASE_BREAK record). */
	MSG_T_REGION_WRITERS,
	/* admin -> coordinator: name -> OK {wgen: the generation the break
	 * moved to; absent if no lease was held}. Ends the region's write
	 * lease at once. As a record: name, wgen (the region's generation
	 * from then on; no writer). */
	MSG_T_LEASE_BREAK,
	/* admin -> coordinator: name -> OK. Removes a node that is gone
	 * for good: refused (EBUSY) while it owns a chunk or is a writer or
	 * reader of a region, and while its lease holds. As a record: node,
	 * name (the node's id and name, which must match). The id is never
	 * given again; the name is free for a new node. */
	MSG_T_NODE_FORGET,
	/* admin or node -> coordinator: name -> OK. Starts rebuilding every
	 * MISSING replica of the region now (normally automatic). */
	MSG_T_REGION_REBUILD,
	/* change record only (write-ahead log): name, rgen, epoch (the
	 * global one after the change), rstates: the replicas that changed
	 * with their new state (0..2), chunks: their new node, offset and
	 * instance, one per rstates entry, in the same order */
	MSG_T_REPLICA,
	/* admin -> coordinator: who may look a region up with a node key
	 * (and so get its read grants): name, [readers] (none: any node;
	 * its writers always may) -> OK; as a record the same. A holder of
	 * the write lease that may no longer read loses the lease (a
	 * LEASE_BREAK record). */
	MSG_T_REGION_READERS,
	/* CLI -> agent: name -> OK. Hands the write lease of the region's
	 * one movable writable mapping here to whoever takes it next (a
	 * migration's destination): every page it wrote goes home, its
	 * cache is emptied (its faults wait from then on) and the lease is
	 * given back, the coordinator acknowledging. Its process must not
	 * write meanwhile (a VM stopped for the switch-over); only its user
	 * or root may ask. A later fault of it takes the lease back if
	 * nobody took it since (the same generation), or raises SIGBUS. */
	MSG_T_HANDOVER,
	/* libfarpage -> agent: name -> OK, as FLUSH; besides, the asker's
	 * writable mapping of the region here is read-only in its process
	 * from now (it made it so before asking): the agent scans it before
	 * the flush, and its unmap or exit counts no page as written that
	 * scan did not find. Sent only to an agent whose MAP_LAYOUT had
	 * MSG_MAP_SEAL. */
	MSG_T_FLUSH_SEAL,
	/* libfarpage -> agent: name, base (a byte offset in the region),
	 * size (bytes; both page multiples) -> OK once those pages of the
	 * asker's MSG_MAP_ANON mapping of the region here read as zeroes:
	 * what they held left the cache, is not sent home, and nothing is
	 * fetched for them until they are written again. */
	MSG_T_DISCARD,
	/* CLI -> agent: name -> OK, as FLUSH; then the pages of the region
	 * its mappings here hold clean (all of them, but for what was
	 * written since the flush began) leave this host's cache, before
	 * the answer: their next touch fetches them again (a migration's
	 * source, before the switch-over; an operator's drop_caches) */
	MSG_T_FLUSH_DROP,
	MSG_T__MAX,
};

/* Field ids; bit (1 << id) in the schema masks and in msg.present. */
enum msg_field_id {
	MSG_F_ERR = 0,	  /* u64, 1..4095 */
	MSG_F_TEXT,	  /* str */
	MSG_F_NAME,	  /* str, 1..MSG_NAME_MAX-1, [A-Za-z0-9._-] */
	MSG_F_NODE,	  /* u64, node id, 1..UINT32_MAX */
	MSG_F_PEER,	  /* u64, node id, 1..UINT32_MAX */
	MSG_F_DATA_ADDR,  /* str, "host:port" */
	MSG_F_POOL_SIZE,  /* u64 */
	MSG_F_INSTANCE,	  /* u64, random per agent start */
	MSG_F_LEASE_MS,	  /* u64 */
	MSG_F_SIZE,	  /* u64, region bytes */
	MSG_F_CHUNK_SIZE, /* u64, power of two >= 2 MiB */
	MSG_F_EPOCH,	  /* u64 */
	MSG_F_PLACE,	  /* list of u64 node ids: interleave across them */
	MSG_F_OWNERS,	  /* list of u64 node ids: owner of each chunk */
	MSG_F_CHUNKS,	  /* list of struct msg_chunk */
	MSG_F_NODES,	  /* list of struct msg_node */
	MSG_F_REGIONS,	  /* list of struct msg_region */
	MSG_F_PEERS,	  /* list of struct msg_peer */
	MSG_F_QPN,	  /* u64, 24 bits */
	MSG_F_LID,	  /* u64, 16 bits */
	MSG_F_GID,	  /* bytes, exactly MSG_GID_LEN */
	MSG_F_GID_INDEX,  /* u64, < 256 */
	MSG_F_PSN,	  /* u64, 24 bits */
	MSG_F_MTU,	  /* u64, 256..4096 */
	MSG_F_MR_ADDR,	  /* u64 */
	MSG_F_RKEY,	  /* u64, 32 bits */
	MSG_F_MR_LEN,	  /* u64 */
	MSG_F_BASE,	  /* u64, mapping base address in the guest */
	MSG_F_FEATURES,	  /* u64, UFFD features the guest enabled */
	MSG_F_FAULTS,	  /* u64 counters ... */
	MSG_F_REMOTE,
	MSG_F_LOCAL,
	MSG_F_ERRORS,
	MSG_F_POISONED,
	MSG_F_FLAGS,	 /* u64, MSG_MAP_* flags of a mapping */
	MSG_F_CID,	 /* u64, the coordinator's state: random, made with its
			  data directory; another cid = other tables */
	MSG_F_NGEN,	 /* u64, changes whenever the node table does */
	MSG_F_EXTENTS,	 /* list of struct msg_extent */
	MSG_F_LEASE,	 /* u64, write-lease id: random per writable mapping */
	MSG_F_CACHE,	 /* list of u64 cache figures (msg_cache_*) */
	MSG_F_WGEN,	 /* u64, write-lease generation of a region: increases
			  with every grant to a new holder */
	MSG_F_WRITERS,	 /* list of u64 node ids that may take a region's
			  write lease; none: any node */
	MSG_F_GONE,	 /* list of struct msg_node: nodes forgotten (NODES to
			  the admin only; id, name and data address kept) */
	MSG_F_RUNS,	 /* list of struct msg_run: a layout's chunks in runs,
			  instead of chunks (common/layout.h) */
	MSG_F_WANT_RUNS, /* u64, 1 (absent: 0): REGION_GET from an agent
			    that takes its layout in runs */
	MSG_F_REPLICAS,	 /* u64, 1..MSG_REPLICAS_MAX (absent: 1) */
	MSG_F_RGEN,	 /* u64, a region's replica generation, >= 1 */
	MSG_F_RSTATES,	 /* list of struct msg_rstate: replicas not SYNC */
	MSG_F_ZONE,	 /* str, a node's zone: "" (none) or a name */
	MSG_F_WANT_REPL, /* u64, 1 (absent: 0): REGION_GET from an agent
			    that understands replicated regions */
	MSG_F_FENCE,	 /* list of struct msg_extent: the node's extents
			    that must serve no READ/WRITE any more */
	MSG_F_TASKS,	 /* list of struct msg_rtask, <= MSG_TASKS_MAX */
	MSG_F_TAKEN,	 /* list of u64 task ids set up by the node */
	MSG_F_REBUILT,	 /* list of u64 task ids whose copy finished */
	MSG_F_FAILED,	 /* list of u64 task ids the node could not do */
	MSG_F_RCHK,	 /* u64, 1 (absent: 0): HEARTBEAT from an agent that
			    answers checks with sums */
	MSG_F_CHECKS,	 /* list of struct msg_rcheck, <= MSG_TASKS_MAX */
	MSG_F_SUMS,	 /* list of struct msg_rsum, <= MSG_TASKS_MAX */
	MSG_F_GRANTS,	 /* list of struct msg_grant (data-plane grants) */
	MSG_F_WANT_GRANTS, /* u64, 1 (absent: 0): REGION_GET, WRITE_LEASE
			      or HEARTBEAT from an agent that presents
			      grants */
	MSG_F_READERS,	   /* list of u64 node ids that may look a region
			      up with their node key (besides its writers);
			      none: any node */
	MSG_F_UNREACH,	   /* list of struct msg_unreach, <= MSG_UNREACH_MAX */
	MSG_F_RFLAGS,	   /* u64, a region's flags (MSG_REGION_*; absent:
			      none): REGION_CREATE, REGION */
	MSG_F_SYNCED,	   /* u64: HEARTBEAT: 1 (absent: 0), from an agent
			      that takes it; HEARTBEAT_ACK: the lowest
			      epoch every node that is up has synced
			      (absent: 0) */
	MSG_F__MAX,
};

#define MSG_BIT(f) (UINT64_C(1) << (f))

/* A node's pool is handed out in segments of this size (MSG_T_MAP_FDS). */
#define MSG_POOL_SEG	  (UINT64_C(2) << 20)
#define MSG_POOL_SEGS_MAX 64 /* per MAP_FDS (CTL_FDS_MAX) */

/* flags of MSG_T_MAP_UFFD */
#define MSG_MAP_PREFETCH \
	(UINT64_C(1) << 0) /* fetch the whole region in the
					       background when the link is idle */
/* handed over by a guest whose agent died: wake the whole range */
#define MSG_MAP_RESUME (UINT64_C(1) << 1)
/*
 * WRITE_LEASE wgen of a new writable map: no generation to resume; the
 * reply carries the one granted (agents before generations send no wgen
 * and get none back).
 */
#define MSG_WGEN_NEW UINT64_MAX
/* MAP and MAP_UFFD: a read-only mapping (no write lease, writes SIGSEGV) */
#define MSG_MAP_RDONLY (UINT64_C(1) << 2)
/* MAP_LAYOUT: remote chunks are to be mapped from the cache memfd (the
 * second fd); MAP_UFFD: they are, registered MISSING|MINOR[|WP] */
#define MSG_MAP_CACHE (UINT64_C(1) << 3)
/* MAP_LAYOUT of a writable cache map: the agent finds written pages by
 * scanning; the uffd is to be made with UFFD_FEATURE_WP_ASYNC if the
 * kernel has it (MAP_UFFD's features say whether it was) */
#define MSG_MAP_WPASYNC (UINT64_C(1) << 4)
/* MAP: the layout may come as runs (MSG_F_RUNS); REGION_GET says so with
 * want_runs = 1. Peers of versions before runs refuse both (the bit out of
 * range, the field unknown): the asker asks again without. */
#define MSG_LAYOUT_RUNS (UINT64_C(1) << 5)
/*
 * WRITE_LEASE of a hand-over's taker (a VM's migration): granted only if
 * no mapping holds the lease, not even one whose node is down (a holder
 * gives it back once its pages are home; a dead one's may not be). With a
 * wgen to resume: only if no other holder had it since (the region's
 * generation is still that one), the same generation again.
 */
#define MSG_LEASE_IFFREE (UINT64_C(1) << 6)
/*
 * MAP of a writable mapping that may be handed over (MSG_T_HANDOVER):
 * nothing of it is mapped from the pool (the layout sent has no chunk on
 * this node), so that emptying its cache takes every page from the
 * process; chunks placed here are copied in and written back like a
 * peer's.
 */
#define MSG_MAP_MOVABLE (UINT64_C(1) << 7)
/*
 * MAP of a migration's destination: movable and writable, mapped without
 * the write lease; every fault waits until the agent takes the lease
 * free (MSG_LEASE_IFFREE), then is served (SIGBUS after the fault
 * timeout).
 */
#define MSG_MAP_INCOMING (UINT64_C(1) << 8)
/*
 * MAP_LAYOUT of a writable map whose written pages are found by scanning
 * (MSG_MAP_WPASYNC): the agent takes FLUSH_SEAL from the mapping's
 * process (else its unmap or exit sends every page it holds home again:
 * nothing tells what was written after the last scan).
 */
#define MSG_MAP_SEAL (UINT64_C(1) << 9)
/*
 * MAP (and MAP_UFFD) of a process's private memory (libfarpage's
 * FARPAGE_MAP_ANON, `farpage run`): writable, every page through the cache
 * (nothing mapped from the pool, as MSG_MAP_MOVABLE); the region's bytes
 * read as zeroes in it until it writes them, and DISCARD zeroes pages
 * again. Never resumed by another agent (which pages read as zeroes is
 * known to the agent alone).
 */
#define MSG_MAP_ANON (UINT64_C(1) << 10)
/*
 * A mapping of a coherent region (issue 39): every host that maps it
 * writes it, page by page coherently (node/fault/floop_coh.c); nothing of
 * it is mapped from the pool (as MSG_MAP_MOVABLE), no write lease, writes
 * seen by write-protect faults (never WP_ASYNC).
 */
#define MSG_MAP_COHERENT (UINT64_C(1) << 11)
/* REGION_CREATE and REGION rflags: a coherent region (every host that
 * maps it writes it, no write lease; `farpage region create --coherent`) */
#define MSG_REGION_COHERENT UINT64_C(1)
#define MSG_REGION_FLAGS    MSG_REGION_COHERENT
#define MSG_MAP_FLAGS                                                         \
	(MSG_MAP_PREFETCH | MSG_MAP_RESUME | MSG_MAP_RDONLY | MSG_MAP_CACHE | \
	 MSG_MAP_WPASYNC | MSG_LAYOUT_RUNS | MSG_LEASE_IFFREE |               \
	 MSG_MAP_MOVABLE | MSG_MAP_INCOMING | MSG_MAP_SEAL | MSG_MAP_ANON |   \
	 MSG_MAP_COHERENT)

/*
 * One chunk of a region: owner node, byte offset in its pool, and the
 * owner's instance when the chunk was placed (0 = unknown). An owner that
 * restarted since has a new instance and an empty pool: the chunk's data is
 * gone, and readers must fail rather than read its fresh zeroes.
 */
struct msg_chunk {
	uint64_t node;
	uint64_t off;
	uint64_t inst;
};

/*
 * A run of a layout: @n chunks following the previous run's, laid out in
 * rounds over its @n_parts parts: chunk j of the run is part j % n_parts's
 * node and instance, at offset part.off + (j / n_parts) * chunk size. An
 * interleave over P nodes into empty pools is one run of P parts.
 */
struct msg_run {
	uint64_t n;
	struct msg_chunk *parts;
	uint32_t n_parts;
};

/* Replicas: a region has 1..MSG_REPLICAS_MAX copies of every chunk. */
#define MSG_REPLICAS_MAX 3u
#define MSG_TASKS_MAX	 64u /* rebuild tasks in one heartbeat answer */

/* The state of one replica of a chunk. */
enum msg_rstate_state {
	MSG_RS_SYNC = 0,       /* holds every write: serves reads */
	MSG_RS_MISSING = 1,    /* out of the set: no reads, no writes */
	MSG_RS_REBUILDING = 2, /* being copied: takes writes, no reads */
};

/* A replica that is not in sync: replica @replica of chunk @chunk. */
struct msg_rstate {
	uint64_t chunk;
	uint64_t replica;
	uint64_t state; /* enum msg_rstate_state; 1..2 in REGION/MAP_LAYOUT */
};

/* A rebuild copy for the node it is sent to: [src_off, src_off + len) of
 * node src_node's pool (instance src_inst) into its own pool at dst_off. */
struct msg_rtask {
	uint64_t id;
	uint64_t src_node;
	uint64_t src_off;
	uint64_t src_inst;
	uint64_t dst_off;
	uint64_t len;
	/* 1: not yet: some node that is up has not synced the layout that
	 * made the replica REBUILDING (a writer of it could still send a
	 * write to the source only); the copy starts once an ack says 0
	 * (absent). */
	uint64_t hold;
};

/*
 * A digest asked of the node it is sent to, for rebuild task @id (its
 * copy, or the source of it): SHA-256 of @nonce (8 bytes, big-endian)
 * followed by [off, off + len) of its pool.
 */
struct msg_rcheck {
	uint64_t id;
	uint64_t off;
	uint64_t len;
	uint64_t nonce;
};

#define MSG_SUM_LEN 32 /* SHA-256 */

/* The answer to a msg_rcheck of task @id and @nonce. */
struct msg_rsum {
	uint64_t id;
	uint64_t nonce;
	uint8_t sum[MSG_SUM_LEN];
};

/* Bytes of a sealed data-plane grant (common/auth/grant.h). */
#define MSG_GRANT_LEN 168

/*
 * A grant for the node it is sent to, to present at the page server of
 * node @node: READ (or READ and WRITE) of an extent of that node's pool
 * (which the grant's sealed bytes name; only the coordinator and that
 * node can make or check them). @task: the rebuild task it is for (its
 * source extent), 0 for a region's.
 */
struct msg_grant {
	uint64_t node;
	uint64_t task;
	uint8_t g[MSG_GRANT_LEN];
};

/* A byte range of a node's pool. */
struct msg_extent {
	uint64_t off;
	uint64_t len;
};

/* A node as the coordinator reports it. */
struct msg_node {
	uint64_t id;
	char name[MSG_NAME_MAX];
	char data_addr[MSG_ADDR_MAX];
	uint64_t pool_size;
	uint64_t instance;
	uint64_t up;	   /* 1 while the lease holds */
	uint64_t lease_ms; /* ms left on the lease, 0 if down */
	uint64_t mr_addr;  /* verbs pool MR, 0 if none published */
	uint64_t rkey;
	uint64_t mr_len;
	struct msg_peer *peers; /* as last reported in a heartbeat */
	uint32_t n_peers;
	/* the asking node's pair key with this node (all zero: none; only
	 * a node's own authenticated session gets them) */
	uint8_t pkey[MSG_PKEY_LEN];
	char zone[MSG_NAME_MAX]; /* "" if none (not written then) */
};

struct msg_region {
	char name[MSG_NAME_MAX];
	uint64_t size;
	uint64_t chunk_size;
	uint64_t epoch;
	struct msg_chunk *chunks; /* only in MSG_T_NODES/REGIONS if listed */
	uint32_t n_chunks;
	uint64_t replicas; /* 0 (absent): 1 */
	uint64_t rgen;	   /* 0 (absent): a region of one replica */
};

/* Per-peer transport figures reported by an agent. */
struct msg_peer {
	uint64_t node;
	char transport[MSG_XPORT_MAX];
	uint64_t posted;  /* reads posted */
	uint64_t reads;	  /* reads completed */
	uint64_t bytes;	  /* bytes read */
	uint64_t errors;  /* reads failed */
	uint64_t writes;  /* writes completed (one per run of pages) */
	uint64_t wbytes;  /* bytes written home */
	uint64_t werrors; /* write-backs failed */
	/* local only, never on the wire (the agent's /metrics) */
	uint32_t up;	   /* the transport's connection is up */
	uint32_t qp_state; /* verbs: enum xport_rdma_qp_state, 0 else */
};

#define MSG_UNREACH_MAX 256u /* unreach records in one heartbeat */

/*
 * HEARTBEAT, from the holder of the write lease of region @name (created
 * at region epoch @epoch): its replicated write-backs to owner @node,
 * agent instance @inst, have failed with none acknowledged since, the
 * first of them sent under its layout of the region of replica generation
 * @rgen (and that owner's replicas in its layout unchanged since). @due: 1
 * once that lasted its --replica-timeout-ms (the coordinator may take that
 * owner's replicas of the region out of their sets); 0: not yet (the
 * owner only counts as one the writer does not reach).
 */
struct msg_unreach {
	uint64_t node;
	uint64_t inst;
	char name[MSG_NAME_MAX];
	uint64_t epoch;
	uint64_t rgen;
	uint64_t due;
	/* local only, never on the wire: how long the failures span (the
	 * agent's log) */
	uint64_t ms;
};

struct msg {
	enum msg_type type;
	uint64_t present; /* MSG_BIT(f) for each field seen on decode */

	uint64_t err;
	char text[MSG_TEXT_MAX];
	char name[MSG_NAME_MAX];
	uint64_t node;
	uint64_t peer;
	char data_addr[MSG_ADDR_MAX];
	uint64_t pool_size;
	uint64_t instance;
	uint64_t lease_ms;
	uint64_t size;
	uint64_t chunk_size;
	uint64_t epoch;
	uint64_t qpn, lid, gid_index, psn, mtu;
	uint8_t gid[MSG_GID_LEN];
	uint64_t mr_addr, rkey, mr_len;
	uint64_t base;
	uint64_t features;
	uint64_t faults, remote, local, errors, poisoned;
	uint64_t flags;
	uint64_t rflags; /* a region's MSG_REGION_* */
	uint64_t cid;
	uint64_t ngen;
	uint64_t synced; /* MSG_F_SYNCED */
	uint64_t lease;
	uint64_t wgen;

	/* Lists are heap arrays owned by the message; msg_fini() frees them. */
	uint64_t *place;
	uint32_t n_place;
	uint64_t *owners;
	uint32_t n_owners;
	struct msg_chunk *chunks;
	uint32_t n_chunks;
	struct msg_node *nodes;
	uint32_t n_nodes;
	struct msg_region *regions;
	uint32_t n_regions;
	struct msg_peer *peers;
	uint32_t n_peers;
	struct msg_extent *extents;
	uint32_t n_extents;
	uint64_t *writers; /* node ids; none: any node */
	uint32_t n_writers;
	uint64_t *readers; /* node ids; none: any node */
	uint32_t n_readers;
	uint64_t *cache; /* MSG_CACHE_* figures, indexed */
	uint32_t n_cache;
	struct msg_node *gone; /* forgotten nodes */
	uint32_t n_gone;
	struct msg_run *runs; /* a layout in runs (instead of chunks) */
	uint32_t n_runs;
	uint64_t want_runs; /* REGION_GET: 1 = answer in runs */
	/* replicated regions (absent for regions of one replica) */
	uint64_t replicas;	    /* 0 (absent): 1 */
	uint64_t rgen;		    /* 0: absent */
	struct msg_rstate *rstates; /* sorted by chunk, then replica */
	uint32_t n_rstates;
	char zone[MSG_NAME_MAX]; /* "" (not written): none */
	uint64_t want_repl;	 /* REGION_GET: 1 = the asker knows replicas */
	struct msg_extent *fence;
	uint32_t n_fence;
	struct msg_rtask *tasks;
	uint32_t n_tasks;
	uint64_t *taken, *rebuilt, *failed; /* task ids */
	uint32_t n_taken, n_rebuilt, n_failed;
	uint64_t rchk; /* HEARTBEAT: 1 = answers checks */
	struct msg_rcheck *checks;
	uint32_t n_checks;
	struct msg_rsum *sums;
	uint32_t n_sums;
	/* REGION, WRITE_LEASE's OK: grants for the asker, per owner and
	 * extent; HEARTBEAT_ACK: those of its rebuild tasks */
	struct msg_grant *grants;
	uint32_t n_grants;
	/* REGION_GET, WRITE_LEASE, HEARTBEAT: 1 = send grants */
	uint64_t want_grants;
	struct msg_unreach *unreach; /* HEARTBEAT */
	uint32_t n_unreach;
};

/* AGENT_STAT's cache list: index -> figure (later ones may be absent) */
enum msg_cache_fig {
	MSG_CACHE_LIMIT = 0,	/* bytes the cache may hold */
	MSG_CACHE_RESIDENT,	/* bytes of remote pages held */
	MSG_CACHE_DIRTY,	/* bytes written, not yet home */
	MSG_CACHE_HITS,		/* faults on pages already held (MINOR) */
	MSG_CACHE_MISSES,	/* faults that fetched */
	MSG_CACHE_EVICTIONS,	/* pages dropped from the cache */
	MSG_CACHE_WRITEBACKS,	/* pages written home */
	MSG_CACHE_WB_ERRORS,	/* write-backs that failed (retried) */
	MSG_CACHE_RESIDENT_MAX, /* the most bytes it held */
	MSG_CACHE_WP_FAULTS,	/* first writes to a page seen */
	MSG_CACHE_FILE_MAX,	/* the most bytes its memfds had allocated */
	MSG_CACHE__MAX,
};

/* Zeroes @m and sets its type. */
void msg_init(struct msg *m, enum msg_type type);

/* Frees the lists of @m (and of its nested records) and zeroes it. */
void msg_fini(struct msg *m);

/*
 * Encodes @m as a CBOR map. Every field the schema lists for m->type is
 * written (optional lists only when non-empty). On success *buf is a
 * malloc'd buffer the caller frees. Returns 0, -EINVAL if m->type is
 * unknown or a field is out of range, or -ENOMEM.
 */
int msg_encode(const struct msg *m, uint8_t **buf, size_t *len);

/*
 * Decodes one CBOR map from @buf (exactly @len bytes) into @m, which is
 * initialised here; on failure @m holds nothing to free. Returns 0,
 * -EBADMSG for malformed CBOR, nesting deeper than MSG_DEPTH_MAX, a missing
 * or unknown version or type, a field the type does not carry, a wrong
 * field type, an out-of-range value, trailing bytes; or -ENOMEM.
 */
int msg_decode(const uint8_t *buf, size_t len, struct msg *m);

/* Name of a message type for logs ("node_join"), or "unknown". */
const char *msg_type_name(enum msg_type type);

/* Sets m to MSG_T_ERROR with err = -errno_neg and a formatted text. */
void msg_error(struct msg *m, int errno_neg, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Copies a NUL-terminated string into a fixed field; -ENAMETOOLONG if it
 * does not fit. */
int msg_strset(char *dst, size_t dst_size, const char *src);

/* True if @s is a valid region/node name (1..63 of [A-Za-z0-9._-]). */
int msg_name_is_valid(const char *s);

/*
 * Checks a sparse list of replica states as REGION carries it: sorted by
 * chunk then replica, no duplicates, chunk < @n_chunks, replica <
 * @replicas, state MISSING or REBUILDING. msg_decode() applies it to
 * REGION (n_chunks from size and chunk_size). Returns 0 or -EBADMSG.
 */
int msg_rstates_check(const struct msg_rstate *rs, uint32_t n,
		      uint64_t n_chunks, uint64_t replicas);

/* 1 if node record @n carries a pair key (not all zero), else 0. */
int msg_node_has_pkey(const struct msg_node *n);

#endif
