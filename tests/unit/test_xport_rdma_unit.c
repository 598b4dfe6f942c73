// SPDX-License-Identifier: MIT
/*
 * xport_rdma without a device: endpoint <-> msg round trip and range checks,
 * PSN randomness, the QP attribute builders (RoCE and IB), GID choice, and
 * a context that finds no device failing cleanly with -ENODEV.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <infiniband/verbs.h>

#include "log.h"
#include "msg.h"
#include "xport_rdma.h"

#define T_PSNS 10000u

static struct xport_rdma_ep t_ep(void)
{
	struct xport_rdma_ep ep = {
		.qpn = 0x123456,
		.lid = 0xbeef,
		.gid = { 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0xe8, 0x7b, 0x5f, 0xff,
			 0xfe, 0x00, 0xc0, 0xc2 },
		.gid_index = 3,
		.psn = 0xabcdef,
		.mtu = 4096,
	};

	return ep;
}

static void test_xport_rdma_ep_roundtrip(void **state)
{
	struct xport_rdma_ep ep = t_ep(), back;
	struct msg m, d;
	uint8_t *buf;
	size_t len;

	msg_init(&m, MSG_T_ENDPOINT_PUT);
	m.node = 1;
	m.peer = 2;
	xport_rdma_ep_to_msg(&ep, &m);
	assert_int_equal(m.qpn, ep.qpn);
	assert_int_equal(m.lid, ep.lid);
	assert_memory_equal(m.gid, ep.gid, sizeof(ep.gid));
	assert_int_equal(m.gid_index, ep.gid_index);
	assert_int_equal(m.psn, ep.psn);
	assert_int_equal(m.mtu, ep.mtu);
	/* through the wire encoding, as the coordinator relays it */
	assert_int_equal(msg_encode(&m, &buf, &len), 0);
	assert_int_equal(msg_decode(buf, len, &d), 0);
	free(buf);
	assert_int_equal(d.type, MSG_T_ENDPOINT_PUT);
	memset(&back, 0x55, sizeof(back));
	assert_int_equal(xport_rdma_ep_from_msg(&d, &back), 0);
	assert_int_equal(back.qpn, ep.qpn);
	assert_int_equal(back.lid, ep.lid);
	assert_memory_equal(back.gid, ep.gid, sizeof(ep.gid));
	assert_int_equal(back.gid_index, ep.gid_index);
	assert_int_equal(back.psn, ep.psn);
	assert_int_equal(back.mtu, ep.mtu);
	msg_fini(&d);
	msg_fini(&m);
}

static void test_xport_rdma_ep_ranges(void **state)
{
	static const uint32_t good_mtu[] = { 256, 512, 1024, 2048, 4096 };
	static const uint64_t bad_mtu[] = { 0,	  128,	300,	   1500,
					    4095, 8192, 1ull << 32 };
	struct xport_rdma_ep ep = t_ep(), out;
	struct msg m;
	size_t i;

	msg_init(&m, MSG_T_ENDPOINT);
	xport_rdma_ep_to_msg(&ep, &m);
	/* the largest legal values pass */
	m.qpn = (1u << 24) - 1;
	m.psn = (1u << 24) - 1;
	m.lid = UINT16_MAX;
	m.gid_index = 255;
	assert_int_equal(xport_rdma_ep_from_msg(&m, &out), 0);
	assert_int_equal(out.qpn, (1u << 24) - 1);
	assert_int_equal(out.psn, (1u << 24) - 1);
	for (i = 0; i < sizeof(good_mtu) / sizeof(good_mtu[0]); i++) {
		m.mtu = good_mtu[i];
		assert_int_equal(xport_rdma_ep_from_msg(&m, &out), 0);
		assert_int_equal(out.mtu, good_mtu[i]);
	}
	m.mtu = 4096;
	out = t_ep();
	m.qpn = 1u << 24;
	assert_int_equal(xport_rdma_ep_from_msg(&m, &out), -EINVAL);
	m.qpn = UINT64_MAX;
	assert_int_equal(xport_rdma_ep_from_msg(&m, &out), -EINVAL);
	m.qpn = 0; /* QP0 and QP1 are never an RC QP */
	assert_int_equal(xport_rdma_ep_from_msg(&m, &out), -EINVAL);
	m.qpn = 1;
	assert_int_equal(xport_rdma_ep_from_msg(&m, &out), -EINVAL);
	m.qpn = 2;
	m.psn = 1u << 24;
	assert_int_equal(xport_rdma_ep_from_msg(&m, &out), -EINVAL);
	m.psn = (1ull << 32) | 5;
	assert_int_equal(xport_rdma_ep_from_msg(&m, &out), -EINVAL);
	m.psn = 5;
	m.lid = 1u << 16;
	assert_int_equal(xport_rdma_ep_from_msg(&m, &out), -EINVAL);
	m.lid = 0;
	m.gid_index = 256;
	assert_int_equal(xport_rdma_ep_from_msg(&m, &out), -EINVAL);
	m.gid_index = 0;
	for (i = 0; i < sizeof(bad_mtu) / sizeof(bad_mtu[0]); i++) {
		m.mtu = bad_mtu[i];
		assert_int_equal(xport_rdma_ep_from_msg(&m, &out), -EINVAL);
	}
	/* a rejected message leaves the output alone */
	assert_int_equal(out.qpn, t_ep().qpn);
	msg_fini(&m);
}

