#!/usr/bin/env python3
"""make mutants: deliberate bugs, one at a time, in a scratch copy of the tree; each must
be caught (a non-zero exit) by the tests named beside it.  Exits 1 if any mutation
survives, or if a mutation no longer applies (the list is stale) or does not build.

  python3 scripts/mutants.py [--only ID,ID] [--keep]   (make mutants runs all)

The scratch copy is the working tree (tracked and untracked, not ignored, files) plus
the build folder, so each mutant rebuilds only what its file feeds.  docs/reliability.md
lists the mutations and what kills each.
"""
import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / os.environ.get("MODEL", "models/SmolLM2-135M-Instruct.Q4_1.gguf")

KERNELS = "build/tests/test_kernels"
ENGINE = "LOCKSTEP_ENGINE_CASES=6 build/tests/test_engine"
SPEC = "LOCKSTEP_TEST_QUICK=1 build/tests/test_spec"
PROBE = "build/tests/test_probe"
PARITY = "LOCKSTEP_TEST_QUICK=1 build/tests/test_model_parity"
HOSTILE_K = "python3 -m pytest -q -x tests/python/test_server_hostile.py -k "

# (id, file, the exact text, its replacement, what it breaks, the tests that must fail)
# Mutants of a kernel level this CPU lacks (NEEDS) are listed NOT CHECKED, not run.
NEEDS = {"amx-unsigned-products": "amx", "amx-nibble-shift": "amx", "amx-q6k-half-row": "amx"}

