// SPDX-License-Identifier: MIT
/* Control-message framing: 4-byte big-endian length, then the payload. */
#include "frame.h"

#include <errno.h>

ssize_t frame_parse(const uint8_t *buf, size_t n, const uint8_t **payload,
		    size_t *len)
{
	uint32_t l;

	if (n < FRAME_HDR_LEN)
		return 0;
	l = (uint32_t)buf[0] << 24 | (uint32_t)buf[1] << 16 |
	    (uint32_t)buf[2] << 8 | buf[3];
	/* Checked before the caller waits for (or allocates) the payload. */
	if (l == 0 || l > FRAME_MAX)
		return -EBADMSG;
	if (n - FRAME_HDR_LEN < l)
		return 0;
	*payload = buf + FRAME_HDR_LEN;
	*len = l;
	return FRAME_HDR_LEN + (ssize_t)l;
}

void frame_hdr_put(uint8_t hdr[FRAME_HDR_LEN], uint32_t len)
{
	hdr[0] = len >> 24;
	hdr[1] = len >> 16;
	hdr[2] = len >> 8;
	hdr[3] = len;
}
