// SPDX-License-Identifier: MIT
/*
 * The owners' grant keys (gkeys.h): a slot per node id, with the cluster
 * key its session proved and the grant key derived for it.
 */
#include "gkeys.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "coord.h"
#include "grant.h"

struct gkeys_node {
	char name[AUTH_NAME_MAX]; /* "" until the slot is used */
	int proved;		  /* index in keys its session proved; -1 */
	unsigned int derived;	  /* bit i: key[i] is keys[i]'s */
	uint8_t key[AUTH_KEYS_MAX][AUTH_KEY_LEN];
};

struct gkeys {
	struct auth_key keys[AUTH_KEYS_MAX];
	unsigned int n_keys;
	struct gkeys_node *nodes; /* by node id - 1 */
	uint32_t n_nodes;
};

int gkeys_create(const struct auth_key *keys, unsigned int n,
		 struct gkeys **out)
{
	struct gkeys *g;

	if (!n || n > AUTH_KEYS_MAX)
		return -EINVAL;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	memcpy(g->keys, keys, n * sizeof(*keys));
	g->n_keys = n;
	*out = g;
	return 0;
}

void gkeys_destroy(struct gkeys *g)
{
	if (!g)
		return;
	if (g->nodes)
		OPENSSL_cleanse(g->nodes, g->n_nodes * sizeof(*g->nodes));
	free(g->nodes);
	OPENSSL_cleanse(g, sizeof(*g));
	free(g);
}

/*
 * The slot of node @id (1..COORD_NODES_MAX), @name (shorter than
 * AUTH_NAME_MAX): made if missing; started afresh if it was another
 * name's. NULL if out of memory.
 */
static struct gkeys_node *gkeys_slot(struct gkeys *g, uint64_t id,
				     const char *name)
{
	struct gkeys_node *s;

	if (id > g->n_nodes) {
		uint32_t cap =
			g->n_nodes * 2 > id ? g->n_nodes * 2 : (uint32_t)id;
		struct gkeys_node *nodes;

		if (cap > COORD_NODES_MAX)
			cap = COORD_NODES_MAX;
		nodes = calloc(cap, sizeof(*nodes));
		if (!nodes)
			return NULL;
		if (g->n_nodes)
			memcpy(nodes, g->nodes, g->n_nodes * sizeof(*nodes));
		for (uint32_t i = g->n_nodes; i < cap; i++)
			nodes[i].proved = -1;
		if (g->nodes)
			OPENSSL_cleanse(g->nodes,
					g->n_nodes * sizeof(*g->nodes));
		free(g->nodes);
		g->nodes = nodes;
		g->n_nodes = cap;
	}
	s = &g->nodes[id - 1];
	if (strcmp(s->name, name)) {
		OPENSSL_cleanse(s, sizeof(*s));
		strcpy(s->name, name);
		s->proved = -1;
	}
	return s;
}

/* Can node @id be named @name in the tables? */
static int gkeys_node_is_valid(uint64_t id, const char *name)
{
	return id && id <= COORD_NODES_MAX &&
	       strnlen(name, AUTH_NAME_MAX) < AUTH_NAME_MAX;
}

void gkeys_note(struct gkeys *g, uint64_t id, const char *name,
		const uint8_t kid[AUTH_ID_LEN])
{
	struct gkeys_node *s;

	if (!gkeys_node_is_valid(id, name))
		return;
	s = gkeys_slot(g, id, name);
	if (!s)
		return;
	s->proved = -1;
	for (unsigned int i = 0; i < g->n_keys; i++)
		if (!memcmp(g->keys[i].id, kid, AUTH_ID_LEN))
			s->proved = (int)i;
}

int gkeys_get(void *arg, uint64_t id, const char *name, unsigned int k,
	      uint8_t kid[8], uint8_t key[32])
{
	struct gkeys *g = arg;
	struct gkeys_node *s;
	struct auth_key nk;
	unsigned int i;
	int ret;

	if (!gkeys_node_is_valid(id, name))
		return -EINVAL;
	s = gkeys_slot(g, id, name);
	if (!s)
		return -ENOMEM;
	/* the key it proved; not heard from since we started: each */
	if (s->proved >= 0 ? k > 0 : k >= g->n_keys)
		return -ENOENT;
	i = s->proved >= 0 ? (unsigned int)s->proved : k;
	if (!(s->derived & (1u << i))) {
		ret = auth_key_derive(&g->keys[i], AUTH_ROLE_NODE, name, &nk);
		if (!ret)
			ret = grant_key(&nk, s->key[i]);
		OPENSSL_cleanse(&nk, sizeof(nk));
		if (ret)
			return ret;
		s->derived |= 1u << i;
	}
	memcpy(kid, g->keys[i].id, AUTH_ID_LEN);
	memcpy(key, s->key[i], AUTH_KEY_LEN);
	return 0;
}
