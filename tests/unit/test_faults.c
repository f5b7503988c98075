/* Failure injection (issue 8): the allocator hook (src/util/alloc.h) fails the Nth
 * allocation, swept over model load, request admission and engine steps.  Each time
 *   - the failing operation reports the error (load and submit return LS_E_NOMEM with a
 *     message; a step ends the one affected request with LS_FINISH_ERROR, or retries
 *     what it could not do yet, e.g. queueing or indexing n-grams),
 *   - the process stays up and the next attempt works,
 *   - the other sequences are unaffected: their tokens and logits are memcmp-equal to
 *     their runs without any failure,
 *   - nothing leaks: the heap in use (glibc mallinfo2) is back to its baseline; under
 *     ASan (make test-asan) LeakSanitizer checks the same at exit.
 * Also: a model file truncated after it was mapped is an error at load, not a SIGBUS.
 *
 * Sweeps: every allocation of admission and of the steps; for model load (thousands of
 * allocations, most of them the vocabulary) the first and last 48 and an even spread
 * between, LOCKSTEP_FAULT_POINTS in all (default 160; 0 = every one).
 * Model tests are skipped when MODEL does not name a readable file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fixture.h"

#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "speculative/spec.h"
#include "util/alloc.h"
#include "quick.h"


/* Bytes the process has allocated from glibc's heap (small and mmap'd chunks).  Exact
 * only without the per-thread cache, whose free chunks count as in use, and with one
 * arena: a worker thread that finds the main arena busy makes a new one, whose ~2 KiB
 * header counts as in use for good (the load's repack threads did, now and then).
 * main() runs the program again with glibc.malloc.tcache_count=0:glibc.malloc.arena_max=1. */
