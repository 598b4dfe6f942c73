// SPDX-License-Identifier: MIT
/*
 * farpage-coordinator on a damaged data directory: a torn last log record is
 * cut at start-up (logged) and every acknowledged change is kept; a bad
 * record in the middle of the log stops it with exit status 3 and the
 * offset named, changing nothing; --check reports (0 clean, 3 problems)
 * without changing anything; --check --repair cuts at the bad record,
 * keeping the bytes cut in wal.<generation>.cut-<offset>.
 */
#include <stdint.h>

#include "t_coord.h"

#define MIB	    (UINT64_C(1) << 20)
#define T_POOL	    (UINT64_C(1) << 30)
#define T_REGIONS   6
#define T_EXIT_DATA 3

/* The wal's record offsets: rec[i] is where record i starts. */
struct t_wal {
	uint8_t *p;
	size_t len;
	uint64_t rec[64];
	int n;
};

static uint32_t t_get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

static int t_file_read(const char *path, uint8_t **p, size_t *len)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || fstat(fd, &st) < 0)
		goto err;
	*len = (size_t)st.st_size;
	*p = malloc(*len + 1);
	if (!*p || read(fd, *p, *len) != (ssize_t)*len)
		goto err;
	close(fd);
	return 0;
err:
	fprintf(stderr, "read %s: %s\n", path, strerror(errno));
	if (fd >= 0)
		close(fd);
	return -1;
}

static int t_file_write(const char *path, const uint8_t *p, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int ret = 0;

	if (fd < 0 || write(fd, p, len) != (ssize_t)len)
		ret = -1;
	if (fd >= 0)
		close(fd);
	return ret;
}

/* Reads @path and finds its records (wal header: 20 bytes). */
static int t_wal_read(const char *path, struct t_wal *w)
{
	uint64_t off = 20;

	memset(w, 0, sizeof(*w));
	if (t_file_read(path, &w->p, &w->len))
		return -1;
	while (off + 12 <= w->len && w->n < 64) {
		w->rec[w->n++] = off;
		off += 12 + t_get32(w->p + off + 4);
	}
	return off == w->len ? 0 : -1;
}

/*
 * Runs farpage-coordinator with @args (NULL-terminated), its stdout and
 * stderr to @out. Returns its exit status, or -1 (also if it still runs
 * after 60 s, a bound for a hang only: then it is killed).
 */
