/* closer.c — RELEASEs with nothing to record, answered in batches.
 *
 * Why: every create or open ends with a RELEASE, and each was a meta call
 * of its own (MSG_META_CLOSE: a wake-up of a strata-meta worker and a
 * RocksDB commit). The kernel does not wait for a RELEASE's answer (close(2)
 * waits for FLUSH only), so a RELEASE whose file has no length or mtime
 * left to record is queued here instead, and one thread closes what is
 * queued with one MSG_META_CLOSE_MANY (up to META_CLOSE_MANY_MAX sessions,
 * one commit): while one batch is in flight the next gathers, so there is
 * no timer and an idle mount closes at once.
 *
 * Invariants:
 *  1. A queued RELEASE is answered only after meta answered its close: a
 *     crash of this daemon before then leaves it unanswered, and the kernel
 *     resends it to the successor (takeover.c), which closes the session.
 *     Nothing acknowledged is lost.
 *  2. The queue is drained before the daemon stops serving (sfs_closer_stop,
 *     after the session loop and before sessions are closed or handed over).
 *  3. Only a release whose inode had no unrecorded length or write time is
 *     queued (sfs_file_batchable): a close that records a length stays the
 *     synchronous MSG_META_CLOSE of file_close. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "fs/log.h"
#include "fuse/fuse-internal.h"

#define SFS_CLOSER_GATHER_US 1000 /* a RELEASE waits at most this long to be batched */

struct close_job {
	struct close_job *next;
	fuse_req_t req;
	struct sfs_file *f;
};

struct sfs_closer {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct close_job *head, **tail;
	bool stopping;
	pthread_t thread;
};

/* Closes the sessions of jobs[0..n) one by one (a server without
 * MSG_META_CLOSE_MANY). */
static void close_each(struct sfs *fs, struct close_job **jobs, uint32_t n, int *results)
{
	for (uint32_t i = 0; i < n; i++) {
		struct sfs_file *f = jobs[i]->f;

		results[i] =
		    SFS_CALL(fs, SFS_IDEM, meta_close(fs->mc, f->inode->ino, f->session, -1, -1));
	}
}

static void close_batch(struct sfs *fs, struct close_job **jobs, uint32_t n)
{
	struct meta_close_item items[META_CLOSE_MANY_MAX];
	int results[META_CLOSE_MANY_MAX];
	int r;

	for (uint32_t i = 0; i < n; i++)
		items[i] =
		    (struct meta_close_item){jobs[i]->f->inode->ino, jobs[i]->f->session, -1, -1};
	/* a resend after a lost answer finds its sessions closed: -EBADF */
	r = SFS_CALL(fs, SFS_IDEM, meta_close_many(fs->mc, items, n, results));
	if (r == -EOPNOTSUPP || r == -EPERM) {
		close_each(fs, jobs, n, results);
	} else if (r < 0) {
		for (uint32_t i = 0; i < n; i++)
			results[i] = r;
	}
	for (uint32_t i = 0; i < n; i++) {
		sfs_file_closed(fs, jobs[i]->f, results[i] == -EBADF ? 0 : results[i]);
		fuse_reply_err(jobs[i]->req, 0);
		free(jobs[i]);
	}
}

/* c->lock held, something queued: lets more RELEASEs arrive for up to
 * SFS_CLOSER_GATHER_US, so that a storm's closes share a commit and the
 * thread wakes once per batch rather than once per release. */
static void gather(struct sfs_closer *c)
{
	struct timespec until;

	if (c->stopping)
		return;
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_nsec += SFS_CLOSER_GATHER_US * 1000;
	if (until.tv_nsec >= 1000000000) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	while (!c->stopping && pthread_cond_timedwait(&c->cond, &c->lock, &until) == 0)
		;
}

static void *closer_main(void *arg)
{
	struct sfs *fs = arg;
	struct sfs_closer *c = fs->closer;
	struct close_job *jobs[META_CLOSE_MANY_MAX];

	for (;;) {
		uint32_t n = 0;

		pthread_mutex_lock(&c->lock);
		while (!c->head && !c->stopping)
			pthread_cond_wait(&c->cond, &c->lock);
		gather(c);
		while (c->head && n < META_CLOSE_MANY_MAX) {
			jobs[n++] = c->head;
			c->head = c->head->next;
		}
		if (!c->head)
			c->tail = &c->head;
		bool done = n == 0 && c->stopping;
		pthread_mutex_unlock(&c->lock);
		if (done)
			return NULL;
		close_batch(fs, jobs, n);
	}
}

int sfs_closer_start(struct sfs *fs)
{
	struct sfs_closer *c = calloc(1, sizeof(*c));
	int r;

	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cond, &ca);
	pthread_condattr_destroy(&ca);
	c->tail = &c->head;
	fs->closer = c;
	r = sfs_thread_start(&c->thread, closer_main, fs);
	if (r < 0) {
		fs->closer = NULL;
		pthread_cond_destroy(&c->cond);
		pthread_mutex_destroy(&c->lock);
		free(c);
		return r;
	}
	return 0;
}

bool sfs_closer_queue(struct sfs *fs, fuse_req_t req, struct sfs_file *f)
{
	struct sfs_closer *c = fs->closer;
	struct close_job *j;

	if (!c || !(j = malloc(sizeof(*j))))
		return false;
	j->req = req;
	j->f = f;
	j->next = NULL;
	pthread_mutex_lock(&c->lock);
	if (c->stopping) {
		pthread_mutex_unlock(&c->lock);
		free(j);
		return false;
	}
	bool first = !c->head;
	*c->tail = j;
	c->tail = &j->next;
	if (first) /* the thread waits for the first; later ones it gathers */
		pthread_cond_signal(&c->cond);
	pthread_mutex_unlock(&c->lock);
	return true;
}

void sfs_closer_stop(struct sfs *fs)
{
	struct sfs_closer *c = fs->closer;

	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	c->stopping = true;
	pthread_cond_signal(&c->cond);
	pthread_mutex_unlock(&c->lock);
	pthread_join(c->thread, NULL); /* it drains the queue first */
	fs->closer = NULL;
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->lock);
	free(c);
}
