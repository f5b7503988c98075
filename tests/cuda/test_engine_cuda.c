/* test_engine_cuda.c - the CUDA backend behind the engine's seam (src/engine/backend.h),
 * through the public API only, as serving uses it:
 *   1. the parity probe on a CUDA engine (its requests through the GPU engine's own
 *      scheduler, paged KV and prefix cache; the ISA axis is then the GPU against the
 *      CPU's scalar definition) verifies, on synthetic models of several type mixes;
 *   2. a mix of concurrent requests (greedy and seeded sampling, chunked prefill, a
 *      repeated prompt for the prefix cache, ngram drafts) on the GPU engine gives the
 *      same tokens and logits, memcmp, as each request alone on a CPU engine;
 *   3. ls_engine_score of random token sequences: GPU == CPU, every position.
 * With `--model FILE` (a real GGUF file, e.g. the default model carried to the device),
 * the same on that file: the probe; 16 concurrent requests (4 chat prompts and 12 of
 * random tokens; greedy and seeded; chunked; a repeat; ngram drafts) on the GPU against
 * each alone on the CPU, every generated position's logits; every position of those 16
 * prompts through ls_engine_score on each; and the decode speed of one chat answer on
 * each, whose text must be the same.
 * Prints the differing bytes; exits 1 on any difference.  Needs a CUDA build and a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lockstep.h"
#include "synth.h"

static int g_fail;
static size_t g_rows, g_bytes_diff;

static size_t diff_bytes(const float *a, const float *b, size_t n) {
    const uint8_t *x = (const uint8_t *)a, *y = (const uint8_t *)b;
    size_t d = 0;
    for (size_t i = 0; i < n * sizeof(float); i++) d += x[i] != y[i];
    return d;
}

static ls_engine *engine(ls_model *m, const char *device, int32_t n_seq) {
    ls_err err;
    ls_engine_params p = LS_ENGINE_PARAMS_INIT;
    p.n_ctx = 256;
    p.n_seq_max = n_seq;
    p.n_threads = 8;
    p.draft_max = 4;
    p.device = device;
    ls_engine *e = ls_engine_create(m, &p, &err);
    if (!e) {
        fprintf(stderr, "engine (%s): %s\n", device, err.msg);
        exit(1);
    }
    return e;
}

typedef struct {
    int32_t prompt[80], n_prompt;
    ls_sampler_params sp;
    int32_t chunk;
    bool ngram, mtp; /* an ngram drafter; the file's MTP module (which runs on the engine's backend) */
    ls_result res;
} req;

static void ignore(void *ud, const ls_event *ev) {
    (void)ud;
    (void)ev;
}

static void submit_all(ls_engine *e, req *r, int n, ls_drafter **dr) {
    ls_err err;
    for (int i = 0; i < n; i++) {
        ls_request q = LS_REQUEST_INIT;
        q.prompt = r[i].prompt;
        q.n_prompt = r[i].n_prompt;
        q.sampling = r[i].sp;
        q.max_tokens = 12;
        q.ignore_eos = true;
        q.want_logits = true;
        q.prefill_chunk = r[i].chunk;
        q.on_event = ignore;
        if (r[i].ngram || r[i].mtp) {
            ls_spec_params sp = LS_SPEC_PARAMS_INIT;
            sp.kind = r[i].mtp ? LS_SPEC_MTP : LS_SPEC_NGRAM;
            sp.ngram_min = 1;
            sp.fixed_length = true;
            if (!(dr[i] = ls_drafter_create(e, &sp, &q.sampling, &err))) {
                fprintf(stderr, "drafter: %s\n", err.msg);
                exit(1);
            }
            ls_drafter_attach(dr[i], &q);
        }
        r[i].res = (ls_result)LS_RESULT_INIT;
        if (i + 1 < n) { /* all but the last queued; the last one's generate steps them all */
            if (ls_engine_submit(e, &q, NULL, &err)) {
                fprintf(stderr, "submit: %s\n", err.msg);
                exit(1);
            }
        } else if (ls_engine_generate(e, &q, &r[i].res, &err)) {
            fprintf(stderr, "generate: %s\n", err.msg);
            exit(1);
        }
    }
    while (!ls_engine_idle(e)) ls_engine_step(e, NULL, &err);
}

