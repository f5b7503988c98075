"""The engine's replies are the sampler's recipe applied to its own logits, parameter by
parameter (issue 34): each sampled token equals the choice of an independent numpy
reference of the documented recipe, fed the raw logits the engine reports for that step.

The reference is written from the recipe's definition, not from the C code's structure:
  - docs/numerics.md ("Sampling under a grammar mask", and ls_expf under "Per-row
    operations") and docs/server.md (the logit modifiers' order and formulas);
  - the recipe block at the top of src/sample/sample.c (steps 0a-c, 1-5), and its draw
    `ls_rand_uniform(seed, pos, 0)`: splitmix64's finalizer over (seed, pos, stream)
    mixed with the documented constants, 53 bits scaled by 2^-53; pos is the position of
    the token being drawn (prompt length + tokens generated before it).
Every step is float32 as the recipe says (one rounding per operation, fma where the
recipe says fma: emulated exactly below), the draw's cumulative sum in double.

Cases: each parameter alone (temperature, top_k, top_p, min_p, logit_bias, repeat
penalty with its window, frequency, presence) and all of them combined, each over
several seeds; every case must also be one where the parameter matters: dropping it
from the reference changes at least one of the tokens chosen."""
import numpy as np
import pytest

import ls_ffi

M64 = (1 << 64) - 1


# ---- the draw: ls_rand_uniform(seed, pos, stream) ------------------------------------------
def _mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def rand_uniform(seed, pos, stream=0):
    h = _mix64((seed + 0x9E3779B97F4A7C15) & M64)
    h = _mix64(h ^ ((pos * 0xD1B54A32D192ED03 + 0x8CB92BA72F3D8DD7) & M64))
    h = _mix64(h ^ ((stream * 0xA0761D6478BD642F + 0xE7037ED1A0B428DB) & M64))
    return float(h >> 11) * 2.0 ** -53


# ---- ls_expf (docs/numerics.md), vectorized in float32 -------------------------------------
F = np.float32


def fmaf(a, b, c):
    """One rounding of a*b + c for float32 arrays.  The product is exact in double; the sum
    r is rounded to double, and rounding r to float32 is the correct result unless r is
    exactly halfway between two floats (the double rounding case).  There the true value
    is on the side of the sum's exact error e (TwoSum), so r is moved one double ulp that
    way first.  (Normal float32 results only: a midpoint is then a double whose low 29
    mantissa bits are 1 << 28.)"""
    a, b, c = (np.asarray(x, dtype=np.float64) for x in (a, b, c))
    p = a * b
    r = p + c
    mid = (r.view(np.int64) & 0x1FFFFFFF) == 0x10000000
    if mid.any():
        bp = r - c
        e = (p - bp) + (c - (r - bp))
        r = np.where(mid & (e != 0), np.nextafter(r, np.where(e > 0, np.inf, -np.inf)), r)
    return r.astype(np.float32)


def ls_expf(x):
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        n = (x * F(1.44269504) + F(12582912.0)) - F(12582912.0)
        s = fmaf(n, F(-0.693145751953125), x)
        s = fmaf(n, F(-1.428606765330187045e-06), s)
        u = np.full_like(x, F(1.98527617612853646278381e-4))
        for c in (1.39304355252534151077271e-3, 8.33336077630519866943359e-3, 4.16664853692054748535156e-2,
                  1.66666671633720397949219e-1, 0.5):
            u = fmaf(u, s, F(c))
        u = F(1.0) + fmaf(s * s, u, s)
        ni = n.astype(np.int32)
        n1 = ni >> 1
        n2 = ni - n1
        p1 = ((n1 + 127).astype(np.int64) << 23).astype(np.uint32).view(np.float32)
        p2 = ((n2 + 127).astype(np.int64) << 23).astype(np.uint32).view(np.float32)
        y = (u * p1) * p2
    y = np.where(x > F(104), F(np.inf), np.where(x < F(-104), F(0), y))
    return np.where(np.isnan(x), x + x, y).astype(np.float32)


# ---- the recipe -----------------------------------------------------------------------------
def modified(logits, hist, n_prompt, p):
    """Step 0: logit_bias, then the repeat penalty over the distinct tokens of the window,
    then frequency / presence over the generated tokens, each in float32."""
    l = logits.astype(np.float32).copy()
    for tid, b in p.get("logit_bias", {}).items():
        l[tid] = l[tid] + F(b)
    r = F(p.get("repeat_penalty", 0.0))
    last_n = p.get("repeat_last_n", 0)
    if r != 0 and r != 1 and last_n != 0:
        window = hist if last_n < 0 or last_n > len(hist) else hist[len(hist) - last_n:]
        for t in set(window):
            l[t] = l[t] * r if l[t] <= 0 else l[t] / r
    f, q = F(p.get("frequency_penalty", 0.0)), F(p.get("presence_penalty", 0.0))
    if f != 0 or q != 0:
        gen = hist[n_prompt:]
        for t in set(gen):
            l[t] = l[t] - (F(gen.count(t)) * f + q)
    return l


