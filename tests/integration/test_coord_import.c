// SPDX-License-Identifier: MIT
/*
 * farpage-coordinator --import DATA_DIR --store etcd://... on one real etcd
 * member (t_etcd.h): a coordinator on a data directory gets four nodes in
 * three zones, regions of one, two and three replicas and placed ones (one
 * deleted), endpoints and MRs, in a snapshot and a wal; it is stopped and --import copies its
 * tables under a fresh prefix, changing nothing in the directory. A
 * coordinator on that prefix then answers the node list, the region list,
 * each region and each endpoint byte for byte as the first one did, with
 * the same cluster id, and --check --store etcd:// reports the tables the
 * import reported. A second --import into the prefix is refused, naming
 * what is there and the etcdctl command that removes it, and writes
 * nothing; a data directory whose wal has a changed byte in a complete
 * record is refused with the WAL check's words and nothing is written;
 * a running coordinator's directory is refused; a torn last record is
 * left out as start-up leaves it out.
 */
#include <dirent.h>
#include <stdint.h>

#include "coord.h"
#include "etcd.h"
#include "t_coord.h"
#include "t_state.h"
#include "t_etcd.h"
#include "wal.h"

#define MIB	      (UINT64_C(1) << 20)
#define T_POOL	      (UINT64_C(1) << 36)
#define T_PREFIX      "/imported/"
#define T_PREFIX_BAD  "/damaged/"
#define T_PREFIX_TORN "/torn/"

/* A region of @size bytes, @replicas (0: one) or on node @on (0: any). */
static int t_create_repl(int fd, const char *name, uint64_t size,
			 uint64_t replicas, uint64_t on)
{
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_REGION_CREATE);
	snprintf(req.name, sizeof(req.name), "%s", name);
	req.size = size;
	if (replicas)
		req.replicas = replicas;
	if (on) {
		req.place = malloc(sizeof(*req.place));
		if (!req.place)
			return -ENOMEM;
		req.place[0] = on;
		req.n_place = 1;
	}
	ret = t_call(fd, &req, &rep);
	msg_fini(&req);
	if (!ret && rep.type != MSG_T_REGION)
		ret = -EPROTO;
	if (ret)
		fprintf(stderr, "create %s: %s (%s)\n", name, strerror(-ret),
			rep.text);
	msg_fini(&rep);
	return ret;
}

/* Joins @name in @zone; its id in *@id and the tables' cid in *@cid. */
static int t_join_zone(int fd, const char *name, const char *zone,
		       uint64_t inst, uint64_t *id, uint64_t *cid)
{
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_NODE_JOIN);
	snprintf(req.name, sizeof(req.name), "%s", name);
	snprintf(req.data_addr, sizeof(req.data_addr), "127.0.0.1:%d",
		 7800 + name[0]);
	snprintf(req.zone, sizeof(req.zone), "%s", zone);
	req.pool_size = T_POOL;
	req.instance = inst;
	ret = t_call(fd, &req, &rep);
	if (!ret && rep.type != MSG_T_NODE_JOINED)
		ret = -EPROTO;
	if (!ret) {
		*id = rep.node;
		*cid = rep.cid;
	}
	msg_fini(&rep);
	return ret;
}

/* The region epoch node @id's heartbeat answer names, or 0. */
static uint64_t t_epoch(int fd, uint64_t id, uint64_t inst)
{
	struct msg req, rep;
	uint64_t epoch = 0;

	msg_init(&req, MSG_T_HEARTBEAT);
	req.node = id;
	req.instance = inst;
	if (!t_call(fd, &req, &rep) && rep.type == MSG_T_HEARTBEAT_ACK)
		epoch = rep.epoch;
	msg_fini(&rep);
	return epoch;
}

static const struct {
	const char *name, *zone;
} t_nodes[] = {
	{ "na", "z1" }, { "nb", "z1" }, { "nc", "z2" }, { "nd", "z3" }
};