static size_t heap_in_use(void) {
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

static ls_model *g_model;
static int32_t g_V;

static int group_setup(void **state) {
    (void)state;
    if (access(fx_model_path(), R_OK) != 0) return 0;
    ls_err err;
    g_model = ls_model_load(&(ls_model_params){.size = sizeof(ls_model_params), .path = fx_model_path()}, &err);
    if (!g_model) {
        fprintf(stderr, "load: %s\n", err.msg);
        return -1;
    }
    g_V = (int32_t)ls_model_hparams(g_model)->n_vocab;
    return 0;
}
static int group_teardown(void **state) {
    (void)state;
    ls_model_free(g_model);
    return 0;
}

/* ---- the hook itself ------------------------------------------------------ */

static void test_hook_fails_exactly_the_nth(void **state) {
    (void)state;
    ls_alloc_fail_nth(3);
    void *a = ls_malloc(8), *b = ls_calloc(2, 8), *c = ls_malloc(8), *d = ls_strdup("x");
    assert_non_null(a);
    assert_non_null(b);
    assert_null(c);
    assert_non_null(d);
    assert_true(ls_alloc_failed());
    assert_int_equal(ls_alloc_count(), 4);
    ls_alloc_fail_nth(1);
    void *r = ls_realloc(a, 4096); /* a failed realloc leaves the block alone */
    assert_null(r);
    ls_alloc_fail_nth(0);
    memset(a, 1, 8);
    free(a);
    free(b);
    free(d);
    void *al = ls_aligned_alloc(64, 100); /* rounded up to a multiple of 64 */
    assert_non_null(al);
    assert_int_equal((uintptr_t)al % 64, 0);
    memset(al, 0, 128);
    free(al);
}

/* ---- model load ------------------------------------------------------------ */

static int32_t fault_points(uint64_t total, uint64_t *pts) {
    const char *e = getenv("LOCKSTEP_FAULT_POINTS");
    uint64_t want = e ? strtoull(e, NULL, 10) : 160;
    if (want == 0 || want >= total) {
        for (uint64_t i = 0; i < total; i++) pts[i] = i + 1;
        return (int32_t)total;
    }
    int32_t n = 0;
    uint64_t edge = want / 3 < 48 ? want / 3 : 48, mid = want - 2 * edge;
    for (uint64_t i = 1; i <= edge; i++) pts[n++] = i;
    for (uint64_t i = 0; i < mid; i++) pts[n++] = edge + 1 + (total - 2 * edge) * i / mid;
    for (uint64_t i = total - edge + 1; i <= total; i++) pts[n++] = i;
    return n;
}

static void test_model_load_sweep(void **state) {
    (void)state;
    FX_NEED(g_model);
    ls_err err;
    ls_model_params mp = {.size = sizeof(ls_model_params), .path = fx_model_path()};
    ls_model_free(ls_model_load(&mp, &err)); /* warm: one-time allocations of the C library */
    size_t base = heap_in_use();
    ls_alloc_count_start();
    ls_model *m = ls_model_load(&mp, &err);
    ls_alloc_count_stop();
    uint64_t total = ls_alloc_count();
    assert_non_null(m);
    ls_model_free(m);
    assert_int_equal(heap_in_use(), base);
    assert_true(total > 10);
    uint64_t *pts = malloc(total * sizeof *pts);
    assert_non_null(pts);
    int32_t np = fault_points(total, pts);
    base = heap_in_use(); /* with pts */
    for (int32_t i = 0; i < np; i++) {
        ls_err_clear(&err);
        ls_alloc_fail_nth(pts[i]);
        m = ls_model_load(&mp, &err);
        int fired = ls_alloc_failed();
        ls_alloc_fail_nth(0);
        assert_true(fired);
        if (m) fail_msg("allocation %llu of %llu failed but the model loaded", (unsigned long long)pts[i],
                        (unsigned long long)total);
        if (err.code != LS_E_NOMEM || !strstr(err.msg, "out of memory"))
            fail_msg("allocation %llu of %llu: expected an out-of-memory error, got %s: '%s'",
                     (unsigned long long)pts[i], (unsigned long long)total, ls_status_name(err.code), err.msg);
        if (heap_in_use() != base)
            fail_msg("allocation %llu of %llu: %zd bytes leaked", (unsigned long long)pts[i],
                     (unsigned long long)total, (ssize_t)(heap_in_use() - base));
    }
    m = ls_model_load(&mp, &err); /* and the next load works */
    assert_non_null(m);
    ls_model_free(m);
    print_message("model load: %d of %llu allocations failed in turn, each an out-of-memory error, no leak\n", np,
                  (unsigned long long)total);
    free(pts);
}

/* ---- engine: admission and steps ------------------------------------------ */

#define MAXGEN 80
typedef struct {
    int32_t toks[MAXGEN + 1];
    int32_t n;
    float *logits; /* (MAXGEN + 1) x V */
    bool done;
    ls_finish finish;
    char text[4096];
    size_t text_len;
} outcome;

static void on_event(void *ud, const ls_event *ev) {
    outcome *o = ud;
    assert_false(o->done);
    if (ev->token >= 0) {
        assert_true(o->n <= MAXGEN);
        assert_non_null(ev->logits);
        memcpy(o->logits + (size_t)o->n * g_V, ev->logits, sizeof(float) * (size_t)g_V);
        o->toks[o->n++] = ev->token;
    }
    assert_true(o->text_len + ev->text_len < sizeof o->text);
    memcpy(o->text + o->text_len, ev->text, ev->text_len);
    o->text_len += ev->text_len;
    if (ev->done) {
        o->done = true;
        o->finish = ev->finish;
    }
}

static void outcome_reset(outcome *o) {
    float *l = o->logits;
    memset(o, 0, sizeof *o);
    o->logits = l;
}

/* Three requests: a long greedy one (its text outgrows the first buffer), one with an
 * n-gram drafter (its index grows), one sampled with a seed. */
enum { NREQ = 3 };
static const char *const k_prompts[NREQ] = {
    "Write a long story about a lighthouse keeper and the sea.",
    "Count: one two three, one two three, one two three, one two three, one two",
    "List some colours:",
};
static int32_t g_prompt[NREQ][64], g_n_prompt[NREQ];

static ls_request request_for(int i, outcome *o, ls_drafter *dr) {
    ls_request q = LS_REQUEST_INIT;
    q.prompt = g_prompt[i];
    q.n_prompt = g_n_prompt[i];
    q.sampling = (ls_sampler_params){.temperature = i == 2 ? 0.8f : 0.0f, .top_k = 40, .top_p = 0.95f, .seed = 7};
    q.max_tokens = i == 0 ? MAXGEN : 40;
    q.ignore_eos = true;
    q.want_logits = true;
    q.on_event = on_event;
    q.ud = o;
    if (dr) {
        q.draft = ls_drafter_draft;
        q.draft_ud = dr;
    }
    return q;
}

static ls_engine *new_engine(void) {
    ls_err err;
    ls_engine_params p = {.size = sizeof(ls_engine_params), .n_ctx = 256, .n_seq_max = 4, .step_tokens = 64, .n_threads = 1, .isa = -1, .draft_max = 4};
    ls_engine *e = ls_engine_create(g_model, &p, &err);
    if (!e) fail_msg("engine: %s", err.msg);
    return e;
}

static ls_drafter *new_drafter(ls_engine *e, const ls_request *q) {
    ls_err err;
    ls_spec_params sp = {.size = sizeof(ls_spec_params), .kind = LS_SPEC_NGRAM, .draft_max = 4, .draft_min = 1,
                         .ngram_min = 1, .ngram_max = 3, .fixed_length = true};
    ls_drafter *d = ls_drafter_create(e, &sp, &q->sampling, &err);
    if (!d) fail_msg("drafter: %s", err.msg);
    return d;
}

/* check: the engine's invariant checker after each step (it allocates, so not while a
 * failure is armed). */
static void run_to_idle(ls_engine *e, bool check) {
    ls_err err;
    for (int guard = 0; !ls_engine_idle(e); guard++) {
        assert_true(guard < 10000);
        assert_int_equal(ls_engine_step(e, NULL, &err), LS_OK);
        if (check && !ls_engine_check(e, &err)) fail_msg("engine invariant: %s", err.msg);
    }
}

static outcome g_ref[NREQ], g_got[NREQ];

static void setup_outcomes(void) {
    for (int i = 0; i < NREQ; i++) {
        if (!g_ref[i].logits) g_ref[i].logits = malloc(sizeof(float) * (size_t)(MAXGEN + 1) * (size_t)g_V);
        if (!g_got[i].logits) g_got[i].logits = malloc(sizeof(float) * (size_t)(MAXGEN + 1) * (size_t)g_V);
        assert_non_null(g_ref[i].logits);
        assert_non_null(g_got[i].logits);
        ls_err err;
        size_t n;
        assert_int_equal(ls_tokenize(ls_model_tokenizer(g_model), k_prompts[i], strlen(k_prompts[i]), false, true,
                                     g_prompt[i], 64, &n, &err), LS_OK);
        g_n_prompt[i] = (int32_t)n;
    }
}

/* The three requests together, no failure: the reference every faulty run is held to. */
static void run_reference(void) {
    ls_engine *e = new_engine();
    ls_err err;
    ls_drafter *dr = NULL;
    for (int i = 0; i < NREQ; i++) {
        outcome_reset(&g_ref[i]);
        ls_request q = request_for(i, &g_ref[i], NULL);
        if (i == 1) q = request_for(i, &g_ref[i], dr = new_drafter(e, &q));
        assert_int_equal(ls_engine_submit(e, &q, NULL, &err), LS_OK);
    }
    run_to_idle(e, true);
    ls_engine_free(e);
    ls_drafter_free(dr);
    for (int i = 0; i < NREQ; i++) {
        assert_true(g_ref[i].done);
        assert_int_equal(g_ref[i].finish, LS_FINISH_LENGTH);
    }
    assert_true(g_ref[0].text_len > 256); /* the text buffer had to grow */
}

static bool same_outcome(const outcome *a, const outcome *b) {
    return a->n == b->n && a->finish == b->finish && a->text_len == b->text_len &&
           memcmp(a->toks, b->toks, (size_t)a->n * sizeof *a->toks) == 0 &&
           memcmp(a->logits, b->logits, sizeof(float) * (size_t)a->n * (size_t)g_V) == 0 &&
           memcmp(a->text, b->text, a->text_len) == 0;
}

/* A request ended by a failure delivered a prefix of its reference: its tokens,
 * logits and text so far are the reference's. */
static bool prefix_of(const outcome *a, const outcome *ref) {
    return a->n <= ref->n && a->text_len <= ref->text_len &&
           memcmp(a->toks, ref->toks, (size_t)a->n * sizeof *a->toks) == 0 &&
           memcmp(a->logits, ref->logits, sizeof(float) * (size_t)a->n * (size_t)g_V) == 0 &&
           memcmp(a->text, ref->text, a->text_len) == 0;
}

/* Admission: request 0 is running; request 1's submit fails at each of its
 * allocations in turn and returns LS_E_NOMEM; the engine goes on, request 1 is then
 * submitted for real, and everything equals the reference. */
static void test_admission_sweep(void **state) {
    (void)state;
    FX_NEED(g_model);
    SKIP_AT_SMOKE();
    setup_outcomes();
    run_reference();
    size_t base = heap_in_use();
    ls_err err;
    uint64_t total = 0;
    for (uint64_t nth = 0;; nth++) { /* nth = 0: count the allocations of a submit */
        ls_engine *e = new_engine();
        for (int i = 0; i < NREQ; i++) outcome_reset(&g_got[i]);
        ls_request q0 = request_for(0, &g_got[0], NULL);
        assert_int_equal(ls_engine_submit(e, &q0, NULL, &err), LS_OK);
        for (int s = 0; s < 3; s++) assert_int_equal(ls_engine_step(e, NULL, &err), LS_OK);
        ls_request q1 = request_for(1, &g_got[1], NULL);
        ls_drafter *dr = new_drafter(e, &q1);
        q1 = request_for(1, &g_got[1], dr);
        if (nth == 0) {
            ls_alloc_count_start();
            assert_int_equal(ls_engine_submit(e, &q1, NULL, &err), LS_OK);
            ls_alloc_count_stop();
            total = ls_alloc_count();
        } else {
            ls_alloc_fail_nth(nth);
            ls_status st = ls_engine_submit(e, &q1, NULL, &err);
            int fired = ls_alloc_failed();
            ls_alloc_fail_nth(0);
            assert_true(fired);
            if (st != LS_E_NOMEM || !strstr(err.msg, "out of memory"))
                fail_msg("submit with allocation %llu failing: %s '%s'", (unsigned long long)nth,
                         ls_status_name(st), err.msg);
            for (int s = 0; s < 2; s++) assert_int_equal(ls_engine_step(e, NULL, &err), LS_OK);
            assert_false(g_got[1].done); /* never admitted: no events */
            assert_int_equal(ls_engine_submit(e, &q1, NULL, &err), LS_OK); /* the retry works */
        }
        ls_request q2 = request_for(2, &g_got[2], NULL);
        assert_int_equal(ls_engine_submit(e, &q2, NULL, &err), LS_OK);
        run_to_idle(e, true);
        ls_engine_free(e);
        ls_drafter_free(dr);
        for (int i = 0; i < NREQ; i++)
            if (!same_outcome(&g_got[i], &g_ref[i]))
                fail_msg("submit allocation %llu: request %d differs from the reference", (unsigned long long)nth, i);
        if (heap_in_use() != base)
            fail_msg("submit allocation %llu: %zd bytes leaked", (unsigned long long)nth,
                     (ssize_t)(heap_in_use() - base));
        if (nth == total) break;
    }
    assert_true(total >= 5);
    print_message("admission: each of a submit's %llu allocations failed in turn: LS_E_NOMEM, others exact, no leak\n",
                  (unsigned long long)total);
}

/* Steps: all three requests are submitted, then the Nth allocation made while stepping
 * fails, for every N.  At most one request ends with LS_FINISH_ERROR, having
 * delivered a prefix of its reference; every other request equals its reference. */
static void test_step_sweep(void **state) {
    (void)state;
    FX_NEED(g_model);
    SKIP_AT_SMOKE();
    setup_outcomes();
    run_reference();
    size_t base = heap_in_use();
    ls_err err;
    uint64_t total = 0;
    int errored = 0, retried = 0;
    for (uint64_t nth = 0;; nth++) {
        ls_engine *e = new_engine();
        ls_drafter *dr = NULL;
        for (int i = 0; i < NREQ; i++) {
            outcome_reset(&g_got[i]);
            ls_request q = request_for(i, &g_got[i], NULL);
            if (i == 1) q = request_for(i, &g_got[i], dr = new_drafter(e, &q));
            assert_int_equal(ls_engine_submit(e, &q, NULL, &err), LS_OK);
        }
        if (nth == 0) ls_alloc_count_start();
        else ls_alloc_fail_nth(nth);
        run_to_idle(e, false);
        int fired = ls_alloc_failed();
        if (nth == 0) total = ls_alloc_count();
        ls_alloc_count_stop();
        ls_engine_free(e);
        ls_drafter_free(dr);
        assert_true(nth == 0 || fired);
        int n_err = 0;
        for (int i = 0; i < NREQ; i++) {
            assert_true(g_got[i].done);
            if (g_got[i].finish == LS_FINISH_ERROR) {
                n_err++;
                if (!prefix_of(&g_got[i], &g_ref[i]))
                    fail_msg("step allocation %llu: request %d ended with an error but its output is not a prefix "
                             "of the reference", (unsigned long long)nth, i);
            } else if (!same_outcome(&g_got[i], &g_ref[i])) {
                fail_msg("step allocation %llu: request %d differs from the reference", (unsigned long long)nth, i);
            }
        }
        assert_true(n_err <= 1);
        if (nth) {
            errored += n_err;
            retried += n_err == 0;
        }
        if (heap_in_use() != base)
            fail_msg("step allocation %llu: %zd bytes leaked", (unsigned long long)nth,
                     (ssize_t)(heap_in_use() - base));
        if (nth == total) break;
    }
    assert_true(total >= 3);
    assert_true(errored >= 1); /* a text buffer that could not grow */
    print_message("steps: each of %llu step allocations failed in turn: %d ended one request with an error (a prefix of "
                  "its output), %d were retried with no visible effect; the other requests exact, no leak\n",
                  (unsigned long long)total, errored, retried);
}

/* ---- a model file truncated while mapped ---------------------------------- */

static int copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    if (!a || !b) {
        if (a) fclose(a);
        if (b) fclose(b);
        return -1;
    }
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0)
        if (fwrite(buf, 1, n, b) != n) break;
    fclose(a);
    return fclose(b);
}