MUTANTS = [
    ("scalar-group", "src/kernels/cpu/matmul_scalar.c",
     "S[m * LS_NGRP + b % LS_NGRP] = S[m * LS_NGRP + b % LS_NGRP] + c;",
     "S[m * LS_NGRP + (b + 1) % LS_NGRP] = S[m * LS_NGRP + (b + 1) % LS_NGRP] + c;",
     "the scalar definition puts unit b in the wrong accumulation group", [KERNELS]),
    ("avx2-tree", "src/kernels/cpu/tree_avx2.h",
     "_mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7)", "_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)",
     "the AVX2 final tree pairs the wrong lanes", [KERNELS]),
    ("avx2-chains-reassociated", "src/kernels/cpu/matmul_avx2.c",
     '#define LS_Y_KEEP(v) __asm__("" : "+x"(v))', "#define LS_Y_KEEP(v) ((void)(v))",
     "the AVX2 panel kernels' accumulator chains are left to GCC's reassociation (same bits, every product spilled)",
     ["python3 -m pytest -q -x tests/python/test_codegen.py"]),
    ("avx2-attn-pv-wide-pass", "src/kernels/cpu/ops_avx2.c",
     "for (int t = 0; t < NA; t++) _mm256_storeu_ps(out + d0 + 8 * t, _mm256_mul_ps(acc[t], inv));",
     "for (int t = 0; t < NA; t++) _mm256_storeu_ps(out + d0 + 8 * t, NA == 8 && t == 7 ? acc[t] : _mm256_mul_ps(acc[t], inv));",
     "the AVX2 per-head attention's 64-dim pass leaves its last 8 dims unnormalized", [KERNELS]),
    ("mm-row-block-xp-offset", "src/kernels/cpu/matmul.c",
     "        rows.xp_row0 += m0;\n",
     "        rows.xp_row0 += m0 / 2;\n",
     "a matmul row block after the first reads the packed activations of rows half-way back",
     [KERNELS]),
    ("avx2-attn-qk8-order", "src/kernels/cpu/ops_avx2.c",
     "        for (int t = 0; t < nq; t++) {\n            const __m256 q0 = _mm256_loadu_ps(q + 16 * t), q1",
     "        for (int t = nq - 1; t >= 0; t--) {\n            const __m256 q0 = _mm256_loadu_ps(q + 16 * t), q1",
     "the AVX2 per-head attention's 8-key score slices sum a key's 16-dim products last to first",
     [KERNELS]),
    ("avx512-attn-pv-wide-pass", "src/kernels/cpu/ops_avx512.c",
     "for (int t = 0; t < NA; t++) _mm512_mask_storeu_ps(out + d0 + 16 * t, mk[t], _mm512_mul_ps(acc[t], inv));",
     "for (int t = 0; t < NA; t++) _mm512_mask_storeu_ps(out + d0 + 16 * t, mk[t], t == 7 ? acc[t] : _mm512_mul_ps(acc[t], inv));",
     "the AVX-512 per-head attention leaves dims 112..127 of each 128-dim pass unnormalized", [KERNELS]),
    ("avx512-attn-qk-order", "src/kernels/cpu/ops_avx512.c",
     "acc[jj] = _mm512_fmadd_ps(qv[t], _mm512_loadu_ps(kb + (int64_t)jj * kv_stride + 16 * t), acc[jj]);",
     "acc[jj] = _mm512_fmadd_ps(qv[NQ - 1 - t], _mm512_loadu_ps(kb + (int64_t)jj * kv_stride + 16 * (NQ - 1 - t)), acc[jj]);",
     "the AVX-512 per-head attention sums a key's 16-dim products last to first (the right products, another order)",
     [KERNELS]),
    ("avx512-tree", "src/kernels/cpu/tree_avx512.h",
     "return ls_z_pair(ls_z_pair(t[0], t[1]), ls_z_pair(t[2], t[3]));",
     "return ls_z_pair(ls_z_pair(t[0], t[2]), ls_z_pair(t[1], t[3]));",
     "the AVX-512 16-way tree pairs the wrong subtrees", [KERNELS]),
    ("attn-chunk", "src/kernels/cpu/ops_scalar.c",
     "for (int64_t c = 0; c < n; c += LS_ATTN_CHUNK) {", "for (int64_t c = 0; c < n; c += 32) {",
     "the scalar softmax sum uses 32-key chunks (the SIMD paths 64)", [KERNELS]),
    ("quant-tiny", "src/kernels/cpu/matmul.c",
     "if (finite && amax >= LS_QX_TINY) {", "if (finite && amax > LS_QX_TINY) {",
     "activation blocks exactly at the tiny threshold quantize differently from AVX-512's", [KERNELS]),
    ("wmat-two-copies", "src/kernels/cpu/wmat.c",
     "    if (ls_panel_type(type)) /* the panel copy is its one repacked layout (ls_wmat_prepare builds it) */",
     "    if (ls_panel_type(type) && 0) /* the panel copy is its one repacked layout (ls_wmat_prepare builds it) */",
     "a panel-type matrix builds its group records beside the panel copy (two repacked copies of its weights)",
     [KERNELS + " test_wmat_one_copy"]),
    ("panel-q6k-nibble", "src/kernels/cpu/wmat.c",
     "const int sl = 4 * (m >> 1), shh = 2 * m;", "const int sl = 4 * (m & 1), shh = 2 * m;",
     "the Q6_K panel builder takes the low nibbles where units 2 and 3 of a half want the high ones",
     [KERNELS + " test_wmat_one_copy"]),
    ("panel-no-padding", "src/kernels/cpu/wmat.c",
     "        memset(w->panel + (size_t)(w->N / 16) * w->panel_bytes, 0, w->panel_bytes);",
     "        (void)0;",
     "the last panel's padding rows are left as the memory held them",
     [KERNELS + " test_wmat_one_copy"]),
    ("rmsnorm-eps", "src/kernels/cpu/ops_scalar.c",
     "float scale = 1.0f / sqrtf(mean + eps);", "float scale = 1.0f / sqrtf(mean);",
     "the scalar RMSNorm drops epsilon", [KERNELS]),
    ("sample-batch-index", "src/engine/engine.c",
     "int32_t tok = ls_sample_seq_masked(&s->sp, lg, e->n_vocab, s->toks, s->n_toks, s->n_prompt, mask,",
     "int32_t tok = ls_sample_seq_masked(&s->sp, lg, e->n_vocab, s->toks, s->n_toks + bi, s->n_prompt, mask,",
     "the sampler's draw is keyed by the sequence's index in the batch", [ENGINE]),
    ("seed-ignored", "src/sample/sample.c",
     "ls_rand_uniform(p->seed, pos, 0)", "ls_rand_uniform(0, pos, 0)",
     "the sampler ignores the request's seed",
     ["build/tests/test_sample", "python3 -m pytest -q -x tests/python/test_cli.py -k reproducible"]),
    ("server-seed-ignored", "src/server/request.c",
     ".seed = (uint64_t)r->seed, .logit_bias", ".seed = 0, .logit_bias",
     "the server samples every request with seed 0, whatever it asked or was given",
     ["python3 -m pytest -q -x tests/python/test_server_api.py -k seed"]),
    ("server-utf8-accepted", "src/server/request.c",
     "size_t l = c < 0x80 ? 1 : ls_utf8_valid_len(s->b + s->i, s->n - s->i);", "size_t l = 1;",
     "request bodies with invalid UTF-8 in a string are accepted (and echoed raw)",
     ["python3 -m pytest -q -x tests/python/test_server_hostile.py -k invalid_utf8"]),
    ("server-origin-unchecked", "src/server/http.c",
     "if (!origin_ok(s, origin, host)) {", "if (false) {",
     "a web page of any origin can drive the server (a cross-origin simple POST runs)",
     ["python3 -m pytest -q -x tests/python/test_server_hostile.py -k cross_origin"]),
    ("server-413-after-body", "src/server/http.c",
     "if (e != cl && n > s->p->max_body && (waits || n / LS_SRV_DRAIN_FACTOR > s->p->max_body)) {", "if (false) {",
     "a body declared over --max-body is waited for instead of refused from the head",
     ["python3 -m pytest -q -x tests/python/test_server_hostile.py -k 'declared_body or expect_continue'"]),
    ("server-idle-is-late-head", "src/server/http.c",
     "if (rx > k->rx_mark) {", "if (true) {",
     "an idle keep-alive connection is cut and counted as a late request head",
     ["python3 -m pytest -q -x tests/python/test_server_hostile.py -k idle_keepalive"]),
    ("messages-stream-drops-last-delta", "src/server/api_messages.c",
     "        if (nc) {\n            block_delta(j, &out, \"text_delta\"",
     "        if (nc && !j->done) {\n            block_delta(j, &out, \"text_delta\"",
     "the Messages stream drops the text that arrives with the end of the generation",
     ["python3 -m pytest -q -x tests/python/test_server_agents.py -k 'byte_for_byte or reasoning'"]),
    ("reasoning-split-off-by-one", "src/server/reasoning.c",
     "size_t c0 = (size_t)(e - t) + CLOSE_N;", "size_t c0 = (size_t)(e - t) + CLOSE_N - 1;",
     "the content after a think block starts one byte early (with the '>' of </think>)",
     ["python3 -m pytest -q -x tests/python/test_server_agents.py -k reasoning"]),
    ("page-replay-compares-nothing", "src/server/page/page.js",
     "const at = firstDiff(a, b);", "const at = -1;",
     "the chat page's replay button says identical without comparing the texts",
     ["python3 -m pytest -q -x tests/python/test_server_page.py -k chromium"]),
    ("progress-on-a-pipe", "src/cli/run.c",
     "progress = progress && !json && isatty(STDERR_FILENO);", "progress = progress && !json;",
     "run writes its progress lines (probe, prefill) into a file or pipe, not only on a terminal",
     ["python3 -m pytest -q -x tests/python/test_cli.py -k progress_only"]),
    ("kv-skip", "src/backend/cpu/forward.c",
     "bool fault = (kc->faults & LS_FAULT_KV_SKIP) && r > 0",
     "bool fault = r > 0",
     "the K/V write of the first row of a later sequence in a batch is skipped", [ENGINE, PROBE]),
    ("cow-skipped", "src/engine/engine.c",
     "if (ls_kvc_shared(e->kvc, b)) {", "if (0 && ls_kvc_shared(e->kvc, b)) {",
     "a sequence writes into a shared (prefix-cached) block instead of copying it", [ENGINE]),
    ("prefix-off-by-one", "src/engine/kvcache.c",
     "        matched += best_len;\n", "        matched += best_len < rem ? best_len + 1 : best_len;\n",
     "the prefix cache claims one position more than it matched", [ENGINE]),
    ("kvdisk-no-checksum", "src/engine/kvdisk.c",
     "if (memcmp(sum, f + size - SUM, SUM)) return", "if (0) return",
     "the persistent prefix cache (--cache-dir) loads a block file without checking its checksum",
     ["build/tests/test_kvdisk", "python3 -m pytest -q -x tests/python/test_server_cache_dir.py -k flip"]),
    ("verify-keeps-rejected", "src/engine/engine.c",
     "s->n_past += s->n_rows - s->n_draft;", "s->n_past += s->n_rows - s->n_draft + (s->n_draft > 0);",
     "a verify block keeps the K/V of its first draft even when it is rejected", [SPEC, ENGINE]),
    ("ngram-off-by-one", "src/speculative/spec.c",
     "out[c] = h[e + c];", "out[c] = h[e + c - 1];",
     "the ngram drafter proposes from one position too early",
     ["build/tests/test_spec test_ngram_matches_brute_force"]),
    ("lookup-min-ignored", "src/speculative/spec.c",
     "int32_t n = draft_ngram(d, hist, n_hist, out, max, d->p.lookup_min);",
     "int32_t n = draft_ngram(d, hist, n_hist, out, max, d->p.ngram_min);",
     "--draft-lookup N looks up n-grams shorter than N (ngram's own shortest)",
     ["build/tests/test_spec test_lookup_first"]),
    ("lookup-stats-every-proposal", "src/speculative/spec.c",
     "    if (d->prop_lookup) {\n        d->lk_props++;", "    if (1) {\n        d->lk_props++;",
     "the lookup counts take the drafter's own proposals too",
     ["build/tests/test_spec test_lookup_first"]),
    ("grammar-nesting-unbounded", "src/sample/grammar.c",
     "if (ps->nesting >= MAX_NESTING)", "if (0)",
     "GBNF groups nest without limit (6,000 of them overflowed the server's 2 MiB connection stack)",
     ["build/tests/test_grammar"]),
    ("grammar-start-mask-unchecked", "src/engine/engine.c",
     "int32_t n0 = m0 ? ls_grammar_mask(gst, e->gvocab, m0) : -1;", "int32_t n0 = m0 ? 1 : -1;",
     "a grammar whose first token mask goes over its work budget is admitted (then ended with a 500) instead of refused with a 400",
     ["build/tests/test_grammar test_engine_parity_alone_batched_speculative"]),
    ("grammar-chain-unbounded", "src/sample/grammar.c",
     "if (f->depth > MAX_CHAIN) *chain_rule = f->rule;", "(void)0;",
     "a chain of 20,000 rules that each begin with the next is not refused",
     ["build/tests/test_grammar"]),
    ("schema-count-unbounded", "src/sample/json_schema.c",
     "if (v->valuedouble > MAX_COUNT) {", "if (0) {",
     "minItems/maxItems/minLength/maxLength have no limit (minItems 100000 compiled for minutes)",
     ["build/tests/test_grammar"]),
    ("pool-no-wait", "src/kernels/cpu/pool.c",
     "    atomic_store(&p->open, 0);\n    ls_pool_wait_zero(p, &p->active);",
     "    atomic_store(&p->open, 0);",
     "a kernel dispatch returns before the workers that joined it have finished their claims",
     ["build/tests/test_kernels test_pool_dyn"]),
    ("probe-always-ok", "src/engine/probe.c",
     "static bool all_pass(const ls_probe_result *r) {\n",
     "static bool all_pass(const ls_probe_result *r) {\n    if (r) return true;\n",
     "the probe reports verified whatever it found", [PROBE]),
    ("probe-no-memcmp", "src/engine/probe.c",
     "if (memcmp(ref->lg + (size_t)pos * p->V, b->lg + (size_t)pos * p->V, p->V * sizeof(float))) {",
     "if (0 && memcmp(ref->lg + (size_t)pos * p->V, b->lg + (size_t)pos * p->V, p->V * sizeof(float))) {",
     "the probe compares no logits", [PROBE]),
    ("dequant-q4_1-min", "src/quant/dequant.c",
     "            const int x0 = qs[j] & 0x0F;\n            const int x1 = qs[j] >> 4;\n            y[j] = (float)x0 * d + m;",
     "            const int x0 = qs[j] & 0x0F;\n            const int x1 = qs[j] >> 4;\n            y[j] = (float)x0 * d - m;",
     "the reference dequantization of Q4_1 subtracts the minimum",
     ["python3 -m pytest -q -x tests/python/test_dequant.py"]),
    ("bpe-ties-rightmost", "src/tokenizer/tokenizer.c",
     "return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;",
     "return a->rank != b->rank ? a->rank < b->rank : a->pos > b->pos;",
     "BPE merges tied ranks rightmost first",
     ["python3 -m pytest -q -x tests/python/test_tokenizer.py -k hf"]),
    ("whole-word-control", "src/tokenizer/tokenizer.c",
     "if (id >= 0 && ty != LS_TOKTYPE_CONTROL && ty != LS_TOKTYPE_UNKNOWN) {",
     "if (id >= 0) {",
     "a whole-word lookup (ignore_merges) turns plain text into a control token",
     ["build/tests/test_tokenizer"]),
    ("hash-cache-no-times", "src/gguf/gguf.c",
     "(unsigned long long)st.st_ino, (long long)st.st_size, (long long)st.st_mtim.tv_sec,\n                     st.st_mtim.tv_nsec, (long long)st.st_ctim.tv_sec, st.st_ctim.tv_nsec);",
     "(unsigned long long)st.st_ino, (long long)st.st_size, 0LL, 0L, 0LL, 0L);",
     "the file identity that keys the hash cache leaves out the times: a file changed in place keeps its old hash",
     ["python3 -m pytest -q -x tests/python/test_cli.py -k hash_by_file"]),
    ("free-rows-cached", "src/engine/engine.c",
     "    if (s->no_parity) return;\n    for (; (s->registered + 1) * BS <= s->n_past; s->registered++)",
     "    for (; (s->registered + 1) * BS <= s->n_past; s->registered++)",
     "a no-parity sequence's blocks (free-family bits) enter the prefix cache, where parity requests reuse them",
     [PROBE]),
    # issue 34: properties no test stated before (tests/python/test_sampler_ref.py, test_server_api.py)
    ("penalty-counts-prompt", "src/engine/engine.c",
     "s->toks, s->n_toks, s->n_prompt, mask,", "s->toks, s->n_toks, 0, mask,",
     "frequency and presence penalties count the prompt's tokens as generated ones",
     ["python3 -m pytest -q -x tests/python/test_sampler_ref.py -k 'frequency or presence'"]),
    ("top-p-draw-over-all", "src/sample/sample.c",
     "        n = keep;\n        total = 0.0f;\n        for (int32_t i = 0; i < n; i++) total += prob[i];\n    }\n    if (p->min_p",
     "        n = keep;\n    }\n    if (p->min_p",
     "after top-p the draw scales by the whole mass, not the kept mass (the last kept token drawn too often)",
     ["python3 -m pytest -q -x tests/python/test_sampler_ref.py -k top_p"]),
    ("temperature-squared", "src/sample/sample.c",
     "prob[i] = ls_expf((c[i].logit - lmax) / p->temperature);",
     "prob[i] = ls_expf((c[i].logit - lmax) / (p->temperature * p->temperature));",
     "the softmax divides by T squared (the same at T = 1, and parity still holds)",
     ["python3 -m pytest -q -x tests/python/test_sampler_ref.py -k temperature"]),
    ("server-repeat-window-all", "src/server/request.c",
     "r->repeat_last_n = (int32_t)v;", "r->repeat_last_n = -1;",
     "the server applies the repeat penalty over the whole sequence, whatever repeat_last_n says",
     ["python3 -m pytest -q -x tests/python/test_server_api.py -k recipe_of_the_engines"]),
    ("choice-seed-by-choice", "src/server/jobs.c",
     "ls_srv_choice_seed(first->req.seed, choice % first->req.n)", "ls_srv_choice_seed(first->req.seed, choice)",
     "a prompt list's choice k gets the seed of index k, not k mod n (still reported, so it replays)",
     ["python3 -m pytest -q -x tests/python/test_server_api.py -k documented_rule"]),
    ("fingerprint-unprobed-wide", "src/server/openai.c",
     "                                                                                            : ei.kernels;",
     "                                                                                            : \"wide\";",
     "an unprobed server's fingerprint names the default family, not the one its engine runs",
     ["python3 -m pytest -q -x tests/python/test_server_api.py -k fingerprint_names"]),
    ("top-logprob-float-lz", "src/sample/sample.c",
     "e->top_lp[k] = (float)(lg[e->top_tok[k]] - lz);", "e->top_lp[k] = (float)lg[e->top_tok[k]] - (float)lz;",
     "the top log-probabilities subtract a float-rounded normalizer (a few ulp off; the token's own is exact)",
     ["python3 -m pytest -q -x tests/python/test_server_api.py -k log_softmax_exactly"]),
    ("dequant-q5_1-ulp", "src/quant/dequant.c",
     "            const int x1 = (qs[j] >> 4) | xh1;\n            y[j] = (float)x0 * d + m;",
     "            const int x1 = (qs[j] >> 4) | xh1;\n            y[j] = __builtin_nextafterf((float)x0 * d + m, 0.0f);",
     "the Q5_1 dequantization of the first half of each block is one ulp toward zero",
     ["python3 -m pytest -q -x tests/python/test_dequant.py -k Q5_1"]),
    ("router-evicts-most-recent", "src/server/router.c",
     "if (&r->m[i] != m && idle(&r->m[i]) && (!v || r->m[i].last_used < v->last_used)) v = &r->m[i];",
     "if (&r->m[i] != m && idle(&r->m[i]) && (!v || r->m[i].last_used > v->last_used)) v = &r->m[i];",
     "router mode unloads the most recently used idle model to make room, not the least",
     ["python3 -m pytest -q -x tests/python/test_server_router.py -k least_recently_used"]),
    ("grammar-draft-state-lags", "src/engine/engine.c",
     "                if (alive && s->gst && !ls_grammar_accept_token(s->gst, e->gvocab, tok)) {",
     "                if (alive && s->gst && j == 0 && !ls_grammar_accept_token(s->gst, e->gvocab, tok)) {",
     "an accepted draft token does not advance the grammar state (the next mask is a stale state's)",
     ["build/tests/test_spec test_grammar_drafts_accepted"]),
    ("mtp-module-any-target", "src/model/model.c",
     "    if (memcmp(want.ptr, m->sha256, 64) != 0)",
     "    if (memcmp(want.ptr, m->sha256, 64) != 0 && want.ptr[0] == 'x')",
     "an MTP module in its own file is attached to whatever model loads it, not only the one it was fitted to",
     ["python3 -m pytest -q -x tests/python/test_fit_mtp.py -k refused"]),
    # issue 34, the properties its first pass left without a mutant
    ("server-listener-open-at-sigterm", "src/server/server.c",
     "    if (lfd != MHD_INVALID_SOCKET) shutdown(lfd, SHUT_RDWR);", "    (void)0;",
     "after SIGTERM the quiesced listening socket stays open: a new connection waits in the backlog, not refused",
     [HOSTILE_K + "sigterm"]),
    ("embeddings-shutdown-not-503", "src/server/embeddings.c",
     "} else if (!bad && cut) {", "} else if (0) {",
     "an embeddings request cut at the end of the grace period is answered as if it had finished",
     [HOSTILE_K + "sigterm"]),
    ("server-body-no-deadline", "src/server/http.c",
     "(k->phase == SK_BODY && blimit > 0 && now - k->body_t0 > blimit);", "(0);",
     "a body trickled a byte at a time holds its connection past --body-timeout",
     [HOSTILE_K + "trickled"]),
    ("stream-client-gone-uncounted", "src/server/jobs.c",
     "if (!done || cut) ls_srv_count_cancel(j->srv, !done ? stream_cause(j->sk) : LS_CANCEL_SHUTDOWN);",
     "if (cut) ls_srv_count_cancel(j->srv, LS_CANCEL_SHUTDOWN);",
     "a stream whose client left is not counted in lockstep_requests_cancelled_total",
     [HOSTILE_K + "client_gone"]),
    ("server-head-late-uncounted", "src/server/http.c",
     "                heads += head;", "                heads += 0;",
     "a connection cut for a late request head is not counted (nor logged)",
     ["python3 -m pytest -q -x tests/python/test_server_ops.py -k slowloris"]),
    ("json-raw-nul-accepted", "src/server/request.c",
     "        if (c < 0x20) {", "        if (c < 0x20 && c != 0) {",
     "a raw NUL byte inside a JSON string is accepted (and cuts the string there)",
     [HOSTILE_K + "raw_nul"]),
    ("json-trailing-data-accepted", "src/server/request.c",
     "    if (s.i < s.n) {", "    if (0) {",
     "bytes after the body's JSON object are ignored",
     [HOSTILE_K + "trailing_data"]),
    ("json-duplicate-keys-accepted", "src/server/request.c",
     "if (dup_keys(j, path, sizeof path, err)) {", "if (0 && dup_keys(j, path, sizeof path, err)) {",
     "a key given twice in one object is accepted (cJSON keeps the first)",
     [HOSTILE_K + "trailing_data"]),
    ("message-name-accepted", "src/server/request.c",
     'static const char *const MSG[] = {"role", "content", "tool_calls", "tool_call_id", NULL},',
     'static const char *const MSG[] = {"role", "content", "tool_calls", "tool_call_id", "name", NULL},',
     "a message's name is accepted and silently dropped from the conversation",
     [HOSTILE_K + "unknown_nested"]),
    ("reply-raw-bytes", "src/server/request.c",
     "    if (!bad) return s;", "    return s;",
     "a reply or stream event carries a token's invalid UTF-8 raw (the JSON is not valid UTF-8)",
     [HOSTILE_K + "replies_are_valid_utf8"]),
    ("text-plain-accepted", "src/server/http.c",
     'bool plain = !ct || !strcasecmp(mt, "application/x-www-form-urlencoded");',
     'bool plain = !ct || !strcasecmp(mt, "application/x-www-form-urlencoded") || !strcasecmp(mt, "text/plain");',
     "a text/plain POST (a browser's preflight-free type) is read as JSON when it has no Origin",
     [HOSTILE_K + "non_browser"]),
    ("schema-last-required-optional", "src/sample/json_schema.c",
     "            if (must[k]) {", "            if (must[k] && k + 1 < n) {",
     "a schema's last property may be left out even when it is required",
     ["python3 -m pytest -q -x tests/python/test_grammar_ref.py -k missing_required"]),
    ("tools-malformed-half-parsed", "src/server/tools.c",
     "            if (!c) {\n                ok = false;\n                break;\n            }",
     "            if (!c) {\n                break;\n            }",
     "a malformed tool-call block ends the calls instead of making the whole text content (half-parsed calls)",
     ["build/tests/test_tools"]),
    ("qwen2-v-bias-dropped", "src/backend/cpu/forward.c",
     "            add_bias(f->v, L->bv, M, KV);", "            (void)0;",
     "the V projection's bias (qwen2) is left out: every parity check still holds",
     ["python3 -m pytest -q -x tests/python/test_families.py -k 'close_to_exact and qwen2'"]),
    ("embeddings-pool-skips-first", "src/server/embeddings.c",
     "for (int32_t p = 0; p < it->n; p++) acc +=", "for (int32_t p = 1; p < it->n; p++) acc +=",
     "the embedding's mean pooling leaves out the first position",
     ["python3 -m pytest -q -x tests/python/test_server_endpoints.py -k exact_float64"]),
    ("min-p-of-total", "src/sample/sample.c",
     "const float floor_p = p->min_p * prob[0];", "const float floor_p = p->min_p * total;",
     "min-p's floor is a share of the kept mass, not of the most likely token's probability",
     ["python3 -m pytest -q -x tests/python/test_sampler_ref.py -k min_p"]),
    ("bias-after-repeat-penalty", "src/sample/sample.c",
     "    for (int32_t i = 0; i < p->n_logit_bias; i++) {\n        int32_t id = p->logit_bias[i].id;\n        if (id >= 0 && id < V) mod[id] += p->logit_bias[i].bias;\n    }\n    if (!toks) return;\n    const float r = p->repeat_penalty;\n    if (r != 0.0f && r != 1.0f && p->repeat_last_n != 0) {\n        int32_t from = p->repeat_last_n < 0 || p->repeat_last_n > n_toks ? 0 : n_toks - p->repeat_last_n;\n        for (int32_t i = from; i < n_toks; i++) cnt[toks[i]] = 0;\n        for (int32_t i = from; i < n_toks; i++) {\n            int32_t t = toks[i];\n            if (cnt[t]) continue;\n            cnt[t] = 1;\n            mod[t] = mod[t] <= 0.0f ? mod[t] * r : mod[t] / r;\n        }\n    }\n",
     "    const float r = p->repeat_penalty;\n    if (toks && r != 0.0f && r != 1.0f && p->repeat_last_n != 0) {\n        int32_t from = p->repeat_last_n < 0 || p->repeat_last_n > n_toks ? 0 : n_toks - p->repeat_last_n;\n        for (int32_t i = from; i < n_toks; i++) cnt[toks[i]] = 0;\n        for (int32_t i = from; i < n_toks; i++) {\n            int32_t t = toks[i];\n            if (cnt[t]) continue;\n            cnt[t] = 1;\n            mod[t] = mod[t] <= 0.0f ? mod[t] * r : mod[t] / r;\n        }\n    }\n    for (int32_t i = 0; i < p->n_logit_bias; i++) {\n        int32_t id = p->logit_bias[i].id;\n        if (id >= 0 && id < V) mod[id] += p->logit_bias[i].bias;\n    }\n    if (!toks) return;\n",
     "the repeat penalty scales the raw logit and the bias is added after it (the recipe biases first)",
     ["python3 -m pytest -q -x tests/python/test_sampler_ref.py -k 'combined or logit_bias'"]),
    ("masked-drops-modifiers", "src/sample/sample.c",
     "        logits = mod;\n    }\n    return sample_core(p, logits, n_vocab, (uint64_t)n_toks, scratch, mask);",
     "        (void)mod;\n    }\n    return sample_core(p, logits, n_vocab, (uint64_t)n_toks, scratch, mask);",
     "under a grammar the logit bias and penalties are computed and then not used",
     ["python3 -m pytest -q -x tests/python/test_sampler_ref.py -k constrained"]),
    ("json-depth-unbounded", "src/server/request.c",
     "if (s->top >= LS_SRV_JSON_DEPTH) {", "if (0) {",
     "a request body may nest past 64 levels (the strict reader's path stack overflows; cJSON recurses 1,000 deep)",
     [HOSTILE_K + "trailing_data"]),
    ("many-choices-ignore-shutdown", "src/server/jobs.c",
     "bool cut = __atomic_load_n(&s->shutting_down, __ATOMIC_ACQUIRE);", "bool cut = false;",
     "a request with n > 1 parses every choice past the end of the grace period (its client reads an empty reply)",
     [HOSTILE_K + "sigterm_while_many_choices"]),
    ("many-choices-ignore-gone", "src/server/jobs.c",
     "if (cut || gone_before_submit(s, c, j0)) {", "if (cut) {",
     "a request with n > 1 parses every choice after its client left",
     [HOSTILE_K + "client_gone_while_many_choices"]),
    ("shutdown-no-reply-wait", "src/server/server.c",
     "            if (handling == 0 || now_ms() > replies_by) break;", "            break;",
     "at the end of the grace period MHD closes the connections while handlers still owe their 503",
     [HOSTILE_K + "sigterm_while_many_choices"]),
    ("fit-gemma-rope-base", "tools/fit_mtp.py",
     'self.rope_base, self.rope_scale = float(m["rope_base"]), float(m["rope_freq_scale"])',
     'self.rope_base, self.rope_scale = (10000.0 if m["arch"] == "gemma3" else float(m["rope_base"])), '
     'float(m["rope_freq_scale"])',
     "the fitter gives gemma3's MTP block the local layers' RoPE base (10000), not the global one lockstep uses",
     ["python3 -m pytest -q -x tests/python/test_fit_mtp.py -k gemma"]),
    ("fit-gemma-post-norms", "tools/fit_mtp.py",
     "x = x + (rmsnorm(o, self.post_attn_norm, self.eps) if self.gemma else o)", "x = x + o",
     "the fitter leaves out gemma3's post-attention norm", ["python3 -m pytest -q -x tests/python/test_fit_mtp.py -k gemma"]),
    ("mtp-head-vocab-wrong-rows", "src/model/model.c",
     "(const uint8_t *)t->data + (size_t)m->mtp_vocab[i] * rb, rb);", "(const uint8_t *)t->data + i * rb, rb);",
     "an MTP head over part of the vocabulary takes the output's first rows, not its tokens' rows",
     ["build/tests/test_spec test_mtp_head_vocab"]),
    ("mtp-head-vocab-not-spread", "src/speculative/spec.c",
     "return d->n_hv && *at >= 0 && *at < d->n_hv ? d->hv[*at] : *at;",
     "return *at;",
     "the drafter reads a partial head's logits as if they were the first tokens' (its drafts are other tokens)",
     ["build/tests/test_spec test_mtp_head_vocab"]),
    ("draft-costs-prior-only", "src/speculative/spec.c",
     "if (d->p.static_costs || m->tw <= 0.0) return;", "if (1) return;",
     "the draft-length rule ignores what drafts and verify rows are measured to cost (the fixed prior always)",
     ["build/tests/test_spec test_measured_costs"]),
    ("draft-costs-no-length-probe", "src/speculative/spec.c",
     "meter_var(&d->cm) < 0.06 &&", "meter_var(&d->cm) < 0.0 &&",
     "a drafter that always drafts the same length never varies it, so a verify row's cost is never measured",
     ["build/tests/test_spec test_measured_costs"]),
    ("mtp-head-vocab-unsorted", "src/model/model.c",
     "(i > 0 && t <= m->mtp_vocab[i - 1])", "(0)",
     "a head list that repeats or goes down is accepted",
     ["build/tests/test_spec test_mtp_head_vocab"]),
    ("fit-head-vocab-least-frequent", "tools/fit_mtp.py",
     "order = np.lexsort((np.arange(n_vocab), -counts))", "order = np.lexsort((np.arange(n_vocab), counts))",
     "the fitter's head holds the data's rarest tokens, not its most frequent",
     ["python3 -m pytest -q -x tests/python/test_fit_mtp.py -k head_vocab"]),
    # the AMX level (checked only where the CPU has AMX; bench/remote/cpu_amx.sh runs the same
    # three planted bugs on a borrowed AMX host)
    ("amx-unsigned-products", "src/kernels/cpu/matmul_avx512.c",
     '__asm__ volatile("tdpbsud %%tmm" #b', '__asm__ volatile("tdpbuud %%tmm" #b',
     "the AMX tile products read the activations as unsigned bytes", [KERNELS]),
    ("amx-nibble-shift", "src/kernels/cpu/matmul_avx512.c",
     "wb + 256 + 64 * q, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4))",
     "wb + 256 + 64 * q, _mm512_and_si512(_mm512_srli_epi16(v, 3), m4))",
     "the AMX B tile of nibble codes takes the high nibbles shifted by 3", [KERNELS]),
    ("amx-q6k-half-row", "src/kernels/cpu/matmul_avx512.c",
     "        LS_TSTORE(0, cb[0], 64);\n        LS_TSTORE(1, cb[1], 64);",
     "        LS_TSTORE(0, cb[0], 64);\n        LS_TSTORE(1, cb[1] - 1, 64);",
     "Q6_K's second-half products are stored one row early (over the first half's last row)", [KERNELS]),
]


