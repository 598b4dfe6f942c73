// SPDX-License-Identifier: MIT
/* farpage keygen: a new cluster key, or an admin or node key from it. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <openssl/crypto.h>

#include "actl.h"
#include "auth.h"
#include "util.h"

static const char cli_keygen_usage[] =
	"usage: farpage keygen [--role cluster|admin|node] [--name NODE]\n"
	"                      [--from CLUSTER_KEY] [--not-after TIME]\n"
	"                      [--force] [-o FILE]\n"
	"\n"
	"Writes a key file (mode 0600). The cluster key (the default role)\n"
	"is random; the coordinator holds it. Every other key is derived\n"
	"from it: the admin key for the CLI (regions, status) and one key\n"
	"per node, which lets that node join and act for itself only.\n"
	"Keys of one cluster share the cluster key's id.\n"
	"\n"
	"  --role ROLE       cluster (default), admin or node\n"
	"  --name NODE       the node's name (--role node)\n"
	"  --from FILE       the cluster key to derive from (default\n"
	"                    $FARPAGE_KEY_FILE, else " AUTH_DIR
	"/cluster.key)\n"
	"  --not-after TIME  the key is refused after TIME: seconds since\n"
	"                    1970, +N (seconds from now) or\n"
	"                    YYYY-MM-DDTHH:MM:SSZ; for a rollover\n"
	"                    (docs/security.md)\n"
	"  --force           replace FILE if it exists\n"
	"  -o, --out FILE    where to write (default " AUTH_DIR "/ROLE.key)\n";

/* Seconds since 1970 from "N", "+N" or "YYYY-MM-DDTHH:MM:SSZ". */
static int cli_keygen_time(const char *s, int64_t *out)
{
	struct tm tm = { 0 };
	uint64_t v;
	const char *end;

	if (s[0] == '+' && !util_u64_parse(s + 1, &v) && v < INT32_MAX) {
		*out = (int64_t)time(NULL) + (int64_t)v;
		return 0;
	}
	if (!util_u64_parse(s, &v) && v && v < INT64_MAX) {
		*out = (int64_t)v;
		return 0;
	}
	end = strptime(s, "%Y-%m-%dT%H:%M:%SZ", &tm);
	if (!end || *end)
		return -EINVAL;
	*out = (int64_t)timegm(&tm);
	return 0;
}

int cli_keygen_run(const struct cli *c, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "role", required_argument, NULL, 'r' },
		{ "name", required_argument, NULL, 'n' },
		{ "from", required_argument, NULL, 'f' },
		{ "not-after", required_argument, NULL, 'a' },
		{ "force", no_argument, NULL, 'F' },
		{ "out", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	enum auth_role role = AUTH_ROLE_CLUSTER;
	const char *name = NULL, *from = NULL, *out = NULL;
	struct auth_key key;
	struct actl_cred cred;
	int64_t not_after = 0;
	bool force = false;
	char why[400], id[2 * AUTH_ID_LEN + 1];
	int opt, ret;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, ":o:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'r':
			role = auth_role_parse(optarg);
			if (role == AUTH_ROLE_NONE || role == AUTH_ROLE_PEER)
				return cli_usage_err(cli_keygen_usage,
						     "keygen: --role: cluster, "
						     "admin or node, not '%s'",
						     optarg);
			break;
		case 'n':
			name = optarg;
			break;
		case 'f':
			from = optarg;
			break;
		case 'a':
			if (cli_keygen_time(optarg, &not_after))
				return cli_usage_err(cli_keygen_usage,
						     "keygen: --not-after: "
						     "'%s' is not a time",
						     optarg);
			break;
		case 'F':
			force = true;
			break;
		case 'o':
			out = optarg;
			break;
		case 'h':
			fputs(cli_keygen_usage, stdout);
			return CLI_EXIT_OK;
		default:
			return cli_getopt_err(cli_keygen_usage, "keygen", opt,
					      argv);
		}
	}
	if (optind < argc)
		return cli_usage_err(cli_keygen_usage,
				     "keygen: unexpected argument '%s'",
				     argv[optind]);
	if ((role == AUTH_ROLE_NODE) != !!name)
		return cli_usage_err(cli_keygen_usage, "keygen: %s",
				     name ? "--name is for --role node"
					  : "--role node needs --name");
	if (role == AUTH_ROLE_CLUSTER && from)
		return cli_usage_err(cli_keygen_usage,
				     "keygen: --from is for admin and node "
				     "keys");
	if (!out) {
		out = actl_key_default(role);
		/* The default directory: only root reads it. */
		if (mkdir(AUTH_DIR, 0700) && errno != EEXIST) {
			cli_err("keygen: cannot create %s: %s", AUTH_DIR,
				strerror(errno));
			return CLI_EXIT_FAIL;
		}
	}
	if (role == AUTH_ROLE_CLUSTER) {
		ret = auth_key_generate(&key, not_after);
	} else {
		ret = actl_cred_load(&cred, from, AUTH_ROLE_CLUSTER, NULL, why,
				     sizeof(why));
		if (ret) {
			cli_err("keygen: %s", why);
			return CLI_EXIT_FAIL;
		}
		ret = auth_key_derive(&cred.key, role, name, &key);
		OPENSSL_cleanse(&cred, sizeof(cred));
		if (ret == -EINVAL) {
			cli_err("keygen: '%s' is not a node name", name);
			return CLI_EXIT_USAGE;
		}
		/* A derived key ends no later than its cluster key. */
		if (not_after && (!key.not_after || not_after < key.not_after))
			key.not_after = not_after;
	}
	if (ret) {
		cli_err("keygen: %s", strerror(-ret));
		return CLI_EXIT_FAIL;
	}
	ret = auth_key_save(out, &key, force);
	auth_id_hex(key.id, id);
	OPENSSL_cleanse(&key, sizeof(key));
	if (ret) {
		cli_err("keygen: %s: %s%s", out, strerror(-ret),
			ret == -EEXIST ? " (--force replaces it)" : "");
		return CLI_EXIT_FAIL;
	}
	printf("keygen: wrote the %s key%s%s (cluster key id %s) to %s\n",
	       auth_role_name(role), name ? " of node " : "", name ? name : "",
	       id, out);
	return CLI_EXIT_OK;
}
