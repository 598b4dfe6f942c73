// SPDX-License-Identifier: MIT
/*
 * farpage region create|list|show|delete: region management through the
 * coordinator.
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#define CLI_CHUNK_SIZE_MIN (2u << 20) /* msg.h: MSG_F_CHUNK_SIZE */

static const char cli_region_usage[] =
	"usage: farpage region create NAME --size SIZE [--chunk-size SIZE]\n"
	"                             [--nodes ID,ID,... | --owners "
	"ID,ID,...]\n"
	"       farpage region list\n"
	"       farpage region show NAME\n"
	"       farpage region delete NAME\n"
	"\n"
	"Sizes take K/M/G/T suffixes (powers of 1024), e.g. 64M, 1G.\n"
	"'farpage region SUBCOMMAND --help' describes a subcommand.\n";

static const char cli_region_create_usage[] =
	"usage: farpage region create NAME --size SIZE [--chunk-size SIZE]\n"
	"                             [--nodes ID,ID,... | --owners "
	"ID,ID,...]\n"
	"                             [--wait SECONDS]\n"
	"\n"
	"Creates region NAME and prints its chunk map. The pool space of a\n"
	"deleted region comes back once its owner has cleared it (every node\n"
	"must first have seen the delete, so that no guest still mapping it\n"
	"reads another region's bytes): until then creating waits.\n"
	"\n"
	"  --size SIZE        region size in bytes (K/M/G/T suffixes)\n"
	"  --chunk-size SIZE  chunk size, a power of two >= 2M\n"
	"                     (default: the coordinator's)\n"
	"  --nodes LIST       interleave the chunks across these node ids\n"
	"                     (default: the coordinator's placement)\n"
	"  --owners LIST      owner node id of each chunk, in order\n"
	"  --wait SECONDS     how long to wait for space being cleared\n"
	"                     (default 15; 0: fail at once)\n"
	"  --help             this text\n";

static const char cli_region_list_usage[] =
	"usage: farpage region list\n"
	"\n"
	"Lists the regions: name, size, chunk size, chunks, epoch.\n";

static const char cli_region_show_usage[] =
	"usage: farpage region show NAME\n"
	"\n"
	"Prints the full chunk map of region NAME: for every chunk its offset\n"
	"in the region, its owner node and its offset in that node's pool.\n";

static const char cli_region_delete_usage[] =
	"usage: farpage region delete NAME\n"
	"\n"
	"Deletes region NAME.\n";

/*
 * Checks the @n_args positional arguments left after the options (0, or 1
 * region name). Returns -1 to go on, or the exit code to return.
 */
static int cli_region_pos(const char *usage, const char *cmd, int argc,
			  char **argv, int n_args)
{
	if (argc - optind < n_args)
		return cli_usage_err(usage, "%s: missing region name", cmd);
	if (argc - optind > n_args)
		return cli_usage_err(usage, "%s: unexpected argument '%s'", cmd,
				     argv[optind + n_args]);
	if (n_args && !msg_name_is_valid(argv[optind]))
		return cli_usage_err(usage,
				     "%s: '%s' is not a region name "
				     "(1-63 of A-Z a-z 0-9 . _ -)",
				     cmd, argv[optind]);
	return -1;
}

/*
 * Parses a subcommand that takes only --help and @n_args positional
 * arguments. Returns -1 to go on, or the exit code to return.
 */
static int cli_region_args(const char *usage, const char *cmd, int argc,
			   char **argv, int n_args)
{
	int ret = cli_help_only(usage, cmd, argc, argv);

	if (ret >= 0)
		return ret;
	return cli_region_pos(usage, cmd, argc, argv, n_args);
}

static void cli_region_summary(const struct msg *r)
{
	char size[32], chunk[32];

	printf("region %s: %s in %u chunks of %s, epoch %llu\n", r->name,
	       cli_size_str(r->size, size, sizeof(size)), r->n_chunks,
	       cli_size_str(r->chunk_size, chunk, sizeof(chunk)),
	       (unsigned long long)r->epoch);
	cli_chunks_print(stdout, "  ", r->chunks, r->n_chunks);
}