static void test_model(const synth_cfg *c, uint64_t seed) {
    ls_err err;
    void *buf = NULL;
    ls_model *m = synth_model(c, seed, &buf, &err);
    if (!m) {
        fprintf(stderr, "%s: %s\n", c->name, err.msg);
        exit(1);
    }
    const size_t V = (size_t)c->n_vocab;
    /* 1. the probe on the GPU engine */
    ls_engine *g = engine(m, "cuda", 6);
    ls_probe_params pp = LS_PROBE_PARAMS_INIT;
    ls_probe_result pr = LS_PROBE_RESULT_INIT;
    if (ls_engine_probe(g, &pp, &pr, &err)) {
        fprintf(stderr, "%s: probe: %s\n", c->name, err.msg);
        exit(1);
    }
    ls_engine_info gi = LS_ENGINE_INFO_INIT;
    ls_engine_get_info(g, &gi);
    printf("%-40s probe on %s: %s (%d rows; batch_mix %d chunked %d prefix %d block %d isa %d; %.0f ms) %s\n", c->name,
           gi.device, ls_verdict_name(pr.verdict), pr.n_rows, pr.axis[LS_AXIS_BATCH_MIX], pr.axis[LS_AXIS_CHUNKED_PREFILL],
           pr.axis[LS_AXIS_PREFIX_CACHE], pr.axis[LS_AXIS_BLOCK_VS_CHAIN], pr.axis[LS_AXIS_ISA], pr.ms, pr.detail);
    if (pr.verdict != LS_VERDICT_VERIFIED || pr.axis[LS_AXIS_ISA] != LS_AXIS_PASSED) g_fail = 1;

    /* 2. a concurrent mix on the GPU == each request alone on the CPU */
    uint64_t rs = seed * 7 + 1;
    enum { NR = 6 };
    req rg[NR], rc[NR];
    for (int i = 0; i < NR; i++) {
        req *r = &rg[i];
        memset(r, 0, sizeof *r);
        r->n_prompt = 10 + (int32_t)(synth_next(&rs) % 60);
        for (int32_t t = 0; t < r->n_prompt; t++)
            r->prompt[t] = (int32_t)(synth_next(&rs) % (uint64_t)c->n_vocab);
        if (i == 3) memcpy(r, &rg[1], sizeof *r); /* a repeated prompt: the prefix cache */
        r->sp = i % 2 ? (ls_sampler_params){.temperature = 0.9f, .top_k = 40, .top_p = 0.95f, .seed = synth_next(&rs)}
                      : (ls_sampler_params){.top_p = 1.0f};
        r->chunk = i == 2 ? 7 : 0;
        r->ngram = i == 4;
        r->mtp = i == 5 && (c->feats & SYNTH_MTP); /* its module on the GPU in the GPU engine */
        rc[i] = *r;
    }
    ls_drafter *dg[NR] = {0}, *dc[NR] = {0};
    submit_all(g, rg, NR, dg); /* only the last request's result is collected this way: */
    ls_engine_free(g);
    /* ... so each one alone, on each backend, to compare */
    ls_engine *cpu = engine(m, "cpu", 1);
    ls_engine *gpu = engine(m, "cuda", 1);
    for (int i = 0; i < NR; i++) {
        ls_drafter *d1[1] = {0}, *d2[1] = {0};
        req a = rc[i], b = rc[i];
        submit_all(cpu, &a, 1, d1);
        submit_all(gpu, &b, 1, d2);
        size_t n = (size_t)(a.res.n_logits < b.res.n_logits ? a.res.n_logits : b.res.n_logits);
        size_t d = diff_bytes(a.res.logits, b.res.logits, n * V);
        bool same = a.res.n_tokens == b.res.n_tokens && !memcmp(a.res.tokens, b.res.tokens, sizeof(int32_t) * (size_t)a.res.n_tokens);
        g_rows += n;
        g_bytes_diff += d;
        if (d || !same || a.res.n_logits != b.res.n_logits) {
            printf("  request %d: GPU alone vs CPU alone: %zu bytes differ, tokens %s\n", i, d, same ? "same" : "DIFFER");
            g_fail = 1;
        }
        if (rc[i].mtp) { /* the module really drafted on each side */
            printf("%-40s MTP request: %d/%d drafts accepted on the CPU, %d/%d on the GPU\n", c->name, a.res.n_accepted,
                   a.res.n_drafted, b.res.n_accepted, b.res.n_drafted);
            if (a.res.n_drafted == 0 || b.res.n_drafted == 0) g_fail = 1;
        }
        ls_result_free(&a.res);
        ls_result_free(&b.res);
        ls_drafter_free(d1[0]);
        ls_drafter_free(d2[0]);
    }
    for (int i = 0; i < NR; i++) { /* the last of the mix (collected in the mix) vs alone on the CPU */
        ls_drafter_free(dg[i]);
        ls_drafter_free(dc[i]);
    }
    {
        req a = rc[NR - 1];
        ls_drafter *d1[1] = {0};
        submit_all(cpu, &a, 1, d1);
        size_t d = diff_bytes(a.res.logits, rg[NR - 1].res.logits, (size_t)a.res.n_logits * V);
        g_rows += (size_t)a.res.n_logits;
        g_bytes_diff += d;
        if (d || a.res.n_tokens != rg[NR - 1].res.n_tokens) {
            printf("  the mix's last request vs alone on the CPU: %zu bytes differ\n", d);
            g_fail = 1;
        }
        ls_result_free(&a.res);
        ls_result_free(&rg[NR - 1].res);
        ls_drafter_free(d1[0]);
    }
    /* 3. scores of random sequences */
    for (int k = 0; k < 3; k++) {
        int32_t n = 20 + (int32_t)(synth_next(&rs) % 100), toks[128];
        for (int32_t t = 0; t < n; t++) toks[t] = (int32_t)(synth_next(&rs) % (uint64_t)c->n_vocab);
        float *a = malloc(sizeof(float) * V * (size_t)n), *b = malloc(sizeof(float) * V * (size_t)n);
        if (ls_engine_score(cpu, toks, n, a, &err) || ls_engine_score(gpu, toks, n, b, &err)) {
            fprintf(stderr, "score: %s\n", err.msg);
            exit(1);
        }
        size_t d = diff_bytes(a, b, V * (size_t)n);
        g_rows += (size_t)n;
        g_bytes_diff += d;
        if (d) {
            printf("  score of %d tokens: %zu bytes differ\n", n, d);
            g_fail = 1;
        }
        free(a);
        free(b);
    }
    ls_engine_free(cpu);
    ls_engine_free(gpu);
    ls_model_free(m);
    free(buf);
}