static int t_cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * 10 000 QPs' PSNs from one generator, as a context hands them out: no two
 * equal, all below 2^24, every bit set about half of the time, the 16
 * top-nibble buckets about even; and two generators (two agents) are keyed
 * differently, so their sequences differ.
 */
static void test_xport_rdma_psn_random(void **state)
{
	unsigned int bits[24] = { 0 }, buckets[16] = { 0 }, same = 0;
	uint32_t *psn = calloc(T_PSNS, sizeof(*psn));
	struct xport_rdma_psn_gen g, h;
	unsigned int i, b;
	uint32_t other;

	assert_non_null(psn);
	assert_int_equal(xport_rdma_psn_gen_init(&g), 0);
	assert_int_equal(xport_rdma_psn_gen_init(&h), 0);
	for (i = 0; i < T_PSNS; i++) {
		psn[i] = UINT32_MAX;
		assert_int_equal(xport_rdma_psn_gen_next(&g, &psn[i]), 0);
		assert_true(psn[i] < (1u << 24));
		assert_int_equal(xport_rdma_psn_gen_next(&h, &other), 0);
		same += other == psn[i];
		for (b = 0; b < 24; b++)
			bits[b] += (psn[i] >> b) & 1;
		buckets[psn[i] >> 20]++;
	}
	for (b = 0; b < 24; b++) {
		/* mean 5000, sigma 50: 10 sigma either way */
		assert_in_range(bits[b], 4500, 5500);
	}
	for (b = 0; b < 16; b++) {
		/* mean 625, sigma 24 */
		assert_in_range(buckets[b], 400, 850);
	}
	qsort(psn, T_PSNS, sizeof(*psn), t_cmp_u32);
	for (i = 1; i < T_PSNS; i++)
		assert_int_not_equal(psn[i], psn[i - 1]);
	assert_in_range(same, 0, 5);
	free(psn);
}

/* A generator is a permutation: 2^24 distinct PSNs, then -EOVERFLOW. */
static void test_xport_rdma_psn_cycle(void **state)
{
	uint8_t *seen = calloc(1u << 21, 1);
	struct xport_rdma_psn_gen g;
	uint32_t psn;

	assert_non_null(seen);
	assert_int_equal(xport_rdma_psn_gen_init(&g), 0);
	for (uint32_t i = 0; i < (1u << 24); i++) {
		assert_int_equal(xport_rdma_psn_gen_next(&g, &psn), 0);
		assert_true(psn < (1u << 24));
		assert_false(seen[psn >> 3] & (1u << (psn & 7)));
		seen[psn >> 3] |= 1u << (psn & 7);
	}
	assert_int_equal(xport_rdma_psn_gen_next(&g, &psn), -EOVERFLOW);
	free(seen);
}

static void test_xport_rdma_attr_init(void **state)
{
	struct ibv_qp_attr a, want;
	int mask = 0;

	memset(&a, 0xa5, sizeof(a));
	xport_rdma_qp_attr_init(&a, &mask, 2);
	memset(&want, 0, sizeof(want));
	want.qp_state = IBV_QPS_INIT;
	want.pkey_index = 0;
	want.port_num = 2;
	want.qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
	assert_memory_equal(&a, &want, sizeof(a));
	assert_int_equal(mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				       IBV_QP_ACCESS_FLAGS);
	/* READs and WRITEs (write-back) are served; never atomics */
	assert_true(a.qp_access_flags & IBV_ACCESS_REMOTE_WRITE);
	assert_false(a.qp_access_flags & IBV_ACCESS_REMOTE_ATOMIC);
}

static const int t_rtr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			      IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;