int cli_region_get(const struct cli *c, const char *what, const char *name,
		   struct msg *rep)
{
	struct msg req;

	msg_init(&req, MSG_T_REGION_GET);
	msg_strset(req.name, sizeof(req.name), name);
	return cli_coord_call(c, what, &req, rep, MSG_T_REGION);
}

static int cli_region_create(const struct cli *c, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "size", required_argument, NULL, 's' },
		{ "chunk-size", required_argument, NULL, 'c' },
		{ "nodes", required_argument, NULL, 'n' },
		{ "owners", required_argument, NULL, 'o' },
		{ "wait", required_argument, NULL, 'w' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *usage = cli_region_create_usage;
	uint64_t wait_s = 15;
	char what[32 + MSG_NAME_MAX];
	struct msg req, rep;
	int ret, code = CLI_EXIT_USAGE;

	msg_init(&req, MSG_T_REGION_CREATE);
	msg_init(&rep, MSG_T_NONE);
	while ((ret = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (ret) {
		case 's':
			if (cli_opt_size(usage, "--size", optarg, &req.size))
				goto out;
			if (!req.size) {
				cli_usage_err(usage, "--size must not be 0");
				goto out;
			}
			break;
		case 'c':
			if (cli_opt_size(usage, "--chunk-size", optarg,
					 &req.chunk_size))
				goto out;
			if (req.chunk_size < CLI_CHUNK_SIZE_MIN ||
			    (req.chunk_size & (req.chunk_size - 1))) {
				cli_usage_err(usage,
					      "--chunk-size: %s is not a power "
					      "of two >= 2 MiB",
					      optarg);
				goto out;
			}
			break;
		case 'n':
			free(req.place);
			req.place = NULL;
			ret = cli_opt_ids(usage, "--nodes", optarg, &req.place,
					  &req.n_place);
			if (ret < 0) {
				code = ret == -EINVAL ? CLI_EXIT_USAGE
						      : CLI_EXIT_FAIL;
				goto out;
			}
			break;
		case 'o':
			free(req.owners);
			req.owners = NULL;
			ret = cli_opt_ids(usage, "--owners", optarg,
					  &req.owners, &req.n_owners);
			if (ret < 0) {
				code = ret == -EINVAL ? CLI_EXIT_USAGE
						      : CLI_EXIT_FAIL;
				goto out;
			}
			break;
		case 'w':
			if (cli_opt_u64(usage, "--wait", optarg, &wait_s))
				goto out;
			if (wait_s > 3600) {
				cli_usage_err(usage, "--wait: at most 3600");
				goto out;
			}
			break;
		case 'h':
			fputs(usage, stdout);
			code = CLI_EXIT_OK;
			goto out;
		default:
			cli_getopt_err(usage, "region create", ret, argv);
			goto out;
		}
	}
	ret = cli_region_pos(usage, "region create", argc, argv, 1);
	if (ret >= 0) {
		code = ret;
		goto out;
	}
	if (!req.size) {
		cli_usage_err(usage, "region create: --size is required");
		goto out;
	}
	if (req.n_place && req.n_owners) {
		cli_usage_err(usage, "region create: give --nodes or --owners, "
				     "not both");
		goto out;
	}
	msg_strset(req.name, sizeof(req.name), argv[optind]);

	code = CLI_EXIT_FAIL;
	snprintf(what, sizeof(what), "region create %s", req.name);
	if (cli_coord_call_wait(c, what, &req, &rep, MSG_T_NONE,
				(unsigned int)wait_s * 1000) < 0)
		goto out;
	if (rep.type != MSG_T_REGION) {
		/* Acknowledged without the map: fetch it. */
		msg_fini(&rep);
		if (cli_region_get(c, what, req.name, &rep) < 0)
			goto out;
	}
	printf("created ");
	cli_region_summary(&rep);
	code = CLI_EXIT_OK;
out:
	msg_fini(&rep);
	msg_fini(&req);
	return code;
}

static int cli_region_list(const struct cli *c, int argc, char **argv)
{
	char size[32], chunk[32];
	struct msg req, rep;
	int ret;

	ret = cli_region_args(cli_region_list_usage, "region list", argc, argv,
			      0);
	if (ret >= 0)
		return ret;
	msg_init(&req, MSG_T_REGION_LIST);
	if (cli_coord_call(c, "region list", &req, &rep, MSG_T_REGIONS) < 0) {
		msg_fini(&rep);
		return CLI_EXIT_FAIL;
	}
	if (!rep.n_regions)
		printf("no regions\n");
	else
		printf("%-16s %-10s %-10s %7s %6s\n", "NAME", "SIZE", "CHUNK",
		       "CHUNKS", "EPOCH");
	for (uint32_t i = 0; i < rep.n_regions; i++) {
		const struct msg_region *r = &rep.regions[i];
		uint64_t n = r->n_chunks;

		/* The list may leave the chunk maps out. */
		if (!n && r->chunk_size)
			n = (r->size + r->chunk_size - 1) / r->chunk_size;
		printf("%-16s %-10s %-10s %7llu %6llu\n", r->name,
		       cli_size_str(r->size, size, sizeof(size)),
		       cli_size_str(r->chunk_size, chunk, sizeof(chunk)),
		       (unsigned long long)n, (unsigned long long)r->epoch);
	}
	msg_fini(&rep);
	return CLI_EXIT_OK;
}

static int cli_region_show(const struct cli *c, int argc, char **argv)
{
	char what[32 + MSG_NAME_MAX];
	struct msg rep;
	int ret;

	ret = cli_region_args(cli_region_show_usage, "region show", argc, argv,
			      1);
	if (ret >= 0)
		return ret;
	snprintf(what, sizeof(what), "region show %s", argv[optind]);
	if (cli_region_get(c, what, argv[optind], &rep) < 0) {
		msg_fini(&rep);
		return CLI_EXIT_FAIL;
	}
	cli_region_summary(&rep);
	printf("\n%7s  %-18s %6s  %s\n", "CHUNK", "REGION OFFSET", "OWNER",
	       "POOL OFFSET");
	for (uint32_t i = 0; i < rep.n_chunks; i++)
		printf("%7u  0x%-16llx %6llu  0x%llx\n", i,
		       (unsigned long long)(i * rep.chunk_size),
		       (unsigned long long)rep.chunks[i].node,
		       (unsigned long long)rep.chunks[i].off);
	msg_fini(&rep);
	return CLI_EXIT_OK;
}

static int cli_region_delete(const struct cli *c, int argc, char **argv)
{
	char what[32 + MSG_NAME_MAX];
	struct msg req, rep;
	int ret;

	ret = cli_region_args(cli_region_delete_usage, "region delete", argc,
			      argv, 1);
	if (ret >= 0)
		return ret;
	msg_init(&req, MSG_T_REGION_DELETE);
	msg_strset(req.name, sizeof(req.name), argv[optind]);
	snprintf(what, sizeof(what), "region delete %s", req.name);
	ret = cli_coord_call(c, what, &req, &rep, MSG_T_OK);
	msg_fini(&rep);
	if (ret < 0)
		return CLI_EXIT_FAIL;
	printf("deleted region %s\n", req.name);
	return CLI_EXIT_OK;
}

int cli_region_run(const struct cli *c, int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*run)(const struct cli *c, int argc, char **argv);
	} subs[] = {
		{ "create", cli_region_create },
		{ "list", cli_region_list },
		{ "show", cli_region_show },
		{ "delete", cli_region_delete },
	};

	if (argc < 2)
		return cli_usage_err(cli_region_usage,
				     "region: missing subcommand");
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fputs(cli_region_usage, stdout);
		return CLI_EXIT_OK;
	}
	for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++)
		if (!strcmp(argv[1], subs[i].name))
			return subs[i].run(c, argc - 1, argv + 1);
	return cli_usage_err(cli_region_usage,
			     "region: unknown subcommand '%s'", argv[1]);
}
