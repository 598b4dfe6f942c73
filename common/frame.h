/* SPDX-License-Identifier: MIT */
/*
 * Framing of control messages: a 4-byte big-endian payload length, then the
 * CBOR payload. The length is checked against FRAME_MAX before anything waits
 * for or allocates the payload.
 */
#ifndef COMMON_FRAME_H
#define COMMON_FRAME_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define FRAME_HDR_LEN 4
#define FRAME_MAX     (16u << 20) /* payload bytes */

/*
 * Looks for one complete frame at the start of buf[0..n). Returns the number
 * of bytes the frame uses (header + payload) and points *payload and *len at the
 * payload; 0 if more bytes are needed; -EBADMSG if the declared length is 0
 * or larger than FRAME_MAX.
 */
ssize_t frame_parse(const uint8_t *buf, size_t n, const uint8_t **payload,
		    size_t *len);

/* Writes the 4-byte header for a payload of @len bytes into hdr. */
void frame_hdr_put(uint8_t hdr[FRAME_HDR_LEN], uint32_t len);

#endif