/* The tables the import copies, made on a data directory. */
static int t_make(int fd, uint64_t *cid)
{
	struct msg req;
	uint64_t id;
	int ret = -1;

	for (unsigned int i = 0; i < 4; i++)
		T_CHECK(t_join_zone(fd, t_nodes[i].name, t_nodes[i].zone,
				    0x100 * (i + 1), &id, cid) == 0 &&
				id == i + 1,
			"join %s", t_nodes[i].name);
	T_CHECK(t_create_repl(fd, "plain", 10 * MIB, 0, 0) == 0, "create");
	T_CHECK(t_create_repl(fd, "two", 16 * MIB, 2, 0) == 0, "create");
	T_CHECK(t_create_repl(fd, "three", 4 * MIB, 3, 0) == 0, "create");
	T_CHECK(t_create_repl(fd, "placed", 6 * MIB, 0, 3) == 0, "create");
	T_CHECK(t_create_repl(fd, "gone", 4 * MIB, 2, 0) == 0, "create");
	T_CHECK(t_create_repl(fd, "last", 8 * MIB, 2, 0) == 0, "create");
	msg_init(&req, MSG_T_REGION_DELETE);
	snprintf(req.name, sizeof(req.name), "gone");
	T_CHECK(t_simple(fd, &req) == 0, "delete");
	for (uint64_t a = 1; a <= 2; a++) {
		msg_init(&req, MSG_T_ENDPOINT_PUT);
		req.node = a;
		req.peer = 3 - a;
		req.qpn = 0x1200 + a;
		req.lid = 0x11;
		req.psn = 0xabcd + a;
		req.mtu = 4096;
		for (int i = 0; i < MSG_GID_LEN; i++)
			req.gid[i] = (uint8_t)(0xfe + i * a);
		T_CHECK(t_simple(fd, &req) == 0, "endpoint");
		msg_init(&req, MSG_T_MR_PUT);
		req.node = a;
		req.mr_addr = 0x7f1200000000 + a * 0x100000000;
		req.rkey = 0x70 + a;
		req.mr_len = T_POOL;
		T_CHECK(t_simple(fd, &req) == 0, "mr");
	}
	ret = 0;
out:
	return ret;
}

/* Runs @bin @args (stderr to @log): exit status, stdout in @out. */
static int t_run(const char *bin, const char *args, const char *log, char *out,
		 size_t len)
{
	char cmd[4 * PATH_MAX];
	size_t n;
	FILE *f;
	int st;

	snprintf(cmd, sizeof(cmd), "%s %s 2>>%s", bin, args, log);
	f = popen(cmd, "r");
	if (!f)
		return -1;
	n = fread(out, 1, len - 1, f);
	out[n] = '\0';
	st = pclose(f);
	fprintf(stderr, "$ farpage-coordinator %s\n%s", args, out);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Every file of directory @dir (names, sizes, modes, contents) as one
 * string, to tell whether anything in it changed. */
static char *t_dir_image(const char *dir)
{
	char path[PATH_MAX + 300], *img = NULL, *ni;
	size_t len = 0;
	struct dirent *d;
	struct stat sb;
	DIR *dp;
	FILE *f;

	dp = opendir(dir);
	if (!dp)
		return NULL;
	while ((d = readdir(dp))) {
		if (!strcmp(d->d_name, ".."))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, d->d_name);
		if (stat(path, &sb))
			goto err;
		ni = realloc(img, len + 400 + (size_t)sb.st_size);
		if (!ni)
			goto err;
		img = ni;
		len += (size_t)sprintf(img + len, "%s %o %lld\n", d->d_name,
				       (unsigned)sb.st_mode,
				       (long long)sb.st_size);
		if (!S_ISREG(sb.st_mode))
			continue;
		f = fopen(path, "r");
		if (!f)
			goto err;
		len += fread(img + len, 1, (size_t)sb.st_size, f);
		fclose(f);
	}
	closedir(dp);
	if (!img)
		return NULL;
	img[len] = '\0';
	return img;
err:
	closedir(dp);
	free(img);
	return NULL;
}

