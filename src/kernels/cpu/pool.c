/* pool.c - persistent worker threads.  ls_pool_run publishes (fn, arg) under a
 * generation counter; workers spin briefly, then sleep on a condvar.  The caller
 * runs ith = 0 and waits for the others.  Nothing allocates per call.
 * One ls_pool_run at a time per pool (the pool belongs to one engine thread). */
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
    atomic_uint_fast64_t gen;
    atomic_int pending;
    atomic_bool stop;
};

typedef struct {
    ls_pool *p;
    int ith;
} ls_pool_start;

static inline void ls_cpu_relax(void) { __builtin_ia32_pause(); }

static void *ls_pool_worker(void *a) {
    ls_pool_start *st = a;
    ls_pool *p = st->p;
    int ith = st->ith;
    free(st);
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
        p->fn(p->arg, ith, p->n);
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
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
    atomic_init(&p->pending, 0);
    atomic_init(&p->stop, false);
    if (n_threads > 1) {
        p->threads = ls_calloc((size_t)n_threads, sizeof *p->threads);
        if (!p->threads) {
            ls_err_set(err, LS_E_NOMEM, "out of memory creating a %d-thread pool", n_threads);
            ls_pool_free(p);
            return NULL;
        }
        for (int i = 1; i < n_threads; i++) {
            ls_pool_start *st = ls_malloc(sizeof *st);
            int rc = st ? 0 : -1;
            if (st) {
                st->p = p;
                st->ith = i;
                rc = pthread_create(&p->threads[i], NULL, ls_pool_worker, st);
                if (rc != 0) free(st);
            }
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

void ls_pool_run(ls_pool *p, void (*fn)(void *arg, int ith, int nth), void *arg) {
    if (!p || p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    fn(arg, 0, p->n);
    for (int i = 0; i < LS_POOL_SPIN * 4 && atomic_load_explicit(&p->pending, memory_order_acquire) != 0; i++)
        ls_cpu_relax();
    if (atomic_load_explicit(&p->pending, memory_order_acquire) != 0) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load_explicit(&p->pending, memory_order_acquire) != 0) pthread_cond_wait(&p->cv_done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}
