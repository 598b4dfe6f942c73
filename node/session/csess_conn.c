// SPDX-License-Identifier: MIT
/* The coordinator session's connection: connect, call, reconnect once. */
#define LOG_PREFIX "agent: "
#include "csess_int.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#include "actl.h"
#include "log.h"
#include "net.h"
#include "node_env.h"

int csess_is_stopping(struct csess *s)
{
	return atomic_load(&s->stopping);
}

void csess_efd_signal(int efd)
{
	uint64_t one = 1;
	ssize_t r = write(efd, &one, sizeof(one));

	(void)r;
}

void csess_efd_drain(int efd)
{
	uint64_t v;
	ssize_t r = read(efd, &v, sizeof(v));

	(void)r;
}

/* ---- calls ---- */

/* True if @addr's host is a name that does not exist (not "no answer"). */
int csess_name_unknown(const char *addr)
{
	struct sockaddr_storage ss;
	uint32_t len;

	return net_addr_resolve(addr, &ss, &len, 0) == -EADDRNOTAVAIL;
}

static int csess_connect(struct csess *s)
{
	const char *addr = s->env->coordinator;
	char why[200];
	int ret;

	if (s->coord.fd >= 0)
		return 0;
	ret = actl_connect(addr, s->env->cred, AUTH_ROLE_NODE, s->env->name,
			   CSESS_TIMEOUT_MS, &s->coord, why, sizeof(why));
	if (ret) {
		s->down_err = ret;
		snprintf(s->down_why, sizeof(s->down_why), "%s", why);
		if (!s->down_logged && why[0])
			log_err("coordinator %s: %s", addr, why);
		else if (!s->down_logged && csess_name_unknown(addr))
			log_err("coordinator %s: no such host name", addr);
		else if (!s->down_logged && ret == -EAGAIN)
			log_err("coordinator %s: the host name cannot be "
				"looked up now (no DNS answer); trying again",
				addr);
		else if (!s->down_logged)
			log_errno(ret, "coordinator %s unreachable", addr);
		s->down_logged = 1;
		return -EHOSTUNREACH;
	}
	if (s->down_logged)
		log_info("coordinator %s reachable again", addr);
	s->down_logged = 0;
	return 0;
}

/* What to tell of a failed call: the connect's reason, not just
 * "unreachable". */
const char *csess_strerror(const struct csess *s, int ret)
{
	return log_strerror(ret == -EHOSTUNREACH && s->down_err ? s->down_err
								: ret);
}

/* A failure of the connection, not an answer of the coordinator. */
int csess_err_is_link(int ret)
{
	return ret == -EHOSTUNREACH || ret == -ECONNRESET || ret == -EPIPE ||
	       ret == -ETIMEDOUT || ret == -EBADMSG || ret == -ECONNREFUSED;
}

int csess_call(struct csess *s, const struct msg *req, struct msg *rep)
{
	int ret = 0;

	/* Initialised on every path: callers msg_fini() it whatever
	 * happened (an agent once freed a stack address here). */
	msg_init(rep, MSG_T_NONE);
	for (int attempt = 0; attempt < 2; attempt++) {
		ret = csess_connect(s);
		if (ret)
			break;
		ret = actl_call(&s->coord, req, rep, CSESS_TIMEOUT_MS);
		if (ret != -ECONNRESET && ret != -EPIPE && ret != -ETIMEDOUT &&
		    ret != -EBADMSG)
			break;
		/* A late answer would be taken for the next call's: this
		 * connection is done. */
		msg_fini(rep);
		actl_close(&s->coord);
		/* Lost (coordinator restarted): once more. Slow: not again,
		 * the session must get on with heartbeats and lookups. */
		if (ret == -ETIMEDOUT)
			break;
	}
	s->coord_ok = !(ret && rep->type != MSG_T_ERROR);
	if (!s->coord_ok)
		s->last_err = ret;
	return ret;
}

/* As csess_call(), and an answer of another type than @want is -EBADMSG. */
int csess_call_want(struct csess *s, const struct msg *req, struct msg *rep,
		    enum msg_type want)
{
	int ret = csess_call(s, req, rep);

	if (!ret && rep->type != want)
		ret = -EBADMSG;
	return ret;
}