/* Copies file @from to @to. */
static int t_copy(const char *from, const char *to)
{
	char buf[65536];
	FILE *in = fopen(from, "r"), *o = fopen(to, "w");
	size_t n;
	int ret = in && o ? 0 : -1;

	while (!ret && (n = fread(buf, 1, sizeof(buf), in)) > 0)
		if (fwrite(buf, 1, n, o) != n)
			ret = -1;
	if (in)
		fclose(in);
	if (o && fclose(o))
		ret = -1;
	return ret;
}

/* @dst: a copy of data directory @src (snapshot, wal, cluster id). */
static int t_dir_copy(const char *src, const char *dst)
{
	char from[PATH_MAX + 32], to[PATH_MAX + 32];
	static const char *const files[] = { "snapshot", "wal", "cluster-id" };

	if (mkdir(dst, 0700))
		return -1;
	for (int i = 0; i < 3; i++) {
		snprintf(from, sizeof(from), "%s/%s", src, files[i]);
		snprintf(to, sizeof(to), "%s/%s", dst, files[i]);
		if (t_copy(from, to))
			return -1;
	}
	return 0;
}

/* @dst: a copy of data directory @src whose wal has one byte changed in
 * the payload of its second record (complete: the WAL refuses it). */
static int t_damaged(const char *src, const char *dst)
{
	char to[PATH_MAX + 32];
	uint8_t hdr[WAL_REC_HDR_LEN];
	uint32_t plen;
	long off;
	FILE *f;
	int c;

	if (t_dir_copy(src, dst))
		return -1;
	snprintf(to, sizeof(to), "%s/wal", dst);
	f = fopen(to, "r+");
	if (!f)
		return -1;
	/* The first record's header, after the wal's: its payload length. */
	if (fseek(f, WAL_HDR_LEN, SEEK_SET) ||
	    fread(hdr, 1, sizeof(hdr), f) != sizeof(hdr)) {
		fclose(f);
		return -1;
	}
	plen = (uint32_t)hdr[4] << 24 | (uint32_t)hdr[5] << 16 |
	       (uint32_t)hdr[6] << 8 | hdr[7];
	/* The second record's payload, its fourth byte. */
	off = (long)(WAL_HDR_LEN + 2 * WAL_REC_HDR_LEN + plen + 3);
	if (fseek(f, off, SEEK_SET) || (c = fgetc(f)) == EOF ||
	    fseek(f, off, SEEK_SET) || fputc(c ^ 0x20, f) == EOF) {
		fclose(f);
		return -1;
	}
	return fclose(f) ? -1 : 0;
}

