/* pool.c - persistent worker threads.  A job is published under a generation counter;
 * workers spin briefly, then sleep on a condvar.  The caller runs its own share and
 * waits.  Nothing allocates per call.  One job at a time per pool (the pool belongs to
 * one engine thread).
 *
 * Two kinds of job (kernels.h):
 *   ls_pool_run      every ith in [0, nth) runs exactly once; the caller waits for all.
 *   ls_pool_run_dyn  the work is claimed from a shared counter inside fn, so the caller's
 *                    own call can finish all of it.  When the caller's fn returns, the job
 *                    closes: a worker that has not joined by then never runs it, and the
 *                    caller waits only for workers inside fn.  On a host where another
 *                    process holds the worker's core, a step no longer waits a scheduler
 *                    slice for a worker that has not woken up (measured: 2 threads on 2
 *                    busy cores ran decode at 24-94 tok/s against 180 for 1 thread).
 * A worker joins a job by counting itself in `active` and then reading `open` (the
 * job's generation, 0 when closed); the caller closes by clearing `open` and then
 * waits for `active` to reach 0.  Both sides use sequentially consistent operations,
 * so one of them sees the other: a worker either finds the job closed and leaves
 * without reading it, or the caller waits for it.  The fields of the next job are
 * written only after that wait, and published by the store of `open`. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "kernels/cpu/internal.h"
#include "util/alloc.h"

#define LS_POOL_SPIN 4000

struct ls_pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    void (*fn)(void *, int, int);
    void *arg;
    bool all;                 /* ls_pool_run: every ith must run */
    atomic_uint_fast64_t gen; /* bumped per job: wakes the workers */
    atomic_uint_fast64_t open; /* the open job's generation, 0 = closed */
    atomic_int active;        /* workers inside the join protocol */
    atomic_int pending;       /* ls_pool_run: participants still to finish */
    atomic_int next_ith;      /* the participant index each joining worker takes */
    atomic_bool stop;
};

static inline void ls_cpu_relax(void) { __builtin_ia32_pause(); }

static void ls_pool_signal_done(ls_pool *p) {
    pthread_mutex_lock(&p->mu);
    pthread_cond_signal(&p->cv_done);
    pthread_mutex_unlock(&p->mu);
}

static void *ls_pool_worker(void *a) {
    ls_pool *p = a;
    uint64_t seen = 0;
    for (;;) {
        uint64_t g = atomic_load_explicit(&p->gen, memory_order_acquire);
        for (int i = 0; g == seen && i < LS_POOL_SPIN; i++) {
            ls_cpu_relax();
            g = atomic_load_explicit(&p->gen, memory_order_acquire);
        }
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv_work, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = g;
        atomic_fetch_add(&p->active, 1);
        if (atomic_load(&p->open) == g) { /* still open: the job's fields are this job's */
            int ith = atomic_fetch_add(&p->next_ith, 1);
            LS_ASSERT(ith < p->n);
            bool all = p->all;
            p->fn(p->arg, ith, p->n);
            if (all && atomic_fetch_sub(&p->pending, 1) == 1) ls_pool_signal_done(p);
        }
        if (atomic_fetch_sub(&p->active, 1) == 1) ls_pool_signal_done(p);
    }
}

ls_pool *ls_pool_create(int n_threads, ls_err *err) {
    if (n_threads < 1 || n_threads > 1024) {
        ls_err_set(err, LS_E_INVALID, "thread count %d out of range (1..1024)", n_threads);
        return NULL;
    }
    ls_pool *p = ls_calloc(1, sizeof *p);
    if (!p) {
        ls_err_set(err, LS_E_NOMEM, "out of memory creating a %d-thread pool", n_threads);
        return NULL;
    }
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    atomic_init(&p->gen, 0);
    atomic_init(&p->open, 0);
    atomic_init(&p->active, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->next_ith, 1);
    atomic_init(&p->stop, false);
    if (n_threads > 1) {
        p->threads = ls_calloc((size_t)n_threads, sizeof *p->threads);
        if (!p->threads) {
            ls_err_set(err, LS_E_NOMEM, "out of memory creating a %d-thread pool", n_threads);
            ls_pool_free(p);
            return NULL;
        }
        for (int i = 1; i < n_threads; i++) {
            int rc = pthread_create(&p->threads[i], NULL, ls_pool_worker, p);
            if (rc != 0) {
                ls_err_set(err, LS_E_NOMEM, "cannot start worker thread %d of %d", i, n_threads);
                p->n = i; /* only threads 1..i-1 exist */
                ls_pool_free(p);
                return NULL;
            }
        }
    }
    return p;
}

void ls_pool_free(ls_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    if (p->threads)
        for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_work);
    pthread_cond_destroy(&p->cv_done);
    free(p->threads);
    free(p);
}

int ls_pool_size(const ls_pool *p) { return p ? p->n : 1; }

/* Spins, then sleeps, until *v == 0. */
static void ls_pool_wait_zero(ls_pool *p, atomic_int *v) {
    for (int i = 0; i < LS_POOL_SPIN * 4 && atomic_load(v) != 0; i++) ls_cpu_relax();
    if (atomic_load(v) != 0) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(v) != 0) pthread_cond_wait(&p->cv_done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}

static void ls_pool_job(ls_pool *p, void (*fn)(void *arg, int ith, int nth), void *arg, bool all) {
    if (!p || p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    /* No worker is running a job here (the last job waited for active == 0).  One that
     * enters the protocol now (a straggler that woke for an older generation) finds open
     * == 0, or this job's generation, which is not the one it woke for: it reads none of
     * these fields until it has seen gen == open, i.e. after the stores below. */
    p->fn = fn;
    p->arg = arg;
    p->all = all;
    atomic_store(&p->next_ith, 1);
    atomic_store(&p->pending, p->n - 1);
    uint64_t g = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
    atomic_store(&p->open, g);
    pthread_mutex_lock(&p->mu);
    atomic_store_explicit(&p->gen, g, memory_order_release);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    fn(arg, 0, p->n);
    if (all) ls_pool_wait_zero(p, &p->pending); /* every worker joins while the job is open */
    atomic_store(&p->open, 0);
    ls_pool_wait_zero(p, &p->active);
}

void ls_pool_run(ls_pool *p, void (*fn)(void *arg, int ith, int nth), void *arg) { ls_pool_job(p, fn, arg, true); }

void ls_pool_run_dyn(ls_pool *p, void (*fn)(void *arg, int ith, int nth), void *arg) { ls_pool_job(p, fn, arg, false); }