def sh(cmd, cwd, timeout):
    # CI=true: a test that cannot find its model or reference fails instead of skipping.
    # "python3" in a command is this interpreter (make mutants: the project's test venv).
    if cmd.startswith("python3 "):
        cmd = f"{sys.executable} {cmd[len('python3 '):]}"
    env = {**os.environ, "MODEL": str(MODEL), "CI": "true"}
    t0 = time.time()
    try:
        r = subprocess.run(cmd, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        return r.returncode, time.time() - t0, (r.stdout + r.stderr)[-2000:]
    except subprocess.TimeoutExpired:
        return "timeout", time.time() - t0, ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--keep", action="store_true", help="keep the scratch tree")
    ap.add_argument("--timeout", type=int, default=900)
    args = ap.parse_args()
    todo = [m for m in MUTANTS if not args.only or m[0] in args.only.split(",")]
    scratch = Path(os.environ.get("TMPDIR", "/tmp")) / f"lockstep-mutants-{os.getpid()}"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    for f in files:
        src = ROOT / f
        if src.is_file():
            (scratch / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, scratch / f)
    if (ROOT / "build").is_dir():
        shutil.copytree(ROOT / "build", scratch / "build", symlinks=True)
    (scratch / "models").symlink_to(MODEL.parent)
    print(f"mutants: scratch tree {scratch}; building the unmutated tree first")
    rc, dt, out = sh("make -j2 all", scratch, 3600)
    if rc != 0:
        sys.exit(f"mutants: the unmutated tree does not build:\n{out}")
    for t in sorted({t for m in todo for t in m[5]}):  # every killer must pass on the unmutated tree
        rc, dt, out = sh(t, scratch, args.timeout)
        print(f"  baseline {'ok  ' if rc == 0 else 'FAIL'} {dt:6.0f} s  {t}", flush=True)
        if rc != 0:
            sys.exit(f"mutants: '{t}' fails on the unmutated tree:\n{out}")
    levels = subprocess.run([str(scratch / "build/lockstep"), "info", "--isa"], capture_output=True,
                            text=True).stdout.split()
    rows, bad = [], 0
    for mid, path, old, new, what, tests in todo:
        if NEEDS.get(mid, "scalar") not in levels:
            rows.append((mid, "NOT CHECKED", f"this CPU lacks the {NEEDS[mid]} level", 0.0))
            print(f"  {mid:<22} NOT CHECKED (this CPU lacks the {NEEDS[mid]} level)", flush=True)
            continue
        p = scratch / path
        text = p.read_text()
        if text.count(old) != 1:
            rows.append((mid, "STALE", f"the text to mutate occurs {text.count(old)} times in {path}", 0.0))
            bad += 1
            continue
        p.write_text(text.replace(old, new))
        rc, dt_b, out = sh("make -j2 all", scratch, 3600)
        if rc != 0:
            rows.append((mid, "NO BUILD", out.strip().splitlines()[-1] if out.strip() else "", dt_b))
            bad += 1
        else:
            killer, total = None, dt_b
            for t in tests:
                rc, dt_t, _ = sh(t, scratch, args.timeout)
                total += dt_t
                if rc != 0:
                    killer = f"{t} (exit {rc})"
                    break
            rows.append((mid, "killed" if killer else "SURVIVED", killer or f"passed: {'; '.join(tests)}", total))
            bad += killer is None
        p.write_text(text)
        print(f"  {rows[-1][0]:<22} {rows[-1][1]:<9} {rows[-1][3]:6.0f} s  {rows[-1][2]}", flush=True)
    sh("make -j2 all", scratch, 3600)  # leave the scratch build unmutated
    print()
    print("| mutation | what it breaks | result | caught by |")
    print("| --- | --- | --- | --- |")
    for (mid, path, old, new, what, tests), (_, res, det, _) in zip(todo, rows):
        print(f"| `{mid}` ({path}) | {what} | {res} | {det} |")
    killed = sum(r[1] == "killed" for r in rows)
    unchecked = sum(r[1] == "NOT CHECKED" for r in rows)
    print(f"\nmutants: {killed} of {len(rows) - unchecked} killed" + (f"; {unchecked} NOT CHECKED here" if unchecked else ""))
    if not args.keep:
        shutil.rmtree(scratch, ignore_errors=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
