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
int cli_keygen_run(const struct cli *c, int argc, char **argv);

/*
 * Prints the counters of the agent at @agent_sock on stdout as one line
 * "<label>: faults=N remote=N ... agent=PATH". Returns 0 or the -errno of
 * farpage_agent_stats() (nothing printed).
 */
int cli_stats_print(const char *agent_sock, const char *label);

/* Prints "farpage: <formatted>" and a newline on stderr. */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * Prints "farpage: <formatted>" and then @usage on stderr, for a bad
 * command line. Returns CLI_EXIT_USAGE.
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
