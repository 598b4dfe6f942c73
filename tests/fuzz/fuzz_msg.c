// SPDX-License-Identifier: MIT
/*
 * libFuzzer entry: the input is a byte stream from a peer. Frames are cut
 * with frame_parse() and each payload goes through msg_decode(); the whole
 * input is also decoded as one bare payload.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "frame.h"
#include "msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_decode(const uint8_t *p, size_t len)
{
	struct msg m;
	uint8_t *buf;
	size_t blen;

	if (msg_decode(p, len, &m))
		return;
	/* Whatever decodes must encode again. */
	if (msg_encode(&m, &buf, &blen))
		abort();
	free(buf);
	msg_fini(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *payload;
	size_t off = 0, len;
	ssize_t used;

	fuzz_decode(data, size);
	while (off < size) {
		used = frame_parse(data + off, size - off, &payload, &len);
		if (used <= 0)
			break;
		fuzz_decode(payload, len);
		off += (size_t)used;
	}
	return 0;
}