def choose(logits, hist, n_prompt, p, allowed=None):
    """The token the recipe draws at position len(hist) given the raw logits; with a
    grammar, allowed (a boolean per token): the modifiers act on the whole vocabulary,
    then the candidates are the allowed tokens only, in id order (docs/numerics.md,
    "Sampling under a grammar mask")."""
    l = modified(logits, hist, n_prompt, p)
    ids = np.arange(l.size) if allowed is None else np.nonzero(allowed)[0]
    T = F(p.get("temperature", 0.0))
    if T == 0:
        return int(ids[np.argmax(l[ids])])  # the first of the largest: the lowest id on ties
    order = ids[np.argsort(-l[ids], kind="stable")]  # logit descending, id ascending (stable: ids ascending)
    k = p.get("top_k", 0)
    if 0 < k < order.size:
        order = order[:k]
    cl = l[order]
    prob = ls_expf((cl - cl[0]) / T)
    cum = np.cumsum(prob, dtype=np.float32)  # sequential float32 sums in candidate order
    total = cum[-1]
    n = prob.size
    top_p = F(p.get("top_p", 1.0))
    if top_p < 1:
        target = top_p * total
        n = int(np.argmax(cum >= target)) + 1 if (cum >= target).any() else n
        total = cum[n - 1]
    min_p = F(p.get("min_p", 0.0))
    if min_p > 0:
        floor_p = min_p * prob[0]
        below = np.nonzero(prob[1:n] < floor_p)[0]
        if below.size:
            n = int(below[0]) + 1
            total = cum[n - 1]
    u = rand_uniform(p.get("seed", 0), len(hist)) * float(total)
    c64 = np.cumsum(prob[:n].astype(np.float64))
    hit = np.nonzero(c64 > u)[0]
    return int(order[hit[0]] if hit.size else order[n - 1])


# ---- the engine -----------------------------------------------------------------------------
PROMPT = "Count with me: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,"
N_GEN = 16
SEEDS = (1, 77, 4242)


@pytest.fixture(scope="module")
def eng(model_path):
    m = ls_ffi.Model(model_path)
    e = m.engine(n_ctx=256, threads=1)
    yield m, e, m.tokenize(PROMPT)
    e.close()
    m.close()


def _cases(prompt):
    # logit_bias ids: a few of the prompt's own tokens (likely candidates), moderate biases
    # so the modified logits compete with the raw ones instead of banning or forcing
    b = {prompt[3]: 2.5, prompt[5]: -1.25, prompt[8]: 4.0, prompt[-1]: -3.0}
    return {
        "temperature": ({"temperature": 0.7}, {"temperature": 1.0}),
        "top_k": ({"temperature": 1.5, "top_k": 3}, {"temperature": 1.5}),
        "top_p": ({"temperature": 1.5, "top_p": 0.6}, {"temperature": 1.5}),
        "min_p": ({"temperature": 1.5, "min_p": 0.2}, {"temperature": 1.5}),
        "logit_bias": ({"temperature": 0.8, "logit_bias": b}, {"temperature": 0.8}),
        "logit_bias_greedy": ({"logit_bias": b}, {}),
        "repeat_penalty": ({"temperature": 0.8, "repeat_penalty": 1.6, "repeat_last_n": 8},
                           {"temperature": 0.8}),
        "repeat_penalty_all": ({"temperature": 0.8, "repeat_penalty": 0.7, "repeat_last_n": -1},
                               {"temperature": 0.8}),
        "frequency_penalty": ({"temperature": 0.8, "frequency_penalty": 1.5}, {"temperature": 0.8}),
        "frequency_penalty_greedy": ({"frequency_penalty": 2.0}, {}),
        "presence_penalty": ({"temperature": 0.8, "presence_penalty": 1.7}, {"temperature": 0.8}),
        "combined": ({"temperature": 1.3, "top_k": 40, "top_p": 0.9, "min_p": 0.05, "logit_bias": b,
                      "repeat_penalty": 1.3, "repeat_last_n": 16, "frequency_penalty": 0.6,
                      "presence_penalty": 0.4}, {"temperature": 1.3}),
    }


CASES = list(_cases([0] * 10))


@pytest.mark.parametrize("case", CASES)
def test_engine_tokens_are_the_recipe_of_its_logits(eng, case):
    m, e, prompt = eng
    params, without = _cases(prompt)[case]
    changed = 0
    for seed in SEEDS if params.get("temperature") else SEEDS[:1]:  # greedy ignores the seed
        p = {**params, "seed": seed}
        toks, rows = e.generate(prompt, N_GEN, **p)
        hist = list(prompt)
        for k, (tok, row) in enumerate(zip(toks, rows)):
            want = choose(row, hist, len(prompt), p)
            assert tok == want, f"{case} seed {seed} token {k}: the engine drew {tok}, the recipe {want}"
            changed += choose(row, hist, len(prompt), {**without, "seed": seed}) != want
            hist.append(tok)
    # the case exercises its parameter: without it the recipe picks otherwise somewhere
    assert changed > 0, f"{case}: no token depends on the parameter; the case tests nothing"


