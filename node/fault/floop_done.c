// SPDX-License-Identifier: MIT
/*
 * What the fault loop reports back to the control thread (flushes done,
 * leases to give back): a list under the loop's lock and an eventfd.
 */
#include "floop_int.h"

#include <unistd.h>

void floop_done_push(struct floop *f, struct floop_done *d)
{
	uint64_t one = 1;
	ssize_t r;

	d->next = NULL;
	pthread_mutex_lock(&f->lock);
	*f->dones_tail = d;
	f->dones_tail = &d->next;
	pthread_mutex_unlock(&f->lock);
	r = write(f->done_efd, &one, sizeof(one));
	(void)r;
}

int floop_done_fd(const struct floop *f)
{
	return f->done_efd;
}

struct floop_done *floop_done_take(struct floop *f)
{
	struct floop_done *d;
	uint64_t v;
	ssize_t r = read(f->done_efd, &v, sizeof(v));

	(void)r;
	pthread_mutex_lock(&f->lock);
	d = f->dones;
	f->dones = NULL;
	f->dones_tail = &f->dones;
	pthread_mutex_unlock(&f->lock);
	return d;
}