/* 4. --cache-dir (engine/kvdisk.h) on the GPU: a prefix written by one CUDA engine and
 * loaded from the directory by a new one gives the CPU's cold bits (the synthetic model is
 * written to a file: the block files name the model's sha256). */
static void test_cache_dir(const synth_cfg *c, uint64_t seed) {
    ls_err err;
    char dir[64] = "/tmp/lockstep-cuda-kvdisk-XXXXXX", path[128], cdir[128];
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(1);
    }
    snprintf(path, sizeof path, "%s/model.gguf", dir);
    snprintf(cdir, sizeof cdir, "%s/kv", dir);
    ls_model_params mp = LS_MODEL_PARAMS_INIT;
    mp.path = path;
    ls_model *m = NULL;
    if (synth_write_file(c, seed, NULL, path, &err) || !(m = ls_model_load(&mp, &err))) {
        fprintf(stderr, "%s: %s\n", c->name, err.msg);
        exit(1);
    }
    const size_t V = (size_t)c->n_vocab;
    int32_t toks[100];
    uint64_t rs = seed * 13 + 5;
    for (int t = 0; t < 100; t++) toks[t] = (int32_t)(synth_next(&rs) % (uint64_t)c->n_vocab);
    ls_result r[3];
    for (int k = 0; k < 3; k++) { /* k 0: GPU, writes; 1: a new GPU engine, loads; 2: CPU, cold */
        ls_engine_params p = LS_ENGINE_PARAMS_INIT;
        p.n_ctx = 256;
        p.n_threads = 8;
        p.device = k < 2 ? "cuda" : "cpu";
        p.cache_dir = k < 2 ? cdir : NULL;
        ls_engine *e = ls_engine_create(m, &p, &err);
        if (!e) {
            fprintf(stderr, "cache dir engine %d: %s\n", k, err.msg);
            exit(1);
        }
        ls_request q = LS_REQUEST_INIT;
        q.prompt = toks;
        q.n_prompt = k ? 100 : 80;
        q.max_tokens = 8;
        q.ignore_eos = true;
        q.want_logits = true;
        q.sampling = (ls_sampler_params){.temperature = 0.9f, .top_k = 40, .top_p = 0.95f, .seed = 99};
        r[k] = (ls_result)LS_RESULT_INIT;
        if (ls_engine_generate(e, &q, &r[k], &err)) {
            fprintf(stderr, "cache dir generate %d: %s\n", k, err.msg);
            exit(1);
        }
        ls_engine_stats st = LS_ENGINE_STATS_INIT;
        ls_engine_get_stats(e, &st);
        if (k == 0 && st.disk_written < 5) g_fail = 1, printf("  cache dir: only %llu blocks written\n", (unsigned long long)st.disk_written);
        if (k == 1 && (st.disk_loaded < 5 || r[1].n_cached != 16 * (int32_t)st.disk_loaded || st.disk_rejected))
            g_fail = 1, printf("  cache dir: %llu blocks loaded, %d positions cached, %llu rejected\n",
                               (unsigned long long)st.disk_loaded, r[1].n_cached, (unsigned long long)st.disk_rejected);
        ls_engine_free(e);
    }
    size_t d = r[1].n_logits == r[2].n_logits ? diff_bytes(r[1].logits, r[2].logits, (size_t)r[1].n_logits * V) : 1;
    bool same = r[1].n_tokens == r[2].n_tokens && !memcmp(r[1].tokens, r[2].tokens, sizeof(int32_t) * (size_t)r[1].n_tokens);
    g_rows += (size_t)r[1].n_logits;
    g_bytes_diff += d;
    printf("%-40s --cache-dir on cuda: %d of 100 prompt positions loaded; vs the CPU cold: %zu bytes differ, tokens %s\n",
           c->name, r[1].n_cached, d, same ? "same" : "DIFFER");
    if (d || !same) g_fail = 1;
    for (int k = 0; k < 3; k++) ls_result_free(&r[k]);
    ls_model_free(m);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