static int t_main(struct t_coord *wc, struct t_coord *ec, struct t_etcd *et,
		  const char *store)
{
	/* 15 changes: a snapshot of 12, a wal of 3 */
	static const char *const wal_args[] = { "--lease-ms", "600000",
						"--snapshot-every", "6", NULL };
	static const char *const etcd_args[] = { "--lease-ms", "600000",
						 "--etcd-prefix", T_PREFIX,
						 NULL };
	struct t_state want = { 0 }, got = { 0 };
	char args[3 * PATH_MAX], out[4096], line[128], bad[PATH_MAX + 16];
	char *before = NULL, *after = NULL;
	uint64_t cid = 0, cid2 = 0, id, epoch;
	int fd = -1, ret = -1, rc, status;
	struct stat sb;
	int64_t keys;

	/* The tables, on a data directory. */
	T_CHECK(t_coord_start(wc, wal_args) == 0, "start");
	fd = t_connect(wc);
	T_CHECK(fd >= 0, "connect");
	T_CHECK(t_make(fd, &cid) == 0, "tables");
	T_CHECK(t_state_read(fd, &want) == 0, "state");
	T_CHECK(want.n_nodes == 4 && want.n_regions == 5 &&
			want.n_endpoints == 2,
		"%u nodes, %u regions, %u endpoints", want.n_nodes,
		want.n_regions, want.n_endpoints);
	epoch = t_epoch(fd, 1, 0x100);
	T_CHECK(epoch > 0, "no epoch");

	/* Refused while a coordinator runs on it. */
	snprintf(args, sizeof(args), "--import %s --store %s --etcd-prefix %s",
		 wc->data, store, T_PREFIX);
	rc = t_run(wc->bin, args, wc->log, out, sizeof(out));
	T_CHECK(rc == 1 && strstr(out, "a coordinator runs on"),
		"--import of a running coordinator's directory: %d", rc);
	T_CHECK(t_etcd_keys(et->endpoints, T_PREFIX) == 0, "it wrote");
	close(fd);
	fd = -1;
	status = t_coord_stop(wc, SIGTERM);
	T_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		"SIGTERM: status 0x%x", status);

	/* The import: the directory unchanged, the tables reported. */
	before = t_dir_image(wc->data);
	T_CHECK(before, "reading %s", wc->data);
	rc = t_run(wc->bin, args, wc->log, out, sizeof(out));
	T_CHECK(rc == 0, "--import: exit status %d", rc);
	snprintf(line, sizeof(line),
		 "tables: %u nodes, %u regions, %u endpoints", want.n_nodes,
		 want.n_regions, want.n_endpoints);
	T_CHECK(strstr(out, line), "--import did not report '%s'", line);
	snprintf(line, sizeof(line), "cluster id %016llx",
		 (unsigned long long)cid);
	T_CHECK(strstr(out, line), "--import did not report '%s'", line);
	after = t_dir_image(wc->data);
	T_CHECK(after && !strcmp(before, after), "--import changed %s",
		wc->data);
	keys = t_etcd_keys(et->endpoints, T_PREFIX);
	T_CHECK(keys > 0, "nothing under " T_PREFIX);

	/* --check on etcd reports the same tables. */
	snprintf(args, sizeof(args), "--check --store %s --etcd-prefix %s",
		 store, T_PREFIX);
	rc = t_run(wc->bin, args, wc->log, out, sizeof(out));
	snprintf(line, sizeof(line),
		 "tables: %u nodes, %u regions, %u endpoints", want.n_nodes,
		 want.n_regions, want.n_endpoints);
	T_CHECK(rc == 0 && strstr(out, line), "--check: %d", rc);

	/* A coordinator on the prefix answers as the first one did. */
	ec->store = store;
	T_CHECK(t_coord_start(ec, etcd_args) == 0, "start on etcd");
	fd = t_connect(ec);
	T_CHECK(fd >= 0, "connect");
	T_CHECK(t_state_read(fd, &got) == 0, "state on etcd");
	T_CHECK(got.n_nodes == want.n_nodes &&
			got.n_regions == want.n_regions &&
			got.n_endpoints == want.n_endpoints,
		"on etcd: %u nodes, %u regions, %u endpoints; want %u, %u, %u",
		got.n_nodes, got.n_regions, got.n_endpoints, want.n_nodes,
		want.n_regions, want.n_endpoints);
	T_CHECK(got.len == want.len && !memcmp(got.p, want.p, got.len),
		"on etcd the tables differ (%zu bytes, want %zu)", got.len,
		want.len);
	/* The same tables: an agent rejoins with its id and sees the cid. */
	T_CHECK(t_join_zone(fd, "nc", "z2", 0x300, &id, &cid2) == 0 && id == 3,
		"rejoin");
	T_CHECK(cid2 == cid, "cluster id %016llx on etcd, %016llx before",
		(unsigned long long)cid2, (unsigned long long)cid);
	T_CHECK(t_epoch(fd, 1, 0x100) == epoch,
		"epoch %llu on etcd, %llu before",
		(unsigned long long)t_epoch(fd, 1, 0x100),
		(unsigned long long)epoch);
	T_CHECK(t_create_repl(fd, "after", 4 * MIB, 2, 0) == 0,
		"create on etcd");
	close(fd);
	fd = -1;
	t_coord_stop(ec, SIGKILL);
	keys = t_etcd_keys(et->endpoints, T_PREFIX);

	/* A second import into the prefix is refused, writing nothing. */
	snprintf(args, sizeof(args), "--import %s --store %s --etcd-prefix %s",
		 wc->data, store, T_PREFIX);
	rc = t_run(wc->bin, args, wc->log, out, sizeof(out));
	T_CHECK(rc == 1 && strstr(out, "refused") &&
			strstr(out, "del --prefix '" T_PREFIX "'") &&
			strstr(out, T_PREFIX "meta"),
		"second --import: %d", rc);
	T_CHECK(t_etcd_keys(et->endpoints, T_PREFIX) == keys,
		"the refused --import wrote");

	/* A changed byte in a complete wal record: refused as --check
	 * refuses it, nothing written. */
	snprintf(bad, sizeof(bad), "%s/bad", wc->dir);
	T_CHECK(t_damaged(wc->data, bad) == 0, "damaging a copy");
	snprintf(args, sizeof(args), "--import %s --store %s --etcd-prefix %s",
		 bad, store, T_PREFIX_BAD);
	rc = t_run(wc->bin, args, wc->log, out, sizeof(out));
	T_CHECK(rc == 3 && strstr(out, "problem: ") &&
			strstr(out, "start-up refuses the directory") &&
			strstr(out, "nothing copied"),
		"--import of a damaged directory: %d", rc);
	T_CHECK(t_etcd_keys(et->endpoints, T_PREFIX_BAD) == 0,
		"the refused --import wrote");
	snprintf(args, sizeof(args), "--check %s", bad);
	rc = t_run(wc->bin, args, wc->log, out, sizeof(out));
	T_CHECK(rc == 3, "--check of the damaged copy: %d", rc);

	/* A torn last record (never acknowledged: the last MR) is left
	 * out, as start-up leaves it out. */
	snprintf(bad, sizeof(bad), "%s/torn", wc->dir);
	T_CHECK(t_dir_copy(wc->data, bad) == 0, "copying");
	snprintf(args, sizeof(args), "%s/wal", bad);
	T_CHECK(stat(args, &sb) == 0 && truncate(args, sb.st_size - 5) == 0,
		"tearing %s", args);
	snprintf(args, sizeof(args), "--import %s --store %s --etcd-prefix %s",
		 bad, store, T_PREFIX_TORN);
	rc = t_run(wc->bin, args, wc->log, out, sizeof(out));
	T_CHECK(rc == 0 && strstr(out, "torn record") && strstr(out, line),
		"--import of a torn wal: %d", rc);
	ret = 0;
out:
	if (fd >= 0)
		close(fd);
	free(want.p);
	free(got.p);
	free(before);
	free(after);
	return ret;
}

int main(void)
{
	struct t_coord wc, ec;
	struct t_etcd et;
	char store[300];
	int fail = 1;

	if (t_etcd_start(&et, 1, NULL))
		return 1;
	snprintf(store, sizeof(store), "etcd://127.0.0.1:%d", et.cport[0]);
	if (t_coord_init(&wc, "test_coord_import") != T_PASS) {
		t_etcd_stop(&et, 0);
		return 1;
	}
	if (t_coord_init(&ec, "test_coord_import") != T_PASS) {
		t_coord_fini(&wc, 0);
		t_etcd_stop(&et, 0);
		return 1;
	}
	fail = t_main(&wc, &ec, &et, store);
	t_coord_fini(&wc, fail);
	t_coord_fini(&ec, fail);
	t_etcd_stop(&et, fail);
	printf("%s\n", fail ? "FAIL" : "PASS");
	return fail ? 1 : 0;
}