static int t_run(const struct t_coord *tc, const char *out,
		 const char *const *args)
{
	const char *argv[16] = { tc->bin };
	int argc = 1, status, fd;
	pid_t pid;

	for (; *args && argc < 15; args++)
		argv[argc++] = *args;
	argv[argc] = NULL;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0)
			_exit(127);
		dup2(fd, 1);
		dup2(fd, 2);
		execv(tc->bin, (char *const *)argv);
		_exit(127);
	}
	for (uint64_t end = t_now_ms() + 60000;;) {
		pid_t got = waitpid(pid, &status, WNOHANG);

		if (got == pid)
			break;
		if (got < 0 || t_now_ms() > end) {
			fprintf(stderr, "%s still runs; killed\n", tc->bin);
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			return -1;
		}
		t_sleep_ms(10);
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* True if the file @path contains @needle. */
static int t_file_has(const char *path, const char *needle)
{
	uint8_t *p;
	size_t len;
	int found;

	if (t_file_read(path, &p, &len))
		return 0;
	p[len] = '\0';
	found = strstr((char *)p, needle) != NULL;
	if (!found)
		fprintf(stderr, "no '%s' in %s:\n%s", needle, path, (char *)p);
	free(p);
	return found;
}

/* Regions the running coordinator lists: their count, or -1. */
static int t_regions(const struct t_coord *tc)
{
	struct msg req, rep;
	int fd, n = -1;

	fd = t_connect(tc);
	if (fd < 0)
		return -1;
	msg_init(&req, MSG_T_REGION_LIST);
	if (!t_call(fd, &req, &rep)) {
		n = (int)rep.n_regions;
		msg_fini(&rep);
	}
	close(fd);
	return n;
}

int main(void)
{
	char wal[PATH_MAX + 32], out[PATH_MAX + 32], cut[PATH_MAX + 64];
	char needle[PATH_MAX + 128];
	const char *check[] = { "--check", NULL, NULL };
	const char *repair[] = { "--check", "--repair", NULL, NULL };
	const char *run[] = { "--listen",   "127.0.0.1:0", "--data-dir", NULL,
			      "--insecure", "--log-level", "info",	 NULL };
	struct t_wal w = { 0 }, after = { 0 };
	struct msg req, rep;
	struct t_coord tc;
	uint64_t bad, last;
	int ret, fd = -1, status;

	ret = t_coord_init(&tc, "test_coord_check");
	if (ret)
		return ret;
	ret = T_FAIL;
	snprintf(wal, sizeof(wal), "%s/wal", tc.data);
	snprintf(out, sizeof(out), "%s/out", tc.dir);
	check[1] = repair[2] = run[3] = tc.data;

	/* One node, T_REGIONS acknowledged creates: T_REGIONS + 1 records. */
	T_CHECK(t_coord_start(&tc, NULL) == 0, "start");
	fd = t_connect(&tc);
	T_CHECK(fd >= 0, "connect");
	T_CHECK(t_join(fd, "a", T_POOL, 1, NULL) == 0, "join");
	for (int i = 0; i < T_REGIONS; i++) {
		msg_init(&req, MSG_T_REGION_CREATE);
		snprintf(req.name, sizeof(req.name), "r%d", i);
		req.size = 2 * MIB;
		T_CHECK(t_call(fd, &req, &rep) == 0 && rep.type == MSG_T_REGION,
			"create r%d", i);
		msg_fini(&req);
		msg_fini(&rep);
	}
	close(fd);
	fd = -1;
	T_CHECK(t_coord_stop(&tc, SIGKILL) != -1, "kill");
	T_CHECK(t_wal_read(wal, &w) == 0 && w.n == T_REGIONS + 1,
		"wal of %d records", w.n);

	/* Record 2 (create r1) damaged: refused with exit 3, unchanged. */
	bad = w.rec[2];
	w.p[bad + 12 + 3] ^= 0x01;
	T_CHECK(t_file_write(wal, w.p, w.len) == 0, "damage");
	/* Exit 3: what the unit's RestartPreventExitStatus= lists. */
	status = t_run(&tc, out, run);
	T_CHECK(status == T_EXIT_DATA, "exit status %d of a refusal", status);
	snprintf(needle, sizeof(needle), "%s is invalid at byte %llu: CRC", wal,
		 (unsigned long long)bad);
	T_CHECK(t_file_has(out, needle), "refusal names the offset");
	T_CHECK(t_file_has(out, "refusing to start"), "refusal");
	T_CHECK(t_wal_read(wal, &after) == 0 && after.len == w.len &&
			!memcmp(after.p, w.p, w.len),
		"refusal changed the wal");
	free(after.p);
	after.p = NULL;

	/* --check: 3, the offset, nothing changed. */
	T_CHECK(t_run(&tc, out, check) == T_EXIT_DATA, "--check: bad");
	snprintf(needle, sizeof(needle),
		 "problem: %s/wal at byte %llu: ", tc.data,
		 (unsigned long long)bad);
	T_CHECK(t_file_has(out, needle), "--check names the offset");
	T_CHECK(t_wal_read(wal, &after) == 0 && after.len == w.len &&
			!memcmp(after.p, w.p, w.len),
		"--check changed the wal");
	free(after.p);
	after.p = NULL;

	/* --check --repair: a copy, the cut, 0; then the rest starts. */
	T_CHECK(t_run(&tc, out, repair) == 0, "--repair");
	snprintf(cut, sizeof(cut), "%s/wal.0.cut-%llu", tc.data,
		 (unsigned long long)bad);
	snprintf(needle, sizeof(needle), "kept in %s", cut);
	T_CHECK(t_file_has(out, needle), "--repair names the copy");
	T_CHECK(t_file_read(cut, &after.p, &after.len) == 0 &&
			after.len == w.len - bad &&
			!memcmp(after.p, w.p + bad, after.len),
		"the copy holds the bytes cut");
	free(after.p);
	after.p = NULL;
	T_CHECK(t_coord_start(&tc, NULL) == 0, "start after the repair");
	T_CHECK(t_regions(&tc) == 1, "regions before the bad record");
	T_CHECK(t_coord_stop(&tc, SIGTERM) == 0, "stop");

	/* The whole log again, a byte of its last record changed: whole in
	 * the file, so damage (the create it holds was acknowledged), not a
	 * torn write: refused with exit 3, unchanged. */
	w.p[bad + 12 + 3] ^= 0x01;
	last = w.rec[T_REGIONS];
	w.p[w.len - 2] ^= 0x01;
	T_CHECK(t_file_write(wal, w.p, w.len) == 0, "damage the last");
	status = t_run(&tc, out, run);
	T_CHECK(status == T_EXIT_DATA, "exit status %d, last record changed",
		status);
	snprintf(needle, sizeof(needle), "%s is invalid at byte %llu: CRC", wal,
		 (unsigned long long)last);
	T_CHECK(t_file_has(out, needle) &&
			t_file_has(out, "damage, not a torn write"),
		"refusal names the last record as damaged");
	T_CHECK(t_wal_read(wal, &after) == 0 && after.len == w.len &&
			!memcmp(after.p, w.p, w.len),
		"refusal changed the wal");
	free(after.p);
	after.p = NULL;
	w.p[w.len - 2] ^= 0x01;

	/* A torn last record, reported (3), then cut at start-up; the log
	 * is clean afterwards. */
	T_CHECK(t_file_write(wal, w.p, w.rec[T_REGIONS] + 9) == 0, "tear");
	T_CHECK(t_run(&tc, out, check) == T_EXIT_DATA, "--check: torn");
	snprintf(needle, sizeof(needle), "%s/wal at byte %llu: ", tc.data,
		 (unsigned long long)w.rec[T_REGIONS]);
	T_CHECK(t_file_has(out, needle) &&
			t_file_has(out, "torn last record (9 bytes"),
		"--check names the torn record");
	T_CHECK(t_coord_start(&tc, NULL) == 0, "start after a tear");
	snprintf(needle, sizeof(needle),
		 "%s: torn last record at byte %llu: short record", wal,
		 (unsigned long long)w.rec[T_REGIONS]);
	T_CHECK(t_log_count(&tc, needle) == 1 &&
			t_log_count(&tc, "; cutting 9 bytes") == 1,
		"cut logged");
	T_CHECK(t_regions(&tc) == T_REGIONS - 1, "regions after the cut");
	T_CHECK(t_coord_stop(&tc, SIGTERM) == 0, "stop");

	/* Clean. */
	T_CHECK(t_run(&tc, out, check) == 0, "--check of a clean dir");
	T_CHECK(t_file_has(out, "clean"), "clean");

	ret = T_PASS;
out:
	if (fd >= 0)
		close(fd);
	free(w.p);
	free(after.p);
	t_coord_fini(&tc, ret != T_PASS);
	return ret;
}
