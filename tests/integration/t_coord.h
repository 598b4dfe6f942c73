/* SPDX-License-Identifier: MIT */
/*
 * Helpers of the coordinator's integration tests: a farpage-coordinator
 * process on 127.0.0.1 with a fresh temporary data directory, started,
 * killed and restarted; control calls to it; cleanup on every path.
 */
#ifndef TESTS_INTEGRATION_T_COORD_H
#define TESTS_INTEGRATION_T_COORD_H

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"
#include "msg.h"
#include "net.h"

#define T_PASS	  0
#define T_FAIL	  1
#define T_SKIP	  77
#define T_CALL_MS 5000
#define T_LEAD_MS 60000

/* Logs a failed check with its location and jumps to the caller's out:. */
#define T_CHECK(cond, ...)                                                     \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, \
				__LINE__, #cond);                              \
			fprintf(stderr, __VA_ARGS__);                          \
			fputc('\n', stderr);                                   \
			goto out;                                              \
		}                                                              \
	} while (0)

struct t_coord {
	char bin[PATH_MAX];
	char dir[PATH_MAX];	  /* temporary root, removed at the end */
	char data[PATH_MAX + 16]; /* dir/data: the data directory */
	char afile[PATH_MAX + 8]; /* dir/addr: --addr-file */
	char log[PATH_MAX + 16];  /* dir/coord.log: its stderr */
	char addr[MSG_ADDR_MAX];
	pid_t pid;	    /* 0 when not running */
	int status;	    /* the wait status of the last exit seen */
	uint64_t fsize_max; /* RLIMIT_FSIZE of the process; 0: none */
	int keyed;	    /* not --insecure: the caller gives --key-file */
	/* --store STORE instead of --data-dir (e.g. etcd://h:p); NULL: not */
	const char *store;
};

