// SPDX-License-Identifier: MIT
/*
 * bench_net_floor: the network floor between two hosts. --server answers;
 * the client measures (a) the round trip of a 16 B request and a 4 KiB
 * reply over one TCP connection with blocking sockets and TCP_NODELAY,
 * and (b) one connection's streaming bandwidth with big writes.
 *
 * Each connection opens with a 16-byte hello: "FPBN", the mode ('R' round
 * trips, 'S' stream), three zero bytes, then the server CPU to pin to as a
 * big-endian int32 (-1 = no pinning) and four zero bytes. Round trips: 16
 * bytes in, 4096 out, until EOF. Stream: the server reads until EOF and
 * answers the byte count (8 bytes, big endian).
 */
#define LOG_PREFIX ""
#include "bench.h"

#include <endian.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "net.h"
#include "util.h"

#define BENCH_NET_REQ	  16
#define BENCH_NET_REPLY	  4096
#define BENCH_NET_HELLO	  16
#define BENCH_NET_STREAM  (1u << 20) /* bytes per write()/read() */
#define BENCH_NET_TIMEOUT 5000	     /* ms to connect */

static const char bench_net_synopsis[] =
	"bench_net_floor --server ADDR:PORT [--addr-file FILE]\n"
	"       bench_net_floor --connect ADDR:PORT [--mode rtt|stream|both]\n"
	"                       [--iters N] [--warmup N] [--stream-secs S]\n"
	"                       [--runs N] [--cpu C] [--server-cpu C]\n"
	"                       [--lat-file FILE] [--json]\n";

static const char bench_net_about[] =
	"The TCP floor between two hosts. The server (port 0: any free port)\n"
	"serves one connection at a time until killed; --addr-file gets its\n"
	"address once it listens. The client prints one line per run:\n"
	"  net_rtt: run=N cpu=C server_cpu=C samples=N p50_us=X ... max_us=X\n"
	"  net_stream: run=N cpu=C server_cpu=C bytes=N secs=X MBps=X\n";

struct bench_net {
	const char *server; /* listen address, or NULL */
	const char *addr_file;
	const char *connect;
	int rtt;
	int stream;
	uint64_t iters;
	uint64_t warmup;
	uint64_t stream_secs;
	uint64_t runs;
	int cpu;
	int server_cpu;
	const char *lat_path;
	struct bench_out out;
};