static void test_xport_rdma_attr_rtr_roce(void **state)
{
	struct xport_rdma_ep ep = t_ep();
	struct ibv_qp_attr a, want;
	int mask = 0;

	memset(&a, 0xa5, sizeof(a));
	xport_rdma_qp_attr_rtr(&a, &mask, &ep, 1, 3, 1, IBV_MTU_1024, 16);
	memset(&want, 0, sizeof(want));
	want.qp_state = IBV_QPS_RTR;
	want.path_mtu = IBV_MTU_1024;
	want.dest_qp_num = 0x123456;
	want.rq_psn = 0xabcdef;
	want.max_dest_rd_atomic = 16;
	want.min_rnr_timer = 12;
	want.ah_attr.is_global = 1;
	memcpy(want.ah_attr.grh.dgid.raw, ep.gid, 16);
	want.ah_attr.grh.sgid_index = 3;
	want.ah_attr.grh.hop_limit = 64;
	want.ah_attr.port_num = 1;
	assert_memory_equal(&a, &want, sizeof(a));
	assert_int_equal(mask, t_rtr_mask);
}

static void test_xport_rdma_attr_rtr_ib(void **state)
{
	struct xport_rdma_ep ep = t_ep();
	struct ibv_qp_attr a, want;
	int mask = 0;

	memset(&a, 0xa5, sizeof(a));
	xport_rdma_qp_attr_rtr(&a, &mask, &ep, 2, 0, 0, IBV_MTU_4096, 8);
	memset(&want, 0, sizeof(want));
	want.qp_state = IBV_QPS_RTR;
	want.path_mtu = IBV_MTU_4096;
	want.dest_qp_num = 0x123456;
	want.rq_psn = 0xabcdef;
	want.max_dest_rd_atomic = 8;
	want.min_rnr_timer = 12;
	want.ah_attr.dlid = 0xbeef; /* no GRH within an IB subnet */
	want.ah_attr.port_num = 2;
	assert_memory_equal(&a, &want, sizeof(a));
	assert_int_equal(mask, t_rtr_mask);
	assert_int_equal(a.ah_attr.is_global, 0);
}

