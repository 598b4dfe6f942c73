// SPDX-License-Identifier: MIT
/* frame_parse(): need-more, exact, oversize, zero, back-to-back frames. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "frame.h"

static void test_frame_need_more(void **state)
{
	uint8_t buf[FRAME_HDR_LEN + 8];
	const uint8_t *p = NULL;
	size_t len = 0;

	frame_hdr_put(buf, 8);
	memset(buf + FRAME_HDR_LEN, 'x', 8);
	for (size_t n = 0; n < sizeof(buf); n++)
		assert_int_equal(frame_parse(buf, n, &p, &len), 0);
	assert_null(p);
	/* the largest legal frame with only its header: wait for more */
	frame_hdr_put(buf, FRAME_MAX);
	assert_int_equal(frame_parse(buf, FRAME_HDR_LEN, &p, &len), 0);
}

static void test_frame_exact(void **state)
{
	uint8_t buf[FRAME_HDR_LEN + 5] = {
		0, 0, 0, 5, 'h', 'e', 'l', 'l', 'o'
	};
	const uint8_t *p;
	size_t len;
	uint8_t hdr[FRAME_HDR_LEN];

	assert_int_equal(frame_parse(buf, sizeof(buf), &p, &len), sizeof(buf));
	assert_ptr_equal(p, buf + FRAME_HDR_LEN);
	assert_int_equal(len, 5);
	assert_memory_equal(p, "hello", 5);

	frame_hdr_put(hdr, 0x01020304);
	assert_memory_equal(hdr, "\x01\x02\x03\x04", 4);
}

static void test_frame_bad_length(void **state)
{
	uint8_t buf[FRAME_HDR_LEN + 1] = { 0 };
	const uint8_t *p;
	size_t len;

	/* zero length, with or without more bytes */
	assert_int_equal(frame_parse(buf, FRAME_HDR_LEN, &p, &len), -EBADMSG);
	assert_int_equal(frame_parse(buf, sizeof(buf), &p, &len), -EBADMSG);
	/* oversize is rejected from the header alone */
	frame_hdr_put(buf, FRAME_MAX + 1);
	assert_int_equal(frame_parse(buf, FRAME_HDR_LEN, &p, &len), -EBADMSG);
	frame_hdr_put(buf, UINT32_MAX);
	assert_int_equal(frame_parse(buf, sizeof(buf), &p, &len), -EBADMSG);
}

static void test_frame_back_to_back(void **state)
{
	uint8_t buf[2 * FRAME_HDR_LEN + 3 + 2 + 2];
	const uint8_t *p;
	size_t len, off = 0;
	ssize_t used;

	frame_hdr_put(buf, 3);
	memcpy(buf + 4, "abc", 3);
	frame_hdr_put(buf + 7, 2);
	memcpy(buf + 11, "de", 2);
	memcpy(buf + 13, "\x00\x00", 2); /* start of a third header */

	used = frame_parse(buf, sizeof(buf), &p, &len);
	assert_int_equal(used, 7);
	assert_int_equal(len, 3);
	assert_memory_equal(p, "abc", 3);
	off += (size_t)used;
	used = frame_parse(buf + off, sizeof(buf) - off, &p, &len);
	assert_int_equal(used, 6);
	assert_int_equal(len, 2);
	assert_memory_equal(p, "de", 2);
	off += (size_t)used;
	assert_int_equal(frame_parse(buf + off, sizeof(buf) - off, &p, &len),
			 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_frame_need_more),
		cmocka_unit_test(test_frame_exact),
		cmocka_unit_test(test_frame_bad_length),
		cmocka_unit_test(test_frame_back_to_back),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