/* Reads exactly @len bytes. Returns 0, -EPIPE on EOF, or -errno. */
static int bench_net_read_full(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;
	ssize_t n;

	while (len) {
		n = read(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (!n)
			return -EPIPE;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int bench_net_write_full(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	ssize_t n;

	while (len) {
		n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Serves one connection. Returns 0 when the peer is done, or -errno. */
static int bench_net_serve(int fd, void *buf)
{
	uint8_t hello[BENCH_NET_HELLO];
	uint64_t total = 0, be;
	int32_t cpu;
	ssize_t n;
	int ret;

	ret = bench_net_read_full(fd, hello, sizeof(hello));
	if (ret)
		return ret;
	if (memcmp(hello, "FPBN", 4))
		return -EPROTO;
	memcpy(&cpu, hello + 8, sizeof(cpu));
	cpu = (int32_t)be32toh((uint32_t)cpu);
	ret = bench_cpu_pin(cpu);
	if (ret)
		return ret;

	switch (hello[4]) {
	case 'R':
		memset(buf, 0x5a, BENCH_NET_REPLY);
		for (;;) {
			ret = bench_net_read_full(fd, hello, BENCH_NET_REQ);
			if (ret == -EPIPE)
				return 0;
			if (ret)
				return ret;
			ret = bench_net_write_full(fd, buf, BENCH_NET_REPLY);
			if (ret)
				return ret;
		}
	case 'S':
		for (;;) {
			n = read(fd, buf, BENCH_NET_STREAM);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				return -errno;
			if (!n)
				break;
			total += (uint64_t)n;
		}
		be = htobe64(total);
		return bench_net_write_full(fd, &be, sizeof(be));
	default:
		return -EPROTO;
	}
}

static int bench_net_server(const struct bench_net *b)
{
	char addr[128];
	void *buf;
	int lfd, fd, ret;

	ret = net_listen(b->server, 4, &lfd);
	if (!ret)
		ret = net_set_nonblock(lfd, 0);
	if (ret) {
		log_errno(ret, "listen on %s", b->server);
		return 1;
	}
	ret = net_local_addr(lfd, addr, sizeof(addr));
	if (ret) {
		log_errno(ret, "local address");
		return 1;
	}
	if (b->addr_file) {
		char line[sizeof(addr) + 1];

		snprintf(line, sizeof(line), "%s\n", addr);
		ret = util_write_file(b->addr_file, line);
		if (ret) {
			log_errno(ret, "%s", b->addr_file);
			return 1;
		}
	}
	buf = malloc(BENCH_NET_STREAM);
	if (!buf) {
		log_err("out of memory");
		return 1;
	}
	log_info("listening on %s", addr);
	for (;;) {
		fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			log_errno(errno, "accept");
			break;
		}
		/* Each connection asks for its own CPU; start unpinned. */
		bench_cpu_unpin();
		ret = net_set_nodelay(fd);
		if (!ret)
			ret = bench_net_serve(fd, buf);
		if (ret)
			log_errno(ret, "connection");
		close(fd);
	}
	free(buf);
	close(lfd);
	return 1;
}

static int bench_net_dial(const struct bench_net *b, char mode, int *out)
{
	uint8_t hello[BENCH_NET_HELLO] = { 'F', 'P', 'B', 'N', (uint8_t)mode };
	uint32_t cpu = htobe32((uint32_t)(int32_t)b->server_cpu);
	int fd, ret;

	memcpy(hello + 8, &cpu, sizeof(cpu));
	ret = net_connect(b->connect, BENCH_NET_TIMEOUT, &fd);
	if (ret) {
		log_errno(ret, "connect to %s", b->connect);
		return ret;
	}
	ret = bench_net_write_full(fd, hello, sizeof(hello));
	if (ret) {
		log_errno(ret, "hello to %s", b->connect);
		close(fd);
		return ret;
	}
	*out = fd;
	return 0;
}

static int bench_net_rtt(struct bench_net *b, uint64_t run, uint64_t *lat)
{
	uint8_t req[BENCH_NET_REQ] = { 0 };
	uint8_t *reply;
	struct bench_lat st;
	uint64_t t0;
	int fd, ret;

	reply = malloc(BENCH_NET_REPLY);
	if (!reply)
		return -ENOMEM;
	ret = bench_net_dial(b, 'R', &fd);
	if (ret)
		goto out_free;
	for (uint64_t i = 0; i < b->warmup + b->iters; i++) {
		t0 = bench_ns();
		memcpy(req, &i, sizeof(i));
		ret = bench_net_write_full(fd, req, sizeof(req));
		if (!ret)
			ret = bench_net_read_full(fd, reply, BENCH_NET_REPLY);
		if (ret) {
			log_errno(ret, "round trip to %s", b->connect);
			goto out_close;
		}
		if (i >= b->warmup)
			lat[i - b->warmup] = bench_ns() - t0;
	}
	if (b->lat_path) {
		ret = bench_lat_append(b->lat_path, lat, b->iters);
		if (ret) {
			log_errno(ret, "%s", b->lat_path);
			goto out_close;
		}
	}
	bench_lat_summary(lat, b->iters, &st);
	bench_out_begin(&b->out, "net_rtt");
	bench_out_u64(&b->out, "run", run);
	bench_out_int(&b->out, "cpu", b->cpu);
	bench_out_int(&b->out, "server_cpu", b->server_cpu);
	bench_out_u64(&b->out, "req_bytes", BENCH_NET_REQ);
	bench_out_u64(&b->out, "reply_bytes", BENCH_NET_REPLY);
	bench_out_lat(&b->out, &st);
	bench_out_end(&b->out);
out_close:
	close(fd);
out_free:
	free(reply);
	return ret;
}

static int bench_net_stream(struct bench_net *b, uint64_t run)
{
	uint64_t t0, t1, deadline, sent = 0, got;
	struct bench_out *o = &b->out;
	void *buf;
	int fd, ret;

	buf = malloc(BENCH_NET_STREAM);
	if (!buf)
		return -ENOMEM;
	memset(buf, 0xa5, BENCH_NET_STREAM);
	ret = bench_net_dial(b, 'S', &fd);
	if (ret)
		goto out_free;
	t0 = bench_ns();
	deadline = t0 + b->stream_secs * 1000000000ull;
	do {
		ret = bench_net_write_full(fd, buf, BENCH_NET_STREAM);
		if (ret) {
			log_errno(ret, "stream to %s", b->connect);
			goto out_close;
		}
		sent += BENCH_NET_STREAM;
	} while (bench_ns() < deadline);
	/* The clock stops when the server has read every byte. */
	if (shutdown(fd, SHUT_WR) < 0) {
		ret = -errno;
		log_errno(ret, "shutdown");
		goto out_close;
	}
	ret = bench_net_read_full(fd, &got, sizeof(got));
	t1 = bench_ns();
	if (ret) {
		log_errno(ret, "stream count from %s", b->connect);
		goto out_close;
	}
	got = be64toh(got);
	if (got != sent) {
		log_err("stream: sent %llu bytes, server read %llu",
			(unsigned long long)sent, (unsigned long long)got);
		ret = -EIO;
		goto out_close;
	}
	bench_out_begin(o, "net_stream");
	bench_out_u64(o, "run", run);
	bench_out_int(o, "cpu", b->cpu);
	bench_out_int(o, "server_cpu", b->server_cpu);
	bench_out_u64(o, "bytes", sent);
	bench_out_dbl(o, "secs", (double)(t1 - t0) / 1e9);
	bench_out_dbl(o, "MBps", (double)sent / ((double)(t1 - t0) / 1e3));
	bench_out_end(o);
out_close:
	close(fd);
out_free:
	free(buf);
	return ret;
}

static int bench_net_client(struct bench_net *b)
{
	uint64_t *lat = NULL;
	int ret;

	ret = bench_cpu_pin(b->cpu);
	if (ret) {
		log_errno(ret, "pin to CPU %d", b->cpu);
		return 1;
	}
	if (b->rtt) {
		lat = malloc(b->iters * sizeof(*lat));
		if (!lat) {
			log_err("out of memory");
			return 1;
		}
	}
	for (uint64_t r = 1; r <= b->runs && b->rtt; r++)
		if (bench_net_rtt(b, r, lat))
			goto err;
	for (uint64_t r = 1; r <= b->runs && b->stream; r++)
		if (bench_net_stream(b, r))
			goto err;
	free(lat);
	return 0;
err:
	free(lat);
	return 1;
}

static int bench_net_mode(void *dst, const char *opt, const char *s)
{
	struct bench_net *b = dst;

	b->rtt = !strcmp(s, "rtt") || !strcmp(s, "both");
	b->stream = !strcmp(s, "stream") || !strcmp(s, "both");
	if (!b->rtt && !b->stream) {
		fprintf(stderr,
			"bench_net_floor: %s: '%s' is not rtt, stream or "
			"both\n",
			opt, s);
		return -EINVAL;
	}
	return 0;
}

static int bench_net_args(struct bench_net *b, int argc, char **argv)
{
	const struct bench_opt opts[] = {
		BENCH_OPT("server", "ADDR:PORT", BENCH_OPT_STR, &b->server, 0,
			  0, "serve (port 0: any free port)"),
		BENCH_OPT("addr-file", "FILE", BENCH_OPT_STR, &b->addr_file, 0,
			  0, "the server's address, once it listens"),
		BENCH_OPT("connect", "ADDR:PORT", BENCH_OPT_STR, &b->connect, 0,
			  0, "measure against that server"),
		BENCH_OPT_PARSE("mode", "M", bench_net_mode, b,
				"rtt: 16 B request / 4 KiB reply round trips;\n"
				"stream: one connection, 1 MiB writes; both\n"
				"(default both)"),
		BENCH_OPT("iters", "N", BENCH_OPT_U64, &b->iters, 1, 1ull << 26,
			  "timed round trips per run (default 20000)"),
		BENCH_OPT("warmup", "N", BENCH_OPT_U64, &b->warmup, 0,
			  1ull << 26,
			  "untimed round trips first (default 1000)"),
		BENCH_OPT("stream-secs", "S", BENCH_OPT_U64, &b->stream_secs, 1,
			  3600, "seconds of streaming per run (default 2)"),
		BENCH_OPT("runs", "N", BENCH_OPT_U64, &b->runs, 1, 1000,
			  "runs of each mode, a new connection each\n"
			  "(default 3)"),
		BENCH_OPT("cpu", "C", BENCH_OPT_CPU, &b->cpu, 0, 0,
			  "pin this client to CPU C (default none)"),
		BENCH_OPT("server-cpu", "C", BENCH_OPT_CPU, &b->server_cpu, 0,
			  0, "ask the server to pin to CPU C (default none)"),
		BENCH_OPT("lat-file", "FILE", BENCH_OPT_STR, &b->lat_path, 0, 0,
			  "append every round trip (ns), one per line"),
		BENCH_OPT_END,
	};
	const struct bench_cli cli = {
		.prog = "bench_net_floor",
		.synopsis = bench_net_synopsis,
		.about = bench_net_about,
		.opts = opts,
		.out = &b->out,
	};
	int ret, first;

	ret = bench_cli_parse(&cli, argc, argv, &first);
	if (ret >= 0)
		return ret;
	if (first != argc || !b->server == !b->connect) {
		fprintf(stderr, "%s: give --server or --connect ADDR:PORT\n",
			cli.prog);
		bench_cli_usage(&cli, stderr);
		return 2;
	}
	return -1;
}

int main(int argc, char **argv)
{
	struct bench_net b = {
		.rtt = 1,
		.stream = 1,
		.iters = 20000,
		.warmup = 1000,
		.stream_secs = 2,
		.runs = 3,
		.cpu = -1,
		.server_cpu = -1,
	};
	int ret;

	log_init("bench_net_floor", LOG_INFO);
	ret = bench_net_args(&b, argc, argv);
	if (ret >= 0)
		return ret;
	signal(SIGPIPE, SIG_IGN);
	return b.server ? bench_net_server(&b) : bench_net_client(&b);
}
