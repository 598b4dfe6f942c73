// SPDX-License-Identifier: MIT
/*
 * The coordinator on an etcd that speaks only TLS and asks clients for a
 * certificate (one real member, certificates made here with openssl),
 * then with etcd's auth enabled too:
 *  - with --etcd-cacert, --etcd-cert and --etcd-key it starts, leads and
 *    acknowledges a region; without the client certificate it refuses to
 *    start, saying what etcd did;
 *  - with auth on: --etcd-user and --etcd-password-file (the password's
 *    first line) find the region again; a wrong password is refused at
 *    start-up ("authentication failed"); --etcd-user alone is a usage
 *    error.
 * Skips (77) without etcd, etcdctl or openssl.
 */
#include <stdint.h>

#include "t_coord.h"
#include "t_etcd.h"

#define MIB (UINT64_C(1) << 20)

static char t_dir[] = "/tmp/t_coord_tls.XXXXXX";
static char t_ca[64], t_scrt[64], t_skey[64], t_ccrt[64], t_ckey[64];

/* A CA, and a server and a client certificate it signs, in t_dir. The
 * client's has no CN: with etcd's auth on, its gateway refuses a client
 * certificate with a CN ("CommonName of client sending a request against
 * gateway will be ignored"), the user being the password's. */
static int t_certs(void)
{
	char cmd[1024];

	if (!mkdtemp(t_dir))
		return -1;
	snprintf(cmd, sizeof(cmd),
		 "cd %s && K='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
		 "-nodes' && openssl req -x509 $K -keyout ca.key -out ca.crt "
		 "-days 2 -subj /CN=t-coord-ca && "
		 "echo subjectAltName=IP:127.0.0.1 >ext && for n in srv:CN "
		 "cli:O; do openssl req $K -keyout ${n%%:*}.key -out "
		 "${n%%:*}.csr -subj /${n#*:}=127.0.0.1 && openssl x509 -req "
		 "-in ${n%%:*}.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
		 "-out ${n%%:*}.crt -days 2 -extfile ext || exit 1; done "
		 ">/dev/null 2>&1",
		 t_dir);
	snprintf(t_ca, sizeof(t_ca), "%s/ca.crt", t_dir);
	snprintf(t_scrt, sizeof(t_scrt), "%s/srv.crt", t_dir);
	snprintf(t_skey, sizeof(t_skey), "%s/srv.key", t_dir);
	snprintf(t_ccrt, sizeof(t_ccrt), "%s/cli.crt", t_dir);
	snprintf(t_ckey, sizeof(t_ckey), "%s/cli.key", t_dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* etcdctl over TLS with the client certificate. */
static int t_etcdctl(const struct t_etcd *c, const char *args)
{
	char cmd[1024];

	snprintf(cmd, sizeof(cmd),
		 "ETCDCTL_API=3 etcdctl --endpoints=https://127.0.0.1:%d "
		 "--cacert=%s --cert=%s --key=%s %s >/dev/null 2>&1",
		 c->cport[0], t_ca, t_ccrt, t_ckey, args);
	return system(cmd) == 0 ? 0 : -1;
}

/* REGION_CREATE @name (2 MiB, placed nowhere in particular). */
static int t_create(int fd, const char *name)
{
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_REGION_CREATE);
	snprintf(req.name, sizeof(req.name), "%s", name);
	req.size = 2 * MIB;
	ret = t_call(fd, &req, &rep);
	if (!ret && rep.type != MSG_T_REGION)
		ret = -EPROTO;
	msg_fini(&rep);
	return ret;
}

static int t_get(int fd, const char *name)
{
	struct msg req, rep;
	int ret;

	msg_init(&req, MSG_T_REGION_GET);
	snprintf(req.name, sizeof(req.name), "%s", name);
	ret = t_call(fd, &req, &rep);
	msg_fini(&rep);
	return ret;
}

static int t_write(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return -1;
	fputs(text, f);
	return fclose(f) ? -1 : 0;
}

/* The coordinator's exit status when it must not start (0x7f00 if it
 * started after all: stopped here). */
static int t_refused(struct t_coord *tc, const char *const *extra)
{
	if (t_coord_start(tc, extra) == 0) {
		t_coord_stop(tc, SIGKILL);
		return 0x7f00;
	}
	return tc->status;
}

int main(void)
{
	char store[64], pwf[96], badf[96];
	const char *tls[] = { "--etcd-cacert",
			      t_ca,
			      "--etcd-cert",
			      t_ccrt,
			      "--etcd-key",
			      t_ckey,
			      NULL,
			      NULL,
			      NULL,
			      NULL,
			      NULL };
	struct t_etcd_tls etls = { t_ca, t_scrt, t_skey };
	struct t_coord tc;
	struct t_etcd ec;
	int fd = -1, fail = 1, st;
	uint64_t id = 0;

	if (system("command -v openssl >/dev/null 2>&1") ||
	    system("command -v etcdctl >/dev/null 2>&1")) {
		printf("SKIP: openssl or etcdctl is not installed\n");
		return 77;
	}
	if (t_certs()) {
		fprintf(stderr, "cannot make the certificates\n");
		return 1;
	}
	if (t_etcd_start_tls(&ec, 1, NULL, &etls))
		return 1;
	if (t_coord_init(&tc, "test_coord_etcd_tls") != T_PASS) {
		t_etcd_stop(&ec, 0);
		return 1;
	}
	/* host:port is https when a CA is given */
	snprintf(store, sizeof(store), "etcd://127.0.0.1:%d", ec.cport[0]);
	tc.store = store;

	T_CHECK(t_coord_start(&tc, tls) == 0, "start over TLS");
	fd = t_connect(&tc);
	T_CHECK(fd >= 0, "connect");
	T_CHECK(t_join(fd, "alpha", UINT64_C(1) << 40, 0xa1, &id) == 0,
		"a join over TLS");
	T_CHECK(t_create(fd, "tls") == 0, "a create over TLS");
	close(fd);
	fd = -1;
	T_CHECK(WIFSIGNALED(t_coord_stop(&tc, SIGKILL)), "stop");
	fprintf(stderr, "TLS with a client certificate: a region made\n");

	/* Without its certificate the member refuses the coordinator. */
	st = t_refused(&tc,
		       (const char *const[]){ "--etcd-cacert", t_ca, NULL });
	T_CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0,
		"started without a client certificate (status 0x%x)", st);
	T_CHECK(t_log_count(&tc, "cannot recover the state from etcd") >= 1,
		"no reason logged");
	fprintf(stderr, "TLS without a client certificate: refused, exit %d\n",
		WEXITSTATUS(st));

	/* etcd's auth on; the coordinator as root. */
	T_CHECK(t_etcdctl(&ec, "user add root --new-user-password=s3cret") ==
				0 &&
			t_etcdctl(&ec, "user grant-role root root") == 0 &&
			t_etcdctl(&ec, "auth enable") == 0,
		"etcdctl: auth");
	snprintf(pwf, sizeof(pwf), "%s/pw", t_dir);
	snprintf(badf, sizeof(badf), "%s/bad", t_dir);
	T_CHECK(t_write(pwf, "s3cret\nnot this line\n") == 0 &&
			t_write(badf, "wrong\n") == 0,
		"password files");
	tls[6] = "--etcd-user";
	tls[7] = "root";
	tls[8] = "--etcd-password-file";
	tls[9] = badf;
	st = t_refused(&tc, tls);
	T_CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0,
		"a wrong password: status 0x%x", st);
	T_CHECK(t_log_count(&tc, "authentication failed") >= 1,
		"a wrong password: no reason logged");
	fprintf(stderr, "auth, a wrong password: refused, exit %d\n",
		WEXITSTATUS(st));
	tls[9] = pwf;
	T_CHECK(t_coord_start(&tc, tls) == 0, "start with auth");
	fd = t_connect(&tc);
	T_CHECK(fd >= 0, "connect");
	T_CHECK(t_get(fd, "tls") == 0, "the region made before auth is gone");
	/* its lease is the leader's: heartbeat before placing again */
	T_CHECK(t_heartbeat(fd, id, 0xa1) == 0, "a heartbeat with auth");
	T_CHECK(t_create(fd, "auth") == 0, "a create with auth");
	close(fd);
	fd = -1;
	t_coord_stop(&tc, SIGTERM);
	fprintf(stderr, "auth: the region found, another made\n");

	/* A user without a password file is a usage error. */
	tls[8] = NULL;
	st = t_refused(&tc, tls);
	T_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2,
		"--etcd-user alone: status 0x%x", st);
	fail = 0;
out:
	if (fd >= 0)
		close(fd);
	t_coord_fini(&tc, fail);
	t_etcd_stop(&ec, fail);
	snprintf(pwf, sizeof(pwf), "rm -rf %s", t_dir);
	if (system(pwf))
		fail = 1;
	printf("%s\n", fail ? "FAIL" : "PASS");
	return fail ? 1 : 0;
}