/* ---- a real file ---------------------------------------------------------------- */
enum { F_NR = 16, F_GEN = 32 };

typedef struct {
    size_t V;
    float *lg; /* F_GEN rows: the logits that predicted each generated token */
    int32_t tok[F_GEN], n;
    bool done;
} coll;

static void collect(void *ud, const ls_event *ev) {
    coll *c = ud;
    if (ev->prompt || ev->token < 0 || c->n >= F_GEN) {
        if (ev->done) c->done = true;
        return;
    }
    if (ev->logits) memcpy(c->lg + (size_t)c->n * c->V, ev->logits, c->V * sizeof(float));
    c->tok[c->n++] = ev->token;
    if (ev->done) c->done = true;
}

static int32_t chat_tokens(const ls_model *m, const char *msg, int32_t *out, size_t cap) {
    ls_err err;
    ls_chat_msg cm = {"user", msg};
    char *text = NULL;
    size_t n = 0;
    if (ls_model_apply_chat(m, &cm, 1, true, &text, &err) ||
        ls_model_tokenize(m, text, strlen(text), true, true, out, cap, &n, &err)) {
        fprintf(stderr, "chat prompt: %s\n", err.msg);
        exit(1);
    }
    free(text);
    return (int32_t)n;
}

static void test_file(const char *path) {
    /* LOCKSTEP_TEST_DEVICE=cpu: a dry run of this harness on a machine without a GPU */
    const char *gpu = getenv("LOCKSTEP_TEST_DEVICE") ? getenv("LOCKSTEP_TEST_DEVICE") : "cuda";
    ls_err err;
    ls_model_params mp = LS_MODEL_PARAMS_INIT;
    mp.path = path;
    ls_model *m = ls_model_load(&mp, &err);
    if (!m) {
        fprintf(stderr, "%s: %s\n", path, err.msg);
        exit(1);
    }
    ls_model_info mi = LS_MODEL_INFO_INIT;
    if (ls_model_get_info(m, &mi, &err)) {
        fprintf(stderr, "%s: %s\n", path, err.msg);
        exit(1);
    }
    const size_t V = mi.n_vocab;
    ls_engine *g = engine(m, gpu, F_NR);
    ls_probe_params pp = LS_PROBE_PARAMS_INIT;
    ls_probe_result pr = LS_PROBE_RESULT_INIT;
    if (ls_engine_probe(g, &pp, &pr, &err)) {
        fprintf(stderr, "probe: %s\n", err.msg);
        exit(1);
    }
    ls_engine_info gi = LS_ENGINE_INFO_INIT;
    ls_engine_get_info(g, &gi);
    printf("%s\nprobe on %s: %s (%d rows; batch_mix %d chunked %d prefix %d block %d isa %d; %.0f ms) %s\n", path,
           gi.device, ls_verdict_name(pr.verdict), pr.n_rows, pr.axis[LS_AXIS_BATCH_MIX],
           pr.axis[LS_AXIS_CHUNKED_PREFILL], pr.axis[LS_AXIS_PREFIX_CACHE], pr.axis[LS_AXIS_BLOCK_VS_CHAIN],
           pr.axis[LS_AXIS_ISA], pr.ms, pr.detail);
    if (pr.verdict != LS_VERDICT_VERIFIED || pr.axis[LS_AXIS_ISA] != LS_AXIS_PASSED) g_fail = 1;

    static const char *chats[] = {"What is the capital of France?", "Write a haiku about the sea.",
                                  "Explain what a hash table is in two sentences.", "List three prime numbers."};
    static int32_t prompts[F_NR][200];
    int32_t n_prompt[F_NR];
    uint64_t rs = 12345;
    for (int i = 0; i < F_NR; i++) {
        if (i < 4) n_prompt[i] = chat_tokens(m, chats[i], prompts[i], 200);
        else if (i == 9) {
            memcpy(prompts[i], prompts[5], sizeof prompts[i]); /* a repeat: the prefix cache */
            n_prompt[i] = n_prompt[5];
        } else {
            n_prompt[i] = 10 + (int32_t)(synth_next(&rs) % 60);
            for (int32_t t = 0; t < n_prompt[i]; t++) prompts[i][t] = (int32_t)(synth_next(&rs) % V);
        }
    }
    coll gc[F_NR];
    ls_drafter *dr[F_NR] = {0};
    ls_sampler_params sp[F_NR];
    for (int i = 0; i < F_NR; i++) {
        gc[i] = (coll){.V = V, .lg = malloc(sizeof(float) * V * F_GEN)};
        sp[i] = i % 2 ? (ls_sampler_params){.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 1000 + i}
                      : (ls_sampler_params){.top_p = 1.0f};
        ls_request q = LS_REQUEST_INIT;
        q.prompt = prompts[i];
        q.n_prompt = n_prompt[i];
        q.sampling = sp[i];
        q.max_tokens = F_GEN;
        q.ignore_eos = true;
        q.want_logits = true;
        q.prefill_chunk = i % 5 == 2 ? 7 : 0;
        q.on_event = collect;
        q.ud = &gc[i];
        if (i % 4 == 1) {
            ls_spec_params spp = LS_SPEC_PARAMS_INIT;
            spp.kind = LS_SPEC_NGRAM;
            spp.ngram_min = 1;
            if (!(dr[i] = ls_drafter_create(g, &spp, &q.sampling, &err))) {
                fprintf(stderr, "drafter: %s\n", err.msg);
                exit(1);
            }
            ls_drafter_attach(dr[i], &q);
        }
        if (ls_engine_submit(g, &q, NULL, &err)) {
            fprintf(stderr, "submit: %s\n", err.msg);
            exit(1);
        }
    }
    while (!ls_engine_idle(g))
        if (ls_engine_step(g, NULL, &err)) {
            fprintf(stderr, "step: %s\n", err.msg);
            exit(1);
        }
    ls_engine *cpu = engine(m, "cpu", 1);
    size_t rows = 0, bytes = 0;
    for (int i = 0; i < F_NR; i++) {
        ls_request q = LS_REQUEST_INIT;
        q.prompt = prompts[i];
        q.n_prompt = n_prompt[i];
        q.sampling = sp[i];
        q.max_tokens = F_GEN;
        q.ignore_eos = true;
        q.want_logits = true;
        q.on_event = ignore;
        ls_result r = LS_RESULT_INIT;
        if (ls_engine_generate(cpu, &q, &r, &err)) {
            fprintf(stderr, "generate (cpu): %s\n", err.msg);
            exit(1);
        }
        size_t n = (size_t)(r.n_logits < gc[i].n ? r.n_logits : gc[i].n);
        size_t d = diff_bytes(r.logits, gc[i].lg, n * V);
        bool same = r.n_tokens == gc[i].n && !memcmp(r.tokens, gc[i].tok, sizeof(int32_t) * (size_t)gc[i].n);
        rows += n;
        bytes += d;
        if (d || !same || !gc[i].done || r.n_logits != F_GEN) {
            printf("  request %d: GPU in the mix vs CPU alone: %zu bytes differ, tokens %s\n", i, d,
                   same ? "same" : "DIFFER");
            g_fail = 1;
        }
        ls_result_free(&r);
        free(gc[i].lg);
        ls_drafter_free(dr[i]);
    }
    printf("16 concurrent requests on the GPU vs each alone on the CPU: %zu logits rows, %zu bytes differ\n", rows,
           bytes);
    g_rows += rows;
    g_bytes_diff += bytes;
    /* every position of every prompt: ls_engine_score on the GPU engine and on the CPU one */
    size_t srows = 0, sbytes = 0;
    for (int i = 0; i < F_NR; i++) {
        const int32_t n = n_prompt[i];
        float *a = malloc(sizeof(float) * V * (size_t)n), *b = malloc(sizeof(float) * V * (size_t)n);
        if (!a || !b || ls_engine_score(cpu, prompts[i], n, a, &err) || ls_engine_score(g, prompts[i], n, b, &err)) {
            fprintf(stderr, "score: %s\n", a && b ? err.msg : "out of memory");
            exit(1);
        }
        const size_t d = diff_bytes(a, b, V * (size_t)n);
        srows += (size_t)n;
        sbytes += d;
        if (d) {
            printf("  prompt %d (%d tokens): %zu bytes differ\n", i, n, d);
            g_fail = 1;
        }
        free(a);
        free(b);
    }
    printf("every position of the 16 prompts, GPU vs CPU (ls_engine_score): %zu logits rows, %zu bytes of %zu differ\n",
           srows, sbytes, srows * V * sizeof(float));
    g_rows += srows;
    g_bytes_diff += sbytes;
    ls_engine_free(g);

    /* one chat answer alone on each: the text, prefill and decode speed */
    ls_engine *g1 = engine(m, gpu, 1);
    char *text[2] = {0};
    for (int k = 0; k < 2; k++) {
        ls_request q = LS_REQUEST_INIT;
        q.prompt = prompts[0];
        q.n_prompt = n_prompt[0];
        q.sampling = (ls_sampler_params){.top_p = 1.0f};
        q.max_tokens = 128;
        q.on_event = ignore;
        ls_result r = LS_RESULT_INIT;
        if (ls_engine_generate(k ? cpu : g1, &q, &r, &err)) {
            fprintf(stderr, "generate: %s\n", err.msg);
            exit(1);
        }
        printf("%s: %d prompt + %d generated tokens, prefill %.1f ms, decode %.1f tok/s\n", k ? "cpu (8 threads)" : gpu,
               r.n_prompt, r.n_tokens, r.prompt_ms, r.n_tokens > 1 ? (r.n_tokens - 1) * 1000.0 / r.gen_ms : 0.0);
        text[k] = strdup(r.text);
        ls_result_free(&r);
    }
    printf("answer: %s\n", text[0]);
    if (strcmp(text[0], text[1])) {
        printf("  the CPU's answer differs: %s\n", text[1]);
        g_fail = 1;
    }
    free(text[0]);
    free(text[1]);
    ls_engine_free(g1);
    ls_engine_free(cpu);
    ls_model_free(m);
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--model")) {
        test_file(argv[2]);
        printf("test_engine_cuda: %zu logits rows compared, %zu bytes differ: %s\n", g_rows, g_bytes_diff,
               g_fail ? "FAILED" : "ok");
        return g_fail;
    }
    static const synth_cfg cfgs[] = {
        {"smol-q4_1 (Q4_1, tied Q8_0 head)", 8192, 576, 3, 9, 3, 1536, 8192, 3, 3, 3, 3, 3, 3, 3, 8, -1, 100000.0f, NULL, 0, 0, 0, 0.0f, 0, 0.0f},
        {"q4_k_m (Q4_K, Q6_K v/down/head)", 8192, 1024, 2, 16, 4, 2816, 4096, 12, 12, 14, 12, 12, 12, 14, 12, 14, 10000.0f, NULL, 0, 0, 0, 0.0f, 0, 0.0f},
        {"q4_0 (Q6_K head, head dim 128)", 8192, 1024, 2, 8, 2, 2816, 4096, 2, 2, 2, 2, 2, 2, 2, 2, 14, 500000.0f, NULL, 0, 0, 0, 0.0f, 0, 0.0f},
        {"gemma3 + MTP (its own F16 head)", 2048, 128, 6, 2, 1, 512, 4096, 8, 8, 6, 2, 8, 8, 2, 8, 1, 1000000.0f, "gemma3", 256,
         11, SYNTH_QK_NORM | SYNTH_POST | SYNTH_MTP, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) test_model(&cfgs[i], 11 + i);
    test_cache_dir(&cfgs[0], 31);
    printf("test_engine_cuda: %zu logits rows compared, %zu bytes differ: %s\n", g_rows, g_bytes_diff,
           g_fail ? "FAILED" : "ok");
    return g_fail;
}
