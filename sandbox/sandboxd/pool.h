/* pool.h — persistent worker threads for sandboxd's blocking backend work.
 *
 * Creates (sbx_create) and the removal of deleted sandboxes' state run off
 * the loop (container execs no longer do: the loop drives them). A thread
 * per job cost a clone, a stack set-up and an exit each time; these threads
 * stay and wait for the next job. A job runs at once: on an idle thread if
 * there is one, else on a new one (a job may block, so the pool never makes
 * one wait for another). Threads idle for POOL_IDLE_S beyond the first
 * POOL_KEEP exit. */
#pragma once

struct sbd_pool;

struct sbd_job {
	void (*fn)(struct sbd_job *job);
	struct sbd_job *next;  /* the pool's */
	struct sbd_pool *pool; /* the pool's */
};

/* A pool without threads yet (they start with the jobs), or NULL. */
struct sbd_pool *sbd_pool_new(void);
/* Lets the pool go: idle threads exit, running jobs finish first (the
 * last thread frees it). Accepts NULL. */
void sbd_pool_free(struct sbd_pool *p);
/* Runs job->fn(job) on a worker thread of p. Returns 0, or -errno when no
 * thread could be started (the job did not run). */
int sbd_pool_run(struct sbd_pool *p, struct sbd_job *job);
