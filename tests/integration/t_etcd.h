/* SPDX-License-Identifier: MIT */
/* Real etcd members for the etcd client's tests: started on free loopback
 * ports with their data in a temporary directory, waited for (bounded),
 * killed and cleaned up. A test skips (77) when etcd is not installed. */
#ifndef TESTS_T_ETCD_H
#define TESTS_T_ETCD_H

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#define T_ETCD_MAX 3

struct t_etcd_tls;

struct t_etcd {
	int n;
	pid_t pid[T_ETCD_MAX];
	int cport[T_ETCD_MAX]; /* client */
	int pport[T_ETCD_MAX]; /* peer */
	char dir[64];
	char cluster[512];   /* --initial-cluster */
	char endpoints[256]; /* "http://127.0.0.1:p,..." for the client */
	char url[T_ETCD_MAX][64];
	const char *const *extra; /* more etcd flags, NULL-ended */
	const struct t_etcd_tls *tls;
};

/* TLS: the members serve https with cert/key and ask clients for a
 * certificate signed by ca; the same cert/key check their health. */
struct t_etcd_tls {
	const char *ca;
	const char *cert;
	const char *key;
};

/* etcd on PATH, or NULL. */
static inline const char *t_etcd_bin(void)
{
	static char path[512];
	const char *p = getenv("PATH");
	const char *c;

	for (; p && *p; p = c + 1) {
		c = strchrnul(p, ':');
		snprintf(path, sizeof(path), "%.*s/etcd", (int)(c - p), p);
		if (!access(path, X_OK))
			return path;
		if (!*c)
			break;
	}
	return NULL;
}

/* A port nothing on 127.0.0.1 uses, below the ephemeral range (as
 * tests/lib.sh fp_port picks them: a restarted member finds it free). */
static inline int t_etcd_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int lo = 32768, i, fd, p;
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");

	if (f) {
		if (fscanf(f, "%d", &lo) != 1 || lo <= 12000)
			lo = 32768;
		fclose(f);
	}
	for (i = 0; i < 100; i++) {
		p = 10000 + (int)((unsigned)rand() % (unsigned)(lo - 10000));
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -1;
		a.sin_port = htons((uint16_t)p);
		if (!bind(fd, (struct sockaddr *)&a, sizeof(a))) {
			close(fd);
			return p;
		}
		close(fd);
	}
	return -1;
}

static inline size_t t_etcd_discard(char *p, size_t s, size_t n, void *arg)
{
	char *buf = arg;
	size_t len = strlen(buf), m = s * n;

	if (len + m < 256) {
		memcpy(buf + len, p, m);
		buf[len + m] = '\0';
	}
	return s * n;
}

/* Whether member i answers /health with "true" (it has a leader). */
static inline int t_etcd_healthy(struct t_etcd *c, int i)
{
	char url[128], body[256] = "";
	CURL *h = curl_easy_init();
	CURLcode r;

	if (!h)
		return 0;
	snprintf(url, sizeof(url), "%s/health", c->url[i]);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 2000L);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, t_etcd_discard);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, (void *)body);
	if (c->tls) {
		curl_easy_setopt(h, CURLOPT_CAINFO, c->tls->ca);
		curl_easy_setopt(h, CURLOPT_SSLCERT, c->tls->cert);
		curl_easy_setopt(h, CURLOPT_SSLKEY, c->tls->key);
	}
	r = curl_easy_perform(h);
	curl_easy_cleanup(h);
	return r == CURLE_OK && strstr(body, "\"health\":\"true\"");
}

/* Whether process pid holds the socket listening on 127.0.0.1:port (the
 * inode /proc/net/tcp gives it among pid's descriptors). */
static inline int t_etcd_owns_port(pid_t pid, int port)
{
	char line[256], path[320], want[40], got[40];
	unsigned long ino = 0, i;
	unsigned int lport, st;
	FILE *f = fopen("/proc/net/tcp", "r");
	struct dirent *e;
	DIR *d;
	ssize_t n;

	if (!f)
		return 0;
	while (!ino && fgets(line, sizeof(line), f))
		if (sscanf(line,
			   " %*d: 0100007F:%X %*X:%*X %X %*X:%*X %*X:%*X %*X "
			   "%*u %*u %lu",
			   &lport, &st, &i) == 3 &&
		    (int)lport == port && st == 0x0A)
			ino = i;
	fclose(f);
	if (!ino)
		return 0;
	snprintf(want, sizeof(want), "socket:[%lu]", ino);
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	if (!d)
		return 0;
	while ((e = readdir(d))) {
		snprintf(path, sizeof(path), "/proc/%d/fd/%s", (int)pid,
			 e->d_name);
		n = readlink(path, got, sizeof(got) - 1);
		if (n > 0) {
			got[n] = '\0';
			if (!strcmp(got, want))
				break;
		}
	}
	closedir(d);
	return e != NULL;
}

