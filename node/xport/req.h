/* SPDX-License-Identifier: MIT */
/*
 * io_uring user_data of the fault loop: a pointer to a struct whose first
 * member is a struct req. The loop switches on op and hands REQ_XPORT
 * completions to the transport that posted them.
 */
#ifndef NODE_REQ_H
#define NODE_REQ_H

enum req_op {
	REQ_UFFD_POLL = 1, /* a mapping's uffd became readable */
	REQ_WAKEUP,	   /* eventfd: work queued by another thread */
	REQ_TIMER,	   /* periodic tick */
	REQ_XPORT,	   /* owned by the tcp transport: ops->on_cqe() */
	REQ_XPORT_VERBS,   /* owned by the verbs transport */
};

struct req {
	enum req_op op;
};

#endif
