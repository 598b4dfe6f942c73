/* SPDX-License-Identifier: MIT */
/*
 * The farpage CLI: the global options every command sees, the helpers the
 * commands share (errors, option values, coordinator calls, chunk maps) and
 * one entry point per command (cli_<command>.c).
 */
#ifndef CLI_CLI_H
#define CLI_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "addrlist.h"
#include "msg.h"

struct farpage_map;

/* Exit codes of every command. */
#define CLI_EXIT_OK    0
#define CLI_EXIT_FAIL  1 /* an error, a mismatch, an unreachable service */
#define CLI_EXIT_USAGE 2 /* unknown command or option, bad option value */

#define CLI_COORDINATOR_DEFAULT "127.0.0.1:7700"
#define CLI_COORDINATOR_ENV	"FARPAGE_COORDINATOR"
#define CLI_TIMEOUT_MS_DEFAULT	5000

/*
 * --coordinator as a list (parsed in main(), said wrong only when a command
 * calls the coordinator), and the address that answered last: each call
 * starts there.
 */
struct cli_coords {
	struct addrlist l;
	int err; /* addrlist_parse()'s: -EINVAL, why says why */
	char why[ADDRLIST_ADDR_LEN + 100];
	uint32_t cur; /* l.addr index */
};

/* Global options, resolved (defaults and environment applied) in main(). */
struct cli {
	const char *coordinator;   /* control addresses "host:port[,...]" */
	struct cli_coords *coords; /* coordinator, parsed: main()'s */
	const char *agent_sock;	   /* local agent's Unix socket */
	int timeout_ms;		   /* per control call */
	const char *key_file;	   /* NULL: $FARPAGE_KEY_FILE or the default */
	bool insecure;		   /* a cluster without authentication */
	bool quiet;		   /* no progress lines */
};

/*
 * A command: called with argv[0] = the command's name. Returns one of the
 * CLI_EXIT_* codes; errors are already printed.
 */
typedef int cli_cmd_fn(const struct cli *c, int argc, char **argv);

int cli_status_run(const struct cli *c, int argc, char **argv);
int cli_region_run(const struct cli *c, int argc, char **argv);
int cli_node_run(const struct cli *c, int argc, char **argv);
int cli_fill_run(const struct cli *c, int argc, char **argv);
int cli_touch_run(const struct cli *c, int argc, char **argv);
int cli_stats_run(const struct cli *c, int argc, char **argv);
int cli_flush_run(const struct cli *c, int argc, char **argv);
int cli_handover_run(const struct cli *c, int argc, char **argv);
int cli_migrate_run(const struct cli *c, int argc, char **argv);
int cli_vm_run(const struct cli *c, int argc, char **argv);
int cli_run_run(const struct cli *c, int argc, char **argv);
int cli_keygen_run(const struct cli *c, int argc, char **argv);

/*
 * Prints the counters of the agent at @agent_sock on stdout as one line
 * "<label>: faults=N remote=N ... agent=PATH". Returns 0 or the -errno of
 * farpage_agent_stats() (nothing printed).
 */
int cli_stats_print(const char *agent_sock, const char *label);

/*
 * The preload library @name of command @cmd ("vm", "run"), its real path
 * into @out (PATH_MAX bytes): @opt (its --preload) if not NULL, else
 * $@env, else the first found in this binary's build tree (../@subdir),
 * in its install tree (the same layout wherever the tree was put: a
 * DESTDIR, an unpacked package) and in the configured install directory
 * (this binary copied elsewhere). Returns 0, or -errno after saying why.
 */
int cli_preload_find(const char *cmd, const char *opt, const char *env,
		     const char *subdir, const char *name, char *out);

/* Prints "farpage: <formatted>" and a newline on stderr. */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * Prints "farpage: <formatted>" and "Try 'farpage CMD --help'." on
 * stderr, for a bad command line (CMD: the command words of @usage's first
 * line). Returns CLI_EXIT_USAGE.
 */
