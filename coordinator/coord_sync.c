// SPDX-License-Identifier: MIT
/*
 * Synced epochs: a node that does not report a region epoch synced within
 * a bound is counted down, so that no delete's clearing and no rebuild
 * waits on it (coord_int.h: coord_sync_note(), coord_sync_check()).
 *
 *   lagging --(reports sync_want)--> in step
 *      |                                ^
 *   (sync_due passes)          (reports sync_want)
 *      v                                |
 *   unsynced: lease ends, not renewed --+
 */
#define LOG_PREFIX "coord: "
#include "coord_int.h"

#include "log.h"

/* A deadline for the epoch @n lags behind, unless one is pending. */
static void coord_sync_arm(struct coord *c, struct coord_node *n, uint64_t now)
{
	if (n->sync_due || n->seen_epoch >= c->epoch)
		return;
	n->sync_want = c->epoch;
	n->sync_due = now + c->sync_ms;
}

int coord_sync_note(struct coord *c, struct coord_node *n, uint64_t now)
{
	/* Back from down (its lease ran out): a new deadline, so that it
	 * has the time to catch up that any node has. */
	if (!n->unsynced && now >= n->lease_end)
		n->sync_due = 0;
	if (n->seen_epoch >= n->sync_want) {
		if (n->unsynced)
			log_info("node %u (%s) reports epoch %llu synced: "
				 "counted again",
				 n->id, n->name,
				 (unsigned long long)n->seen_epoch);
		n->unsynced = 0;
		n->sync_due = 0;
	}
	if (n->unsynced)
		return 0;
	coord_sync_arm(c, n, now);
	return 1;
}

uint32_t coord_sync_check(struct coord *c, uint64_t now)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < c->n_nodes; i++) {
		struct coord_node *n = &c->nodes[i];

		if (n->gone || n->unsynced || now >= n->lease_end)
			continue;
		coord_sync_arm(c, n, now);
		if (!n->sync_due || now < n->sync_due)
			continue;
		log_warn("node %u (%s) did not report epoch %llu synced "
			 "within %llu ms (it reports %llu): counted down, not "
			 "waited for, until it does",
			 n->id, n->name, (unsigned long long)n->sync_want,
			 (unsigned long long)c->sync_ms,
			 (unsigned long long)n->seen_epoch);
		n->unsynced = 1;
		n->lease_end = now;
		c->sync_lapses++;
		k++;
	}
	return k;
}
