/* SPDX-License-Identifier: MIT */
/*
 * A QMP client (QEMU's machine monitor protocol) for farpage migrate.
 */
#ifndef CLI_CLI_QMP_H
#define CLI_CLI_QMP_H

#include <stddef.h>
#include <stdint.h>

#include "fp_json.h"

struct cli_qmp {
	int fd;
	const char *who; /* "source", "destination": for messages */
	int timeout_ms;	 /* for each answer */
	/* QEMU's time (us of its host's realtime clock) of the last STOP and
	 * RESUME events read (0: none): its vCPUs stopped, started */
	uint64_t stop_us, resume_us;
	size_t len;
	char buf[64 << 10]; /* what came, not yet a whole line */
};

/*
 * Connects to a QEMU's QMP monitor at @addr ("unix:PATH", a path,
 * "tcp:HOST:PORT" or "HOST:PORT") and leaves its capabilities
 * negotiation. Returns 0 or -errno (said on stderr).
 */
int cli_qmp_open(struct cli_qmp *q, const char *addr, const char *who,
		 int timeout_ms);
void cli_qmp_close(struct cli_qmp *q);
/*
 * Runs command @cmd with @args (NULL: none; not taken): 0 with its
 * "return" value in *@ret (json_object_put() it), or -EIO (QEMU's error,
 * said on stderr) or another -errno (the connection).
 */
int cli_qmp_cmd(struct cli_qmp *q, const char *cmd, struct json_object *args,
		struct json_object **ret);
/*
 * Waits up to @ms for a line from QEMU while no command is under way (an
 * event: a MIGRATION status change, RESUME) and drops it (a STOP or RESUME
 * event's time kept). 1 if one came, 0 if none did, or -errno.
 */
int cli_qmp_wait(struct cli_qmp *q, int ms);
/* String member @key of @o, or "" (the object owns it). */
const char *cli_qmp_str(struct json_object *o, const char *key);
/* Integer at @path ("ram.transferred") in @o, or 0. */
uint64_t cli_qmp_u64(struct json_object *o, const char *path);

#endif