static void test_truncated_while_mapped(void **state) {
    (void)state;
    FX_NEED(g_model);
    char path[] = "/tmp/lockstep-trunc-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(copy_file(fx_model_path(), path), 0);
    ls_err err;
    gguf_file *g = gguf_open(path, &err); /* mapped, header parsed */
    assert_non_null(g);
    uint64_t size = gguf_file_size(g);
    assert_int_equal(truncate(path, (off_t)(size / 2)), 0); /* another process truncates it */
    ls_model *m = ls_model_load_gguf(g, &(ls_model_params){.size = sizeof(ls_model_params), .path = path}, &err); /* takes g */
    assert_null(m);
    assert_int_equal(err.code, LS_E_IO);
    if (!strstr(err.msg, "truncated") || !strstr(err.msg, path)) fail_msg("unexpected message: %s", err.msg);
    print_message("%s\n", err.msg);
    unlink(path);
}

int main(int argc, char **argv) {
    const char *tun = getenv("GLIBC_TUNABLES");
    if (!tun || !strstr(tun, "glibc.malloc.tcache_count=0:glibc.malloc.arena_max=1")) {
        setenv("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0:glibc.malloc.arena_max=1", 1);
        execv("/proc/self/exe", argv);
        perror("test_faults: re-exec without the malloc tcache, with one arena");
        return 1;
    }
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hook_fails_exactly_the_nth),
        cmocka_unit_test(test_model_load_sweep),
        cmocka_unit_test(test_admission_sweep),
        cmocka_unit_test(test_step_sweep),
        cmocka_unit_test(test_truncated_while_mapped),
    };
    int rc = cmocka_run_group_tests(tests, group_setup, group_teardown);
    for (int i = 0; i < NREQ; i++) {
        free(g_ref[i].logits);
        free(g_got[i].logits);
    }
    return rc;
}