static void test_xport_rdma_attr_rts(void **state)
{
	struct ibv_qp_attr a, want;
	int mask = 0;

	memset(&a, 0xa5, sizeof(a));
	xport_rdma_qp_attr_rts(&a, &mask, 0x654321, 16);
	memset(&want, 0, sizeof(want));
	want.qp_state = IBV_QPS_RTS;
	want.timeout = 14;
	want.retry_cnt = 6; /* 7 = forever on rdma_rxe */
	want.rnr_retry = 7;
	want.sq_psn = 0x654321;
	want.max_rd_atomic = 16;
	assert_memory_equal(&a, &want, sizeof(a));
	assert_int_equal(mask, IBV_QP_STATE | IBV_QP_TIMEOUT |
				       IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				       IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static struct ibv_gid_entry t_gid(uint32_t idx, const char *ip6,
				  enum ibv_gid_type type, uint32_t port)
{
	struct ibv_gid_entry e;

	memset(&e, 0, sizeof(e));
	assert_int_equal(inet_pton(AF_INET6, ip6, e.gid.raw), 1);
	e.gid_index = idx;
	e.gid_type = type;
	e.port_num = port;
	return e;
}

static void test_xport_rdma_gid_pick(void **state)
{
	/* rxe: RoCE v2 only; link-local first, then the IPv4 address */
	struct ibv_gid_entry rxe[] = {
		t_gid(0, "fe80::e87b:5fff:fe00:c0c2", IBV_GID_TYPE_ROCE_V2, 1),
		t_gid(1, "::ffff:10.0.0.1", IBV_GID_TYPE_ROCE_V2, 1),
	};
	/* mlx5: v1 and v2 of each address */
	struct ibv_gid_entry mlx[] = {
		t_gid(0, "fe80::1", IBV_GID_TYPE_ROCE_V1, 1),
		t_gid(1, "fe80::1", IBV_GID_TYPE_ROCE_V2, 1),
		t_gid(2, "::ffff:192.168.7.5", IBV_GID_TYPE_ROCE_V1, 1),
		t_gid(3, "::ffff:192.168.7.5", IBV_GID_TYPE_ROCE_V2, 1),
		t_gid(4, "2001:db8::5", IBV_GID_TYPE_ROCE_V1, 1),
		t_gid(5, "2001:db8::5", IBV_GID_TYPE_ROCE_V2, 1),
		t_gid(0, "fe80::2", IBV_GID_TYPE_ROCE_V2, 2),
	};
	struct ibv_gid_entry v4only[] = {
		t_gid(6, "::ffff:10.1.1.1", IBV_GID_TYPE_ROCE_V1, 1),
		t_gid(7, "::ffff:10.1.1.1", IBV_GID_TYPE_ROCE_V2, 1),
	};

	assert_int_equal(xport_rdma_gid_pick(rxe, 2, 1, NULL), 0);
	assert_int_equal(xport_rdma_gid_pick(rxe, 2, 1, ""), 0);
	assert_int_equal(xport_rdma_gid_pick(rxe, 2, 1, "10.0.0.1"), 1);
	/* an address that is not there: link-local */
	assert_int_equal(xport_rdma_gid_pick(rxe, 2, 1, "10.0.0.9"), 0);
	assert_int_equal(xport_rdma_gid_pick(rxe, 2, 1, "not-an-ip"), 0);
	assert_int_equal(xport_rdma_gid_pick(mlx, 7, 1, NULL), 1);
	assert_int_equal(xport_rdma_gid_pick(mlx, 7, 1, "192.168.7.5"), 3);
	assert_int_equal(xport_rdma_gid_pick(mlx, 7, 1, "2001:db8::5"), 5);
	assert_int_equal(xport_rdma_gid_pick(mlx, 7, 2, NULL), 6);
	assert_int_equal(xport_rdma_gid_pick(mlx, 7, 3, NULL), -ENOENT);
	assert_int_equal(xport_rdma_gid_pick(v4only, 2, 1, NULL), 1);
	assert_int_equal(xport_rdma_gid_pick(v4only, 0, 1, NULL), -ENOENT);
}

static void test_xport_rdma_ctx_nodev(void **state)
{
	static uint8_t pool[2 * 4096];
	struct xport_rdma_cfg cfg = {
		.gid_index = -1,
		.pool = pool,
		.pool_len = sizeof(pool),
	};
	struct xport_rdma_ctx *ctx = (struct xport_rdma_ctx *)0x1;
	struct ibv_device **list;
	int n = 0;

	/* bad configurations are refused before any device is looked at */
	assert_int_equal(xport_rdma_ctx_create(NULL, &ctx), -EINVAL);
	cfg.pool = NULL;
	assert_int_equal(xport_rdma_ctx_create(&cfg, &ctx), -EINVAL);
	cfg.pool = pool;
	cfg.gid_index = 256;
	assert_int_equal(xport_rdma_ctx_create(&cfg, &ctx), -EINVAL);
	cfg.gid_index = -1;
	assert_ptr_equal(ctx, (struct xport_rdma_ctx *)0x1);
	xport_rdma_ctx_destroy(NULL);

	list = ibv_get_device_list(&n);
	if (list)
		ibv_free_device_list(list);
	if (list && n > 0) {
		print_message("an RDMA device is present: -ENODEV not "
			      "testable here\n");
		skip();
	}
	assert_int_equal(xport_rdma_ctx_create(&cfg, &ctx), -ENODEV);
	cfg.device = "mlx5_0";
	assert_int_equal(xport_rdma_ctx_create(&cfg, &ctx), -ENODEV);
	assert_ptr_equal(ctx, (struct xport_rdma_ctx *)0x1);
}

static void test_xport_rdma_ops_table(void **state)
{
	const struct xport_ops *o = &xport_rdma_ops;
	struct xport_cfg cfg = { 0 };
	struct xport *x = NULL;
	static uint8_t land[4096];

	assert_string_equal(o->name, "verbs");
	assert_non_null(o->create);
	assert_non_null(o->destroy);
	assert_non_null(o->peer_open);
	assert_non_null(o->peer_close);
	assert_non_null(o->read);
	assert_non_null(o->write);
	assert_non_null(o->on_cqe);
	assert_non_null(o->tick);
	assert_non_null(o->peer_state);
	assert_non_null(o->peer_stats);
	/* no context, ring or landing area: refused */
	cfg.land = land;
	cfg.land_len = sizeof(land);
	assert_int_equal(o->create(&cfg, &x), -EINVAL);
	assert_null(x);
	o->destroy(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_xport_rdma_ep_roundtrip),
		cmocka_unit_test(test_xport_rdma_ep_ranges),
		cmocka_unit_test(test_xport_rdma_psn_random),
		cmocka_unit_test(test_xport_rdma_psn_cycle),
		cmocka_unit_test(test_xport_rdma_attr_init),
		cmocka_unit_test(test_xport_rdma_attr_rtr_roce),
		cmocka_unit_test(test_xport_rdma_attr_rtr_ib),
		cmocka_unit_test(test_xport_rdma_attr_rts),
		cmocka_unit_test(test_xport_rdma_gid_pick),
		cmocka_unit_test(test_xport_rdma_ctx_nodev),
		cmocka_unit_test(test_xport_rdma_ops_table),
	};

	/* the -ENODEV line is expected; keep it visible, drop the rest */
	log_init("test_xport_rdma_unit", LOG_ERR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