static inline int t_etcd_spawn(struct t_etcd *c, int i)
{
	char name[16], data[128], log[128], cl[64], pl[64];
	const char *argv[48];
	const char *sch = c->tls ? "https" : "http";
	int k = 0, fd, j;
	pid_t pid;

	snprintf(name, sizeof(name), "m%d", i);
	snprintf(data, sizeof(data), "%s/%s", c->dir, name);
	snprintf(log, sizeof(log), "%s/%s.log", c->dir, name);
	snprintf(cl, sizeof(cl), "%s://127.0.0.1:%d", sch, c->cport[i]);
	snprintf(pl, sizeof(pl), "http://127.0.0.1:%d", c->pport[i]);
	argv[k++] = "etcd";
	argv[k++] = "--name";
	argv[k++] = name;
	argv[k++] = "--data-dir";
	argv[k++] = data;
	argv[k++] = "--listen-client-urls";
	argv[k++] = cl;
	argv[k++] = "--advertise-client-urls";
	argv[k++] = cl;
	argv[k++] = "--listen-peer-urls";
	argv[k++] = pl;
	argv[k++] = "--initial-advertise-peer-urls";
	argv[k++] = pl;
	argv[k++] = "--initial-cluster";
	argv[k++] = c->cluster;
	argv[k++] = "--initial-cluster-state";
	argv[k++] = "new";
	argv[k++] = "--initial-cluster-token";
	argv[k++] = c->dir;
	if (c->tls) {
		argv[k++] = "--cert-file";
		argv[k++] = c->tls->cert;
		argv[k++] = "--key-file";
		argv[k++] = c->tls->key;
		argv[k++] = "--trusted-ca-file";
		argv[k++] = c->tls->ca;
		argv[k++] = "--client-cert-auth";
	}
	for (j = 0; c->extra && c->extra[j] && k < 46; j++)
		argv[k++] = c->extra[j];
	argv[k] = NULL;
	pid = fork();
	if (pid < 0)
		return -1;
	if (!pid) {
		/* no member outlives the test, whatever ends it */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execv(t_etcd_bin(), (char *const *)argv);
		_exit(127);
	}
	c->pid[i] = pid;
	return 0;
}

/* Waits (bounded) for every live member to be healthy. 0, -1, or -2 if a
 * member exited. */
static inline int t_etcd_wait(struct t_etcd *c, int timeout_s)
{
	struct timespec ts = { 0, 100 * 1000000 };
	int i, ok, tries;

	for (tries = 0; tries < timeout_s * 10; tries++) {
		for (i = 0, ok = 1; i < c->n; i++) {
			if (c->pid[i] <= 0)
				continue;
			/* A member that exited (its port taken meanwhile)
			 * must not pass for healthy through whatever else
			 * answers on that port now. */
			if (waitpid(c->pid[i], NULL, WNOHANG) == c->pid[i]) {
				c->pid[i] = 0;
				fprintf(stderr, "etcd: member %d exited\n", i);
				return -2;
			}
			/* healthy, and it is this member that answers */
			if (!t_etcd_healthy(c, i) ||
			    !t_etcd_owns_port(c->pid[i], c->cport[i]))
				ok = 0;
		}
		if (ok)
			return 0;
		nanosleep(&ts, NULL);
	}
	fprintf(stderr, "etcd: not healthy after %d s (logs in %s)\n",
		timeout_s, c->dir);
	return -1;
}

/* SIGKILL member i and reap it. */
static inline void t_etcd_kill(struct t_etcd *c, int i)
{
	if (c->pid[i] <= 0)
		return;
	kill(c->pid[i], SIGKILL);
	waitpid(c->pid[i], NULL, 0);
	c->pid[i] = 0;
}

/* Starts member i again on its ports and data (after t_etcd_kill). */
static inline int t_etcd_restart(struct t_etcd *c, int i)
{
	return t_etcd_spawn(c, i);
}

static inline int t_etcd_rm(const char *p, const struct stat *st, int flag,
			    struct FTW *ftw)
{
	remove(p);
	return 0;
}