int cli_usage_err(const char *usage, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/*
 * Reports what getopt_long() rejected for command @cmd (unknown option or
 * missing value, from optopt/optind; the option string must start with
 * ':') with the command's @usage. Returns CLI_EXIT_USAGE.
 */
int cli_getopt_err(const char *usage, const char *cmd, int ret, char **argv);

/* Parses the options of a command that has only --help. Returns -1 to go
 * on (optind is at the first argument), or the exit code to return. */
int cli_help_only(const char *usage, const char *cmd, int argc, char **argv);

/* As cli_help_only(), for a command that also takes --json (*@json = 1). */
int cli_help_json(const char *usage, const char *cmd, int argc, char **argv,
		  int *json);

/*
 * Parses option values: a plain unsigned number, a size ("64M", "1GiB"),
 * or a comma-separated list of node ids (*out is malloc'd; caller frees).
 * On a bad value prints a usage error naming @opt and returns -EINVAL;
 * otherwise 0 (-ENOMEM for the list).
 */
int cli_opt_u64(const char *usage, const char *opt, const char *arg,
		uint64_t *out);
int cli_opt_size(const char *usage, const char *opt, const char *arg,
		 uint64_t *out);
int cli_opt_ids(const char *usage, const char *opt, const char *arg,
		uint64_t **out, uint32_t *n);

/*
 * Calls the coordinator: sends @req and receives @rep, which must be of
 * type @want (MSG_T_NONE: any reply but an error). @rep is always left safe
 * for msg_fini(). On failure prints one line: "farpage: <what>:
 * <coordinator's error text>" for an ERROR reply, "farpage: <what>:
 * coordinator <addr>: <why>" when it cannot be reached.
 * With several coordinators (--coordinator A,B,C), one that cannot be
 * reached or answers COORD_ERR_NOT_LEADER passes the call to the next,
 * round the list once from the one that answered last; if none answers,
 * one line per address "farpage: <what>: coordinator <addr>: <why>".
 * Returns 0, -EPROTO for an unexpected reply type, or -errno.
 */
int cli_coord_call(const struct cli *c, const char *what, const struct msg *req,
		   struct msg *rep, enum msg_type want);

/*
 * As cli_coord_call(), but while the coordinator answers -EAGAIN (e.g.
 * space of a deleted region still being cleared) asks again every
 * CLI_RETRY_MS for up to @wait_ms, saying once that it waits.
 */
#define CLI_RETRY_MS 200
int cli_coord_call_wait(const struct cli *c, const char *what,
			const struct msg *req, struct msg *rep,
			enum msg_type want, unsigned int wait_ms);

/*
 * Asks the coordinator for region @name's record (MSG_T_REGION in *rep:
 * size, chunk size, chunks). On failure prints one line naming @what.
 * Returns 0 or -errno; *rep is the caller's to msg_fini() either way.
 */
int cli_region_get(const struct cli *c, const char *what, const char *name,
		   struct msg *rep);

/*
 * Maps region @name through the agent at c->agent_sock (farpage_map()).
 * On failure prints one line naming @what and the socket (no socket, no
 * agent, or the agent's refusal). Returns 0 or farpage_map()'s -errno.
 */
int cli_map(const struct cli *c, const char *what, const char *name,
	    unsigned int flags, struct farpage_map **m);

/*
 * Health of region @r (a REGION answer): chunks with no replica in sync,
 * replicas MISSING and REBUILDING; returns "ok", "degraded" or "lost".
 */
const char *cli_repl_health(const struct msg *r, uint32_t *lost,
			    uint32_t *missing, uint32_t *rebuilding);

/*
 * Prints "<indent>writers: a (1), b (2)" for region record @r (names
 * from the NODES reply @nodes, NULL: ids only), or "writers: any node";
 * cli_readers_print() the same of its readers ("readers: ...").
 */
void cli_writers_print(FILE *f, const char *indent, const struct msg *r,
		       const struct msg *nodes);
void cli_readers_print(FILE *f, const char *indent, const struct msg *r,
		       const struct msg *nodes);

/*
 * Chunks of single-replica region @r whose owner has restarted since they
 * were placed (its new pool does not hold them: readers get SIGBUS), by
 * the instances in the NODES reply @nodes. 0 for a replicated region (its
 * health says it).
 */
uint32_t cli_region_lost(const struct msg *nodes, const struct msg *r);

/*
 * The JSON objects of --json (cli_json.c; docs/cli.md, "JSON output").
 * Each returns NULL when json-c has no memory.
 * - a node of a NODES reply (@gone: a forgotten one);
 * - region @r of a REGION reply (@lost: cli_region_lost());
 * - a region of a REGIONS list (no chunk map);
 * cli_json_region_records() adds "records" (one per chunk record: chunk,
 * offset, replica, node, pool_offset, and state if replicated) to @o and
 * returns 0 or -ENOMEM. cli_json_out() prints @o on one line, frees it
 * and returns the exit code (an error printed, naming @cmd).
 */
struct json_object;
/*
 * The state of replica record @i of region @r ("in-sync", "missing",
 * "rebuilding"); *@k walks r->rstates: start it at 0 and ask for the
 * records in increasing order.
 */
const char *cli_rstate_name(const struct msg *r, uint32_t i, uint32_t *k);
struct json_object *cli_json_node(const struct msg_node *n, int gone);
struct json_object *cli_json_region(const struct msg *r, uint32_t lost);
struct json_object *cli_json_region_brief(const struct msg_region *r);
int cli_json_region_records(struct json_object *o, const struct msg *r);
int cli_json_out(const char *cmd, struct json_object *o);

/*
 * A progress line on stderr for long work (pages done, MB/s, ETA), as
 * rsync --info=progress2 and dd status=progress: only when stderr is a
 * terminal and --quiet was not given, redrawn at most every
 * CLI_PROGRESS_MS, and cleared at the end so what follows starts on a
 * clean line. cli_progress_set() is called by one thread.
 */
#define CLI_PROGRESS_MS 250
struct cli_progress {
	const char *what;
	const char *unit;    /* "pages" */
	uint64_t unit_bytes; /* 4096 */
	uint64_t total;	     /* units */
	uint64_t t0_ms, last_ms;
	bool on, drawn;
};
void cli_progress_start(struct cli_progress *p, const struct cli *c,
			const char *what, uint64_t total);
/* As cli_progress_start(), counting @unit of @unit_bytes each. */
void cli_progress_start_unit(struct cli_progress *p, const struct cli *c,
			     const char *what, uint64_t total, const char *unit,
			     uint64_t unit_bytes);
void cli_progress_set(struct cli_progress *p, uint64_t done);
void cli_progress_end(struct cli_progress *p);

/* The chunks of region @r of a REGIONS list (not its replica records). */
uint64_t cli_region_chunks(const struct msg_region *r);

/* Formats a byte count ("64 MiB") into buf; returns buf. */
const char *cli_size_str(uint64_t bytes, char *buf, size_t len);

/*
 * Prints a chunk map compactly, each line starting with @indent:
 * "chunks per node: 1=16 2=16" and "owners: 1 2 1 2 ..." folded at 80
 * columns, shortened to runs or one repeated group for big maps.
 */
void cli_chunks_print(FILE *f, const char *indent,
		      const struct msg_chunk *chunks, uint32_t n);

/*
 * Counts the chunks per owner node. On success *ids and *counts are
 * malloc'd arrays of *n_ids entries sorted by node id; the caller
 * frees both. Returns 0 or -ENOMEM.
 */
int cli_chunks_count(const struct msg_chunk *chunks, uint32_t n, uint64_t **ids,
		     uint64_t **counts, uint32_t *n_ids);

#endif