static inline uint64_t t_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static inline void t_sleep_ms(unsigned int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000,
			       .tv_nsec = (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static inline int t_rm_one(const char *path, const struct stat *st, int flag,
			   struct FTW *ftw)
{
	return remove(path);
}

/*
 * Finds the binary ($FARPAGE_BIN/coordinator/farpage-coordinator) and makes
 * the temporary directory. Returns T_PASS, T_SKIP or T_FAIL.
 */
static inline int t_coord_init(struct t_coord *tc, const char *name)
{
	const char *bin = getenv("FARPAGE_BIN");
	const char *tmp = getenv("TMPDIR");
	char self[PATH_MAX - 64], *slash;
	ssize_t n;

	memset(tc, 0, sizeof(*tc));
	signal(SIGPIPE, SIG_IGN);
	if (bin && *bin) {
		snprintf(tc->bin, sizeof(tc->bin),
			 "%s/coordinator/farpage-coordinator", bin);
	} else {
		/* Run by hand: the build dir is the one this test is in
		 * (BUILD/tests/NAME). */
		n = readlink("/proc/self/exe", self, sizeof(self) - 1);
		self[n > 0 ? n : 0] = '\0';
		for (int i = 0; i < 2 && (slash = strrchr(self, '/')); i++)
			*slash = '\0';
		snprintf(tc->bin, sizeof(tc->bin),
			 "%s/coordinator/farpage-coordinator", self);
	}
	if (access(tc->bin, X_OK)) {
		fprintf(stderr,
			"%s: %s: %s\n%s: run it with the build directory in "
			"FARPAGE_BIN (FARPAGE_BIN=BUILD %s), or through ctest "
			"(ctest --test-dir BUILD -R %s)\n",
			name, tc->bin, strerror(errno), name, name, name);
		return T_FAIL;
	}
	snprintf(tc->dir, sizeof(tc->dir), "%s/%s.XXXXXX",
		 tmp && *tmp ? tmp : "/tmp", name);
	if (!mkdtemp(tc->dir)) {
		fprintf(stderr, "%s: mkdtemp: %s\n", name, strerror(errno));
		tc->dir[0] = '\0';
		return T_FAIL;
	}
	snprintf(tc->data, sizeof(tc->data), "%s/data", tc->dir);
	snprintf(tc->afile, sizeof(tc->afile), "%s/addr", tc->dir);
	snprintf(tc->log, sizeof(tc->log), "%s/coord.log", tc->dir);
	return T_PASS;
}

static inline int t_coord_is_running(struct t_coord *tc)
{
	int status;

	if (!tc->pid)
		return 0;
	if (waitpid(tc->pid, &status, WNOHANG) == tc->pid) {
		fprintf(stderr, "coordinator %d exited: status 0x%x\n",
			(int)tc->pid, status);
		tc->status = status;
		tc->pid = 0;
		return 0;
	}
	return 1;
}

/*
 * Starts the coordinator on 127.0.0.1:0 with the data directory (or
 * tc->store) and any @extra arguments (NULL-terminated), and waits until
 * it has written its address. Returns 0 or -1.
 */
static inline int t_coord_start(struct t_coord *tc, const char *const *extra)
{
	/* These tests speak the control protocol itself, without the
	 * handshake (test_security covers that): --insecure, unless the
	 * test has keys (tc->keyed). */
	const char *argv[32] = { tc->bin,	"--listen",    "127.0.0.1:0",
				 "--addr-file", tc->afile,     "--data-dir",
				 tc->data,	"--log-level", "info",
				 "--insecure" };
	int argc = tc->keyed ? 9 : 10, fd;
	pid_t parent = getpid();
	uint64_t deadline;
	FILE *f;

	if (tc->store) {
		argv[5] = "--store";
		argv[6] = tc->store;
	}
	for (; extra && *extra && argc < 31; extra++)
		argv[argc++] = *extra;
	argv[argc] = NULL;
	unlink(tc->afile);
	tc->addr[0] = '\0';
	tc->pid = fork();
	if (tc->pid < 0) {
		perror("fork");
		tc->pid = 0;
		return -1;
	}
	if (tc->pid == 0) {
		/* Never outlive the test, however it ends. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		if (tc->fsize_max) {
			/* Writes past it fail with EFBIG instead. */
			struct rlimit rl = { tc->fsize_max, tc->fsize_max };

			signal(SIGXFSZ, SIG_IGN);
			setrlimit(RLIMIT_FSIZE, &rl);
		}
		fd = open(tc->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0) {
			dup2(fd, 2);
			close(fd);
		}
		execv(tc->bin, (char *const *)argv);
		_exit(127);
	}
	deadline = t_now_ms() + 10000;
	while (t_now_ms() < deadline) {
		f = fopen(tc->afile, "r");
		if (f) {
			if (fgets(tc->addr, sizeof(tc->addr), f))
				tc->addr[strcspn(tc->addr, "\r\n")] = '\0';
			fclose(f);
			if (tc->addr[0])
				return 0;
		}
		if (!t_coord_is_running(tc))
			return -1;
		t_sleep_ms(10);
	}
	fprintf(stderr, "coordinator wrote no address within 10 s\n");
	return -1;
}

/* Sends @sig and reaps the process. Returns its wait status or -1. */
static inline int t_coord_stop(struct t_coord *tc, int sig)
{
	int status;

	if (!tc->pid)
		return -1;
	kill(tc->pid, sig);
	if (waitpid(tc->pid, &status, 0) != tc->pid)
		status = -1;
	tc->pid = 0;
	return status;
}

/* Kills the coordinator if it runs; on failure (or with FARPAGE_TEST_LOG
 * set) shows its log; removes the temporary directory. */
static inline void t_coord_fini(struct t_coord *tc, int failed)
{
	char line[1024];
	FILE *f;

	if (tc->pid)
		t_coord_stop(tc, SIGKILL);
	if ((failed || getenv("FARPAGE_TEST_LOG")) && tc->log[0] &&
	    (f = fopen(tc->log, "r"))) {
		fprintf(stderr, "---- coordinator log ----\n");
		while (fgets(line, sizeof(line), f))
			fputs(line, stderr);
		fprintf(stderr, "-------------------------\n");
		fclose(f);
	}
	if (tc->dir[0])
		nftw(tc->dir, t_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Connects to the running coordinator; returns the fd or -1. */
static inline int t_connect(const struct t_coord *tc)
{
	int fd, ret;

	ret = net_connect(tc->addr, T_CALL_MS, &fd);
	if (ret) {
		fprintf(stderr, "connect %s: %s\n", tc->addr, strerror(-ret));
		return -1;
	}
	return fd;
}

/* One request, one reply; 0, -errno of an ERROR reply, or another -errno. */
/*
 * One call. A coordinator on etcd that does not lead yet (one restarted
 * after a kill waits out its predecessor's etcd lease) answers
 * COORD_ERR_NOT_LEADER: asked again until it leads (T_LEAD_MS bounds a
 * hang).
 */
static inline int t_call(int fd, const struct msg *req, struct msg *rep)
{
	uint64_t deadline = t_now_ms() + T_LEAD_MS;
	int ret;

	for (;;) {
		ret = ctl_call(fd, req, rep, T_CALL_MS);
		if (ret != -COORD_ERR_NOT_LEADER || t_now_ms() >= deadline)
			return ret;
		msg_fini(rep);
		t_sleep_ms(20);
	}
}

/* Counts lines of the coordinator's log that contain @needle. */
static inline int t_log_count(const struct t_coord *tc, const char *needle)
{
	char line[2048];
	int n = 0;
	FILE *f = fopen(tc->log, "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

/*
 * Waits until the coordinator's log has @count lines containing @needle,
 * polling every 10 ms; @max_ms only bounds a hang. Returns 0, or -1 (after
 * saying so) if they never come.
 */
static inline int t_wait_log(const struct t_coord *tc, const char *needle,
			     int count, unsigned int max_ms)
{
	uint64_t deadline = t_now_ms() + max_ms;

	for (;;) {
		if (t_log_count(tc, needle) >= count)
			return 0;
		if (t_now_ms() >= deadline)
			break;
		t_sleep_ms(10);
	}
	fprintf(stderr, "'%s' logged %d times after %u ms, expected %d\n",
		needle, t_log_count(tc, needle), max_ms, count);
	return -1;
}

/*
 * Waits for the coordinator to close @fd: read() returns 0 (or the reset
 * that unread input causes). An ERROR reply before it is allowed. Returns
 * 0, or -1 if the connection is still open after @timeout_ms.
 */
static inline int t_wait_closed(int fd, int timeout_ms)
{
	uint64_t deadline = t_now_ms() + (uint64_t)timeout_ms;
	uint8_t buf[4096];

	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		uint64_t now = t_now_ms();
		ssize_t n;

		if (now >= deadline)
			return -1;
		if (poll(&pfd, 1, (int)(deadline - now)) <= 0)
			continue;
		n = read(fd, buf, sizeof(buf));
		if (n == 0)
			return 0;
		if (n < 0 && errno == ECONNRESET)
			return 0;
		if (n < 0 && errno != EINTR && errno != EAGAIN)
			return -1;
	}
}

/*
 * Waits until the coordinator has run its periodic check (lease expiries,
 * then cutting connections that hold half a frame too long) at least once
 * after this call starts. Nothing else shows that a check ran, so this
 * makes one observable: a new connection sends half a frame, and the check
 * that cuts it also checked the leases after the half frame arrived. Needs
 * a short --frame-timeout-ms; @max_ms only bounds a hang. Returns 0 or -1.
 */
static inline int t_coord_tick_wait(const struct t_coord *tc,
				    unsigned int max_ms)
{
	static const uint8_t half[] = { 0, 0, 0, 100, 0xa1 };
	int fd = t_connect(tc);
	int ret = -1;

	if (fd < 0)
		return -1;
	if (send(fd, half, sizeof(half), MSG_NOSIGNAL) != (ssize_t)sizeof(half))
		fprintf(stderr, "tick probe: send: %s\n", strerror(errno));
	else if (t_wait_closed(fd, (int)max_ms))
		fprintf(stderr, "tick probe: not cut within %u ms\n", max_ms);
	else
		ret = 0;
	close(fd);
	return ret;
}

static inline int t_join(int fd, const char *name, uint64_t pool,
			 uint64_t instance, uint64_t *id)
{
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_NODE_JOIN);
	snprintf(req.name, sizeof(req.name), "%s", name);
	snprintf(req.data_addr, sizeof(req.data_addr), "127.0.0.1:%d",
		 7800 + name[0]);
	req.pool_size = pool;
	req.instance = instance;
	ret = t_call(fd, &req, &rep);
	if (!ret && rep.type != MSG_T_NODE_JOINED)
		ret = -EPROTO;
	if (!ret && id)
		*id = rep.node;
	if (ret)
		fprintf(stderr, "join %s: %s (%s)\n", name, strerror(-ret),
			rep.text);
	msg_fini(&rep);
	return ret;
}

static inline int t_heartbeat(int fd, uint64_t node, uint64_t instance)
{
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_HEARTBEAT);
	req.node = node;
	req.instance = instance;
	ret = t_call(fd, &req, &rep);
	if (!ret && rep.type != MSG_T_HEARTBEAT_ACK)
		ret = -EPROTO;
	msg_fini(&rep);
	return ret;
}

/* Is node @id up in the node list? 1 or 0; -1 if it is not listed. */
static inline int t_up(int fd, uint64_t id)
{
	struct msg req, rep;
	int up = -1;

	msg_init(&req, MSG_T_NODE_LIST);
	if (!t_call(fd, &req, &rep))
		for (uint32_t i = 0; i < rep.n_nodes; i++)
			if (rep.nodes[i].id == id)
				up = (int)rep.nodes[i].up;
	msg_fini(&rep);
	return up;
}

/*
 * One heartbeat of node @id (instance @inst) that answers checks: the
 * epoch @synced of tables @cid synced, the digests @sums (@n_sums: sent,
 * then 0) and a rebuild task taken, rebuilt and failed (0: none). The
 * answer in @ack (msg_fini it). Returns 0, -EPROTO for another answer,
 * or -errno.
 */
static inline int t_heartbeat_tasks(int fd, uint64_t id, uint64_t inst,
				    uint64_t synced, uint64_t cid,
				    const struct msg_rsum *sums,
				    uint32_t *n_sums, uint64_t taken,
				    uint64_t rebuilt, uint64_t failed,
				    struct msg *ack)
{
	struct msg req;
	int ret;

	msg_init(&req, MSG_T_HEARTBEAT);
	req.node = id;
	req.instance = inst;
	req.epoch = synced;
	req.cid = cid;
	req.rchk = 1;
	if (*n_sums) {
		req.sums = malloc(*n_sums * sizeof(*req.sums));
		if (!req.sums)
			return -ENOMEM;
		memcpy(req.sums, sums, *n_sums * sizeof(*req.sums));
		req.n_sums = *n_sums;
		*n_sums = 0;
	}
	if (taken) {
		req.taken = &taken;
		req.n_taken = 1;
	}
	if (rebuilt) {
		req.rebuilt = &rebuilt;
		req.n_rebuilt = 1;
	}
	if (failed) {
		req.failed = &failed;
		req.n_failed = 1;
	}
	ret = t_call(fd, &req, ack);
	req.taken = req.rebuilt = req.failed = NULL; /* ours */
	req.n_taken = req.n_rebuilt = req.n_failed = 0;
	msg_fini(&req);
	if (!ret && ack->type != MSG_T_HEARTBEAT_ACK)
		ret = -EPROTO;
	return ret;
}

#endif