/* Kills every member and removes their data (their logs' tails first to
 * stderr if show_logs). */
static inline void t_etcd_stop(struct t_etcd *c, int show_logs)
{
	char cmd[160];
	int i;

	for (i = 0; i < c->n; i++)
		t_etcd_kill(c, i);
	if (!c->dir[0])
		return;
	if (show_logs) {
		snprintf(cmd, sizeof(cmd), "tail -n 20 %s/*.log >&2", c->dir);
		if (system(cmd))
			fprintf(stderr, "no etcd logs\n");
	}
	nftw(c->dir, t_etcd_rm, 16, FTW_DEPTH | FTW_PHYS);
	c->dir[0] = '\0';
}

/* Ports for the n members, all different; the cluster's URLs. 0 or -1. */
static inline int t_etcd_ports(struct t_etcd *c)
{
	size_t off = 0;
	int i, j;

	for (i = 0; i < c->n; i++) {
		do {
			c->cport[i] = t_etcd_port();
			c->pport[i] = t_etcd_port();
			if (c->cport[i] < 0 || c->pport[i] < 0)
				return -1;
			for (j = 0; j < i; j++)
				if (c->cport[j] == c->cport[i] ||
				    c->pport[j] == c->pport[i] ||
				    c->cport[j] == c->pport[i] ||
				    c->pport[j] == c->cport[i])
					c->cport[i] = 0;
		} while (c->cport[i] == c->pport[i] || !c->cport[i]);
		snprintf(c->url[i], sizeof(c->url[i]), "%s://127.0.0.1:%d",
			 c->tls ? "https" : "http", c->cport[i]);
		off += (size_t)snprintf(c->cluster + off,
					sizeof(c->cluster) - off,
					"%sm%d=http://127.0.0.1:%d",
					i ? "," : "", i, c->pport[i]);
	}
	for (i = 0, off = 0; i < c->n; i++)
		off += (size_t)snprintf(c->endpoints + off,
					sizeof(c->endpoints) - off, "%s%s",
					i ? "," : "", c->url[i]);
	return 0;
}

/*
 * Starts n (1..3) members as one cluster, extra flags for each (NULL-ended
 * or NULL), serving https if tls (else http), waits for them. Exits 77 if
 * etcd is not installed. Returns 0 or -1 (all stopped again).
 *
 * A port found free may be taken before the member binds it (another
 * test picks ports at the same time): the member then exits, and the
 * cluster starts again on new ports.
 */
static inline int t_etcd_start_tls(struct t_etcd *c, int n,
				   const char *const *extra,
				   const struct t_etcd_tls *tls)
{
	unsigned int seed;
	int i, try, ret;

	memset(c, 0, sizeof(*c));
	c->tls = tls;
	if (!t_etcd_bin()) {
		printf("SKIP: etcd is not installed (Debian: etcd-server)\n");
		exit(77);
	}
	/* not pid ^ time: two tests started together would pick alike */
	if (getrandom(&seed, sizeof(seed), 0) != sizeof(seed))
		seed = (unsigned)getpid() * 2654435761u ^ (unsigned)time(NULL);
	srand(seed);
	c->n = n;
	c->extra = extra;
	for (try = 0; try < 5; try++) {
		/* On tmpfs where there is one: etcd syncs its log at every
		 * commit, and a busy disk holds a sync for seconds, past a
		 * coordinator's request timeout (its change then fails, its
		 * leadership lapses). */
		snprintf(c->dir, sizeof(c->dir), "%s/t_etcd.XXXXXX",
			 access("/dev/shm", W_OK) ? "/tmp" : "/dev/shm");
		if (!mkdtemp(c->dir)) {
			perror("mkdtemp");
			c->dir[0] = '\0';
			return -1;
		}
		if (t_etcd_ports(c))
			break;
		for (i = 0; i < n; i++)
			if (t_etcd_spawn(c, i))
				break;
		ret = i < n ? -1 : t_etcd_wait(c, 60);
		if (!ret)
			return 0;
		t_etcd_stop(c, 1);
		if (ret != -2)
			return -1;
		fprintf(stderr, "etcd: starting again on other ports\n");
	}
	t_etcd_stop(c, 1);
	return -1;
}

static inline int t_etcd_start(struct t_etcd *c, int n,
			       const char *const *extra)
{
	return t_etcd_start_tls(c, n, extra, NULL);
}

#endif
