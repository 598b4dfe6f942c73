// SPDX-License-Identifier: MIT
/*
 * bench_seal: what sealing and opening one page-server record costs on
 * this CPU (auth.h: AES-256-GCM over a 24-byte header and the body, MAC
 * only or encrypted), for bodies of 4 KiB to 1 MiB, between the two
 * sessions of a real handshake, and what one handshake costs (both
 * sides, in one thread). No network: the crypto alone.
 */
#define LOG_PREFIX ""
#include "bench.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "log.h"

static const char bench_seal_about[] =
	"auth_seal() then auth_open() of one record again and again, bodies\n"
	"of 4 KiB, 64 KiB, 256 KiB and 1 MiB, MAC only and encrypted; --bytes\n"
	"of bodies per size and mode. One line per run, mode and size:\n"
	"  seal: run=N mode=mac|encrypt len=N records=N seal_us=X open_us=X\n"
	"        MBps=X (body bytes per second, seal and open both)\n"
	"\n"
	"and one line per run for whole handshakes (both sides, one thread):\n"
	"  handshake: run=N handshakes=N hs_us=X (microseconds per "
	"handshake)\n";

static const uint8_t bench_seal_key[AUTH_KEY_LEN] =
	"a pair key only for benchmarks";

static int bench_seal_lookup(void *arg, const struct auth_hello *h,
			     uint8_t key[AUTH_KEY_LEN], char *why,
			     size_t why_len)
{
	memcpy(key, bench_seal_key, AUTH_KEY_LEN);
	return AUTH_OK;
}

/* Moves @from's output into @to. */
static void bench_seal_pump(struct auth_hs *from, struct auth_hs *to)
{
	const uint8_t *o;
	size_t n;

	while ((n = auth_hs_output(from, &o)) > 0) {
		auth_hs_input(to, o, n);
		auth_hs_sent(from, n);
	}
}

/* A client's and a server's session, @flags asked for. */
static int bench_seal_pair(unsigned int flags, struct auth_sess **cs,
			   struct auth_sess **ss)
{
	struct auth_server_cfg scfg = { .lookup = bench_seal_lookup };
	struct auth_client_cfg ccfg = {
		.role = AUTH_ROLE_PEER,
		.name = "client",
		.target = "owner",
		.flags = flags,
	};
	struct auth_hs *c, *s;
	int ret = 0;

	memcpy(ccfg.key, bench_seal_key, sizeof(ccfg.key));
	if (auth_hs_client(&ccfg, &c))
		return -ENOMEM;
	if (auth_hs_server(&scfg, &s)) {
		auth_hs_free(c);
		return -ENOMEM;
	}
	for (int i = 0; i < 4; i++) {
		bench_seal_pump(c, s);
		bench_seal_pump(s, c);
	}
	*cs = auth_hs_take(c);
	*ss = auth_hs_take(s);
	if (!*cs || !*ss) {
		auth_sess_free(*cs);
		auth_sess_free(*ss);
		ret = -EIO;
	}
	auth_hs_free(c);
	auth_hs_free(s);
	return ret;
}

/* One run of one mode and size. Returns 0 or -errno. */
static int bench_seal_one(struct bench_out *out, uint64_t run, bool encrypt,
			  size_t len, uint64_t bytes)
{
	uint64_t n = bytes / len ? bytes / len : 1, seal_ns = 0, open_ns = 0;
	uint8_t hdr[24] = { 1, 2 }, tag[AUTH_TAG_LEN];
	struct auth_sess *cs, *ss;
	struct iovec v;
	uint8_t *body;
	int ret;

	body = malloc(len);
	if (!body)
		return -ENOMEM;
	memset(body, 0x5a, len);
	ret = bench_seal_pair(encrypt ? AUTH_F_ENCRYPT : 0, &cs, &ss);
	if (ret) {
		free(body);
		return ret;
	}
	v.iov_base = body;
	v.iov_len = len;
	for (uint64_t i = 0; i < n && !ret; i++) {
		uint64_t t0 = bench_ns(), t1;

		hdr[8] = (uint8_t)i;
		ret = auth_seal(cs, hdr, sizeof(hdr), &v, 1, tag);
		t1 = bench_ns();
		if (!ret)
			ret = auth_open(ss, hdr, sizeof(hdr), &v, 1, tag);
		seal_ns += t1 - t0;
		open_ns += bench_ns() - t1;
	}
	if (!ret) {
		bench_out_begin(out, "seal");
		bench_out_u64(out, "run", run);
		bench_out_str(out, "mode", encrypt ? "encrypt" : "mac");
		bench_out_u64(out, "len", len);
		bench_out_u64(out, "records", n);
		bench_out_dbl(out, "seal_us",
			      (double)seal_ns / (double)n / 1e3);
		bench_out_dbl(out, "open_us",
			      (double)open_ns / (double)n / 1e3);
		bench_out_dbl(out, "MBps",
			      (double)(n * len) * 1e3 /
				      (double)(seal_ns + open_ns));
		bench_out_end(out);
	}
	auth_sess_free(cs);
	auth_sess_free(ss);
	free(body);
	return ret;
}

/* One run of @n whole handshakes. Returns 0 or -errno. */
static int bench_seal_hs(struct bench_out *out, uint64_t run, uint64_t n)
{
	struct auth_sess *cs, *ss;
	uint64_t t0 = bench_ns(), ns;
	int ret;

	for (uint64_t i = 0; i < n; i++) {
		ret = bench_seal_pair(AUTH_F_ENCRYPT, &cs, &ss);
		if (ret)
			return ret;
		auth_sess_free(cs);
		auth_sess_free(ss);
	}
	ns = bench_ns() - t0;
	bench_out_begin(out, "handshake");
	bench_out_u64(out, "run", run);
	bench_out_u64(out, "handshakes", n);
	bench_out_dbl(out, "hs_us", (double)ns / (double)n / 1e3);
	bench_out_end(out);
	return 0;
}

int main(int argc, char **argv)
{
	static const size_t lens[] = { 4096, 65536, 262144, 1u << 20 };
	uint64_t bytes = 256ull << 20, runs = 3;
	struct bench_out out = { 0 };
	const struct bench_opt opts[] = {
		BENCH_OPT("bytes", "N", BENCH_OPT_SIZE, &bytes, 4096,
			  1ull << 40,
			  "body bytes per size and mode (default 256M)"),
		BENCH_OPT("runs", "N", BENCH_OPT_U64, &runs, 1, 1000,
			  "runs (default 3)"),
		BENCH_OPT_END,
	};
	const struct bench_cli cli = {
		.prog = "bench_seal",
		.about = bench_seal_about,
		.opts = opts,
		.out = &out,
	};
	int ret;

	log_init("bench_seal", LOG_WARN);
	ret = bench_cli_parse(&cli, argc, argv, NULL);
	if (ret >= 0)
		return ret;
	for (uint64_t r = 1; r <= runs; r++) {
		ret = bench_seal_hs(&out, r, 2000);
		if (ret) {
			log_errno(ret, "bench_seal: handshake");
			return 1;
		}
		for (int e = 0; e < 2; e++) {
			for (size_t i = 0; i < BENCH_ARRAY_LEN(lens); i++) {
				ret = bench_seal_one(&out, r, e, lens[i],
						     bytes);
				if (ret) {
					log_errno(ret, "bench_seal");
					return 1;
				}
			}
		}
	}
	return 0;
}