def _round_f32(v):
    """The float32 nearest the Fraction v, ties to even: the independent rounding."""
    from fractions import Fraction
    lo = np.float32(float(v))
    cands = [np.nextafter(lo, F(-np.inf)), lo, np.nextafter(lo, F(np.inf))]
    return min(cands, key=lambda c: (abs(Fraction(float(c)) - v), int(np.array(c).view(np.int32)) & 1))


def test_reference_building_blocks():
    """Self-checks of the reference's parts against values known without lockstep: fmaf
    against exact rational arithmetic (random triples, and a double-rounding trap: a*b + c
    whose double sum is a float32 midpoint while the exact value is below it), ls_expf
    within its documented 1 ulp of the correctly rounded exp and its clamps, the draw in
    [0, 1) and spread."""
    from fractions import Fraction
    rng = np.random.default_rng(3)
    a, b, c = (rng.standard_normal(500).astype(np.float32) for _ in range(3))
    a = np.append(a, F(2.0 ** -12 * (1 + 2.0 ** -15)))
    b = np.append(b, F(2.0 ** -12 * (1 - 2.0 ** -15)))
    c = np.append(c, F(1 + 2.0 ** -23))
    got = fmaf(a, b, c)
    for i in range(a.size):
        want = _round_f32(Fraction(float(a[i])) * Fraction(float(b[i])) + Fraction(float(c[i])))
        assert got[i] == want, (a[i], b[i], c[i], got[i], want)
    assert got[-1] == F(1 + 2.0 ** -23)  # not 1 + 2^-22, what rounding the double sum would give
    x = np.linspace(-87, 87, 1001, dtype=np.float32)
    y = ls_expf(x)
    exact = np.exp(x.astype(np.float64)).astype(np.float32)
    ulp = np.abs(y.view(np.int32).astype(np.int64) - exact.view(np.int32).astype(np.int64))
    assert ls_expf(F(0))[()] == 1 and (ulp <= 1).all(), int(ulp.max())
    assert ls_expf(F(105))[()] == np.inf and ls_expf(F(-105))[()] == 0
    us = [rand_uniform(s, p) for s in range(20) for p in range(50)]
    assert all(0 <= v < 1 for v in us) and 0.45 < np.mean(us) < 0.55 and len(set(us)) == len(us)


# A grammar whose allowed set is computable without a grammar engine: any run of digits,
# spaces and commas.  A token is allowed when its bytes are non-empty and all in the
# class; end-of-generation tokens when the grammar is complete (always, for `*`).
DIGITS_GRAMMAR = 'root ::= [0-9 ,]*\n'


@pytest.fixture(scope="module")
def digits_allowed(eng):
    m, _, _ = eng
    ok = set(b"0123456789 ,")
    allowed = np.zeros(m.n_vocab, dtype=bool)
    for t in range(m.n_vocab):
        b = m.token_bytes(t)
        allowed[t] = m.is_eog(t) or (len(b) > 0 and set(b) <= ok)
    return allowed


@pytest.mark.parametrize("case", ["sampled", "greedy"])
def test_constrained_tokens_are_the_recipe_over_the_allowed_set(eng, digits_allowed, case):
    """Grammar mask, logit bias and penalties together: each token is the reference's
    choice among the allowed tokens after the modifiers acted on the whole vocabulary;
    the bias and penalties change the constrained answer (they are not lost under a mask)."""
    m, e, prompt = eng
    b = {prompt[5]: 3.0, prompt[8]: -2.0, prompt[6]: 1.5}  # a digit, another digit, the comma
    params = {"logit_bias": b, "repeat_penalty": 1.4, "repeat_last_n": 12, "frequency_penalty": 0.7,
              "presence_penalty": 0.5}
    if case == "sampled":
        params.update(temperature=1.1, top_k=30, top_p=0.95, min_p=0.02)
    changed = n_tok = 0
    for seed in SEEDS if case == "sampled" else SEEDS[:1]:
        p = {**params, "seed": seed}
        toks, rows = e.generate(prompt, N_GEN, grammar=DIGITS_GRAMMAR, **p)
        hist = list(prompt)
        for k, (tok, row) in enumerate(zip(toks, rows)):
            want = choose(row, hist, len(prompt), p, digits_allowed)
            assert tok == want, f"{case} seed {seed} token {k}: the engine drew {tok}, the recipe {want}"
            assert digits_allowed[tok]
            plain = {k2: v for k2, v in p.items() if k2 in ("temperature", "top_k", "top_p", "min_p", "seed")}
            changed += choose(row, hist, len(prompt), plain, digits_allowed) != want
            hist.append(tok)
            n_tok += 1
    assert n_tok >= 8 and changed > 0, (n_tok, changed)
