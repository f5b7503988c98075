"""`lockstep serve`: request parameters and replayable replies, through the official
`openai` client (issue 22, part B).

- Every reply (stream and not) names its seed and a system_fingerprint (the model
  file's sha256 prefix, the recipe version, the kernel family); a request without a
  seed gets a random one, and sending that seed back gives the same bytes.
- logit_bias, frequency_penalty, presence_penalty, repeat_penalty (+ repeat_last_n) and
  min_p each change the answer, and each answer is byte-identical alone and amid a
  concurrent batch, on a plain and on a speculating (--spec ngram) server, streamed
  or not.
- echo + logprobs on /v1/completions: the prompt's log-probabilities equal, bit for
  bit, the log-softmax (ls_sample_logprobs' recipe, recomputed here) of the logits the
  engine's C API gives for the same tokens.
- A parameter the server does not implement is a 400 that names it.
"""
import concurrent.futures as cf
import hashlib
import math

import pytest

from test_server import Server

openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def servers(model_path):
    plain = Server(model_path, "--parallel", "12", "--ctx-size", "512")
    try:
        spec = Server(model_path, "--parallel", "12", "--ctx-size", "512", "--spec", "ngram", "--draft-max", "4")
    except Exception:
        plain.stop()
        raise
    yield plain, spec
    assert plain.stop() == 0, plain.logtext()
    assert spec.stop() == 0, spec.logtext()


@pytest.fixture(scope="module")
def model_sha(model_path):
    h = hashlib.sha256()
    with open(model_path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


MSG = [{"role": "user", "content": "Write two sentences about rivers."}]
REPEAT = [{"role": "user", "content": "Repeat exactly, three times: red green blue yellow, red green blue yellow."}]


def chat(srv, **kw):
    kw.setdefault("messages", MSG)
    kw.setdefault("max_tokens", 12)
    return srv.client().chat.completions.create(model="x", **kw)


def answer(r):
    return r.choices[0].message.content, r.choices[0].model_extra["token_ids"]


def streamed(srv, **kw):
    """The same request streamed: (the content, assembled from the deltas, and its finish_reason)."""
    evs = list(chat(srv, stream=True, **kw))
    text = "".join(e.choices[0].delta.content or "" for e in evs if e.choices)
    return text, [e.choices[0].finish_reason for e in evs if e.choices and e.choices[0].finish_reason][-1]


def test_seed_random_reported_and_replayable(servers, model_sha):
    plain, spec = servers
    fam = plain.health["kernels"]
    rs = [chat(plain, temperature=1.0) for _ in range(3)]
    seeds = [r.model_extra["seed"] for r in rs]
    assert len(set(seeds)) == 3 and all(isinstance(s, int) and 0 < s < 2**53 for s in seeds), seeds
    fps = {r.system_fingerprint for r in rs}
    assert fps == {f"lockstep-r1-{fam}-{model_sha[:16]}"}, fps
    texts = [answer(r) for r in rs]
    assert len({t[0] for t in texts}) >= 2, "unseeded requests at temperature 1 answered alike"
    for s, t in zip(seeds, texts):  # the seed each reply names gives its bytes again, on either server
        assert answer(chat(plain, temperature=1.0, seed=s)) == t
        assert answer(chat(spec, temperature=1.0, seed=s)) == t
    # streamed: every chunk names the same seed and fingerprint; replayed without streaming
    evs = list(chat(plain, temperature=1.0, stream=True))
    ss = {e.model_extra["seed"] for e in evs}
    assert len(ss) == 1 and {e.system_fingerprint for e in evs} == fps
    streamed = "".join(e.choices[0].delta.content or "" for e in evs if e.choices)
    assert chat(plain, temperature=1.0, seed=ss.pop()).choices[0].message.content == streamed
    # completions too; a given seed is echoed as given (negative included)
    t = plain.client().completions.create(model="x", prompt="Once upon a time", max_tokens=10, seed=-5)
    assert t.model_extra["seed"] == -5 and t.system_fingerprint in fps
    t2 = plain.client().completions.create(model="x", prompt="Once upon a time", max_tokens=10, seed=-5)
    assert t2.choices[0].text == t.choices[0].text


BASE = {"temperature": 0.9, "seed": 4242, "messages": REPEAT, "max_tokens": 20}
# Each parameter set against BASE (and greedy cases); the ids in logit_bias are found at
# run time from the baseline's own tokens (ban the first one, boost another).
PARAM_CASES = {
    "frequency_penalty": {"frequency_penalty": 1.5},
    "presence_penalty": {"presence_penalty": 1.5},
    "repeat_penalty": {"extra_body": {"repeat_penalty": 1.5, "repeat_last_n": 32}},
    "min_p": {"temperature": 1.8, "extra_body": {"min_p": 0.3}},
    "greedy_frequency": {"temperature": 0, "frequency_penalty": 1.0},
}


def _kw(case):
    kw = {**BASE, **case}
    if "extra_body" in case:
        kw["extra_body"] = dict(case["extra_body"])
    return kw


def test_sampling_params_change_output_and_keep_parity(servers, report):
    plain, spec = servers
    base = answer(chat(plain, **BASE))
    first = base[1][0]
    cases = dict(PARAM_CASES)
    cases["logit_bias_ban"] = {"logit_bias": {str(first): -100}}
    greedy = answer(chat(plain, **{**BASE, "temperature": 0}))
    cases["logit_bias_ban_greedy"] = {"temperature": 0, "logit_bias": {str(greedy[1][0]): -100}}
    # min_p's reference: the same temperature without it
    refs = {"min_p": answer(chat(plain, **{**BASE, "temperature": 1.8})), "greedy_frequency": greedy,
            "logit_bias_ban_greedy": greedy}
    got = {}
    for name, case in cases.items():
        got[(name, "plain", "alone")] = answer(chat(plain, **_kw(case)))
    others = [{"messages": [{"role": "user", "content": f"Tell me fact number {i} about the sea."}],
               "max_tokens": 6 + i % 9, "temperature": 0.7, "seed": i, "frequency_penalty": 0.3 * (i % 3)}
              for i in range(8)]
    drafted = accepted = 0
    for sname, srv in (("plain", plain), ("spec", spec)):
        if sname == "spec":
            for name, case in cases.items():
                r = chat(srv, **_kw(case))
                got[(name, sname, "alone")] = answer(r)
                drafted += r.model_extra["timings"]["draft_n"]
                accepted += r.model_extra["timings"]["draft_accepted"]
        with cf.ThreadPoolExecutor(len(cases) + len(others)) as ex:
            noise = [ex.submit(chat, srv, **o) for o in others]
            mine = {name: ex.submit(chat, srv, **_kw(case)) for name, case in cases.items()}
            for f in noise:
                f.result()
            for name, f in mine.items():
                got[(name, sname, "amid 8")] = answer(f.result())
    for (name, sname, how), v in got.items():
        assert v == got[(name, "plain", "alone")], f"{name}: {sname} {how} differs from plain alone"
    # streamed, on both servers: the deltas add up to the same text
    for name, case in cases.items():
        for sname, srv in (("plain", plain), ("spec", spec)):
            text, fin = streamed(srv, **_kw(case))
            assert text == got[(name, "plain", "alone")][0], f"{name}: {sname} streamed differs from plain alone"
            assert fin in ("stop", "length"), (name, sname, fin)
    for name in cases:
        ref = refs.get(name, base)
        assert got[(name, "plain", "alone")] != ref, f"{name} did not change the answer"
    assert first not in got[("logit_bias_ban", "plain", "alone")][1]
    assert greedy[1][0] not in got[("logit_bias_ban_greedy", "plain", "alone")][1]
    assert drafted > 0, "the spec server drafted nothing for these requests"
    report(f"server params: {len(cases)} parameter cases x alone/amid 8 x plain/spec byte-identical; "
           f"spec drafted {drafted}, accepted {accepted}")


def test_logit_bias_boost_and_penalties_act(servers):
    plain, _ = servers
    c = plain.client()
    # +100 on one token at greedy: every generated token is it
    tok = c.completions.create(model="x", prompt="The colour of the sky", max_tokens=1, temperature=0)
    other = (tok.choices[0].model_extra["token_ids"][0] + 17) % 49152
    r = c.completions.create(model="x", prompt="The colour of the sky", max_tokens=5, temperature=0,
                             logit_bias={str(other): 100})
    assert r.choices[0].model_extra["token_ids"] == [other] * 5
    # a strong frequency penalty at greedy: no token generated more than ... it repeats less
    plain_ids = answer(chat(plain, messages=REPEAT, max_tokens=32, temperature=0))[1]
    pen_ids = answer(chat(plain, messages=REPEAT, max_tokens=32, temperature=0, frequency_penalty=2.0))[1]
    rep = lambda ids: len(ids) - len(set(ids))
    assert rep(pen_ids) < rep(plain_ids), (plain_ids, pen_ids)


@pytest.mark.parametrize("body,name", [
    ({"suffix": "end"}, "suffix"),
    ({"best_of": 3}, "best_of"),
    ({"echo": True, "stream": True}, "echo"),
    ({"response_format": {"type": "xml"}}, "response_format"),
    ({"tools": [{"type": "retrieval"}]}, "tools"),  # completions: not a parameter; chat: not a function tool
    ({"tool_choice": "sometimes"}, "tool_choice"),
    ({"grammar": "root ::= \"a"}, "grammar"),
    ({"mirostat": 2}, "mirostat"),
    ({"typical_p": 0.5}, "typical_p"),
    ({"frequency_penalty": 3}, "frequency_penalty"),
    ({"presence_penalty": "a"}, "presence_penalty"),
    ({"min_p": 2}, "min_p"),
    ({"repeat_penalty": -1}, "repeat_penalty"),
    ({"logit_bias": {"abc": 1}}, "logit_bias"),
    ({"logit_bias": {"5": 101}}, "logit_bias"),
    ({"logit_bias": {"99999999": 1}}, "logit_bias"),
    ({"logit_bias": [1]}, "logit_bias"),
])
def test_refused_parameters_name_themselves(servers, body, name):
    plain, _ = servers
    for path, base in (("/v1/completions", {"prompt": "hi"}), ("/v1/chat/completions", {"messages": MSG})):
        st, out, _ = plain.post(path, {"model": "x", "max_tokens": 2, **base, **body})
        assert st == 400 and name in out["error"]["message"], (path, st, out)


def test_inert_values_of_unimplemented_parameters_are_accepted(servers):
    plain, _ = servers
    st, out, _ = plain.post("/v1/completions", {"prompt": "hi", "max_tokens": 2, "echo": False, "best_of": 1,
                                                "suffix": None, "response_format": {"type": "text"},
                                                "tool_choice": "none", "user": "u1", "logit_bias": {}})
    assert st == 200, out
    with pytest.raises(openai.BadRequestError, match="suffix"):
        plain.client().completions.create(model="x", prompt="hi", max_tokens=2, suffix="x")


def _log_softmax_like_server(row, tok, n_top=0):
    """ls_sample_logprobs' documented recipe (include/lockstep.h): the max by `>` from
    row[0], a sequential double sum of exp(l - max) (libm's exp, as the server's), each
    log-probability l - (max + log(sum)) in double rounded to float once.  Returns (the
    token's, [(id, logprob) of the n_top best: higher logit first, lower id on ties])."""
    import numpy as np
    vals = [float(x) for x in row]
    mx = vals[0]
    for v in vals[1:]:
        mx = v if v > mx else mx
    total = 0.0
    for v in vals:
        total += math.exp(v - mx)
    lz = mx + math.log(total)
    best = sorted(range(len(vals)), key=lambda i: (-vals[i], i))[:n_top]
    return float(np.float32(vals[tok] - lz)), [(i, float(np.float32(vals[i] - lz))) for i in best]


def _logprob_like_server(row, tok):
    return _log_softmax_like_server(row, tok)[0]


def test_echo_logprobs_are_the_engines_prompt_logprobs(servers, model_path):
    import ls_ffi
    plain, _ = servers
    prompt = "The quick brown fox jumps over"
    c = plain.client()
    r = c.completions.create(model="x", prompt=prompt, max_tokens=0, echo=True, logprobs=2)
    ch = r.choices[0]
    assert ch.text == prompt and r.usage.completion_tokens == 0 and ch.model_extra["token_ids"] == []
    lp = ch.logprobs
    m = ls_ffi.Model(model_path)
    try:
        toks = m.tokenize(prompt)
        eng = m.engine(n_ctx=128)
        try:
            logits = eng.score(toks)
        finally:
            eng.close()
    finally:
        m.close()
    assert len(lp.tokens) == len(toks) == r.usage.prompt_tokens
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    for i in range(1, len(toks)):
        want = _logprob_like_server(logits[i - 1], toks[i])
        assert lp.token_logprobs[i] == want, (i, lp.token_logprobs[i], want)  # exact, not a tolerance
        assert len(lp.top_logprobs[i]) == 2 and max(lp.top_logprobs[i].values()) >= lp.token_logprobs[i]
    # with a completion: the prompt first, then the generated tokens; the same scores
    g = c.completions.create(model="x", prompt=prompt, max_tokens=3, echo=True, logprobs=1, temperature=0)
    gl = g.choices[0].logprobs
    plain_text = c.completions.create(model="x", prompt=prompt, max_tokens=3, temperature=0).choices[0].text
    assert g.choices[0].text == prompt + plain_text
    assert gl.token_logprobs[:len(toks)] == lp.token_logprobs and len(gl.tokens) == len(toks) + 3
    # echo without logprobs: just the text
    e = c.completions.create(model="x", prompt=prompt, max_tokens=3, echo=True, temperature=0)
    assert e.choices[0].text == prompt + plain_text and e.choices[0].logprobs is None


def test_props_and_apply_template(servers, model_sha):
    plain, _ = servers
    st, props, _ = plain.request("GET", "/props")
    props = __import__("json").loads(props)
    assert st == 200 and props["model_sha256"] == model_sha and props["total_slots"] == 12
    assert props["n_ctx"] == 512 and props["chat_template"] and props["system_fingerprint"].endswith(model_sha[:16])
    assert props["default_generation_settings"]["params"]["repeat_last_n"] == 64
    # the rendered prompt is what the chat endpoint decodes: greedy chat == greedy completion of it
    st, out, _ = plain.post("/apply-template", {"messages": MSG})
    assert st == 200 and "Write two sentences about rivers." in out["prompt"]
    c = plain.client()
    ch = chat(plain, temperature=0)
    co = c.completions.create(model="x", prompt=out["prompt"], max_tokens=12, temperature=0)
    assert co.usage.prompt_tokens == ch.usage.prompt_tokens
    assert co.choices[0].model_extra["token_ids"] == ch.choices[0].model_extra["token_ids"]
    st, err, _ = plain.post("/apply-template", {"messages": [{"role": "robot", "content": "x"}]})
    assert st == 400 and "role" in err["error"]["message"]
    st, _, _ = plain.request("POST", "/props", b"{}")
    assert st == 405


def test_n_choices_and_prompt_lists_replay(servers):
    plain, spec = servers
    c = plain.client()
    r = chat(plain, n=3, temperature=1.0, seed=77, max_tokens=10)
    assert [ch.index for ch in r.choices] == [0, 1, 2] and r.model_extra["seed"] == 77
    seeds = [ch.model_extra["seed"] for ch in r.choices]
    assert seeds[0] == 77 and len(set(seeds)) == 3
    texts = [(ch.message.content, ch.model_extra["token_ids"]) for ch in r.choices]
    assert len({t[0] for t in texts}) >= 2, "n choices answered alike: the seed is not varied per choice"
    assert r.usage.completion_tokens == sum(len(t[1]) for t in texts)
    for s, t in zip(seeds, texts):  # each choice is the single request with its seed, on either server
        assert answer(chat(plain, temperature=1.0, seed=s, max_tokens=10)) == t
    assert [(ch.message.content, ch.model_extra["token_ids"])
            for ch in chat(spec, n=3, temperature=1.0, seed=77, max_tokens=10).choices] == texts
    # a list of prompts x n: prompt-major, each choice the single request with its prompt and seed
    prompts = ["The cat", "A dog"]
    t = c.completions.create(model="x", prompt=prompts, n=2, max_tokens=6, seed=5)
    assert [ch.index for ch in t.choices] == [0, 1, 2, 3]
    for k, ch in enumerate(t.choices):
        one = c.completions.create(model="x", prompt=prompts[k // 2], max_tokens=6, seed=ch.model_extra["seed"])
        assert one.choices[0].text == ch.text
    assert t.usage.prompt_tokens == sum(c.completions.create(model="x", prompt=p, max_tokens=1).usage.prompt_tokens
                                        for p in prompts)
    for body, name in (({"n": 17}, "n"), ({"prompt": ["a"] * 9, "n": 2}, "prompt"),
                       ({"prompt": []}, "prompt")):
        st, out, _ = plain.post("/v1/completions", {"prompt": "hi", "max_tokens": 2, **body})
        assert st == 400 and name in out["error"]["message"], (body, out)


# ---- issue 34: properties no test stated before ------------------------------------------
def _ffi_scores(model_path, toks):
    """The engine's logits (C API, one sequence) at every position of toks."""
    import ls_ffi
    m = ls_ffi.Model(model_path)
    try:
        eng = m.engine(n_ctx=256)
        try:
            return eng.score(toks)
        finally:
            eng.close()
    finally:
        m.close()


def test_reply_tokens_are_the_recipe_of_the_engines_logits(servers, model_path):
    """Each token of a server reply with every sampling parameter set is the documented
    recipe (test_sampler_ref.choose, an independent numpy reference) applied to the
    engine's logits at its position: the server passes each parameter through as given."""
    from test_sampler_ref import choose
    plain, _ = servers
    st, out, _ = plain.post("/tokenize", {"content": "Count with me: 1, 2, 3, 4, 5, 6, 7, 8, 9,", "add_special": True})
    prompt = out["tokens"]
    bias = {prompt[3]: 2.5, prompt[5]: -1.25, prompt[8]: 4.0, prompt[-1]: -3.0}
    p = {"temperature": 1.3, "top_k": 40, "top_p": 0.9, "min_p": 0.05, "logit_bias": bias, "repeat_penalty": 1.3,
         "repeat_last_n": 16, "frequency_penalty": 0.6, "presence_penalty": 0.4}
    for seed in (3, 19, 2024):
        body = {**p, "prompt": prompt, "max_tokens": 12, "ignore_eos": True, "seed": seed,
                "logit_bias": {str(k): v for k, v in bias.items()}}
        st, r, _ = plain.post("/v1/completions", body)
        assert st == 200, r
        gen = r["choices"][0]["token_ids"]
        assert len(gen) == 12
        rows = _ffi_scores(model_path, prompt + gen)
        hist = list(prompt)
        for k, tok in enumerate(gen):
            want = choose(rows[len(prompt) - 1 + k], hist, len(prompt), {**p, "seed": seed})
            assert tok == want, f"seed {seed} token {k}: the server drew {tok}, the recipe {want}"
            hist.append(tok)


def _choice_seed(seed, i):
    """docs/server.md's rule for choice i's seed (`ls_srv_choice_seed`): the request's seed
    for i = 0, else splitmix64's finalizer over seed + golden-ratio * (i + 1), 53 bits."""
    if i == 0:
        return seed
    m = (1 << 64) - 1
    z = (seed + 0x9E3779B97F4A7C15 * (i + 1)) & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return (z ^ (z >> 31)) & ((1 << 53) - 1)


def test_prompt_list_choices_follow_the_documented_rule(servers):
    """A list of prompts x n: choice k is prompt k // n with the seed of choice index k % n,
    computed here from the documented rule (not read back from the reply), and its bytes
    are those of the single request with that prompt and seed."""
    plain, _ = servers
    c = plain.client()
    prompts = ["The cat", "A dog", "Rivers are"]
    for seed in (5, 123456789):
        t = c.completions.create(model="x", prompt=prompts, n=2, max_tokens=6, seed=seed, temperature=1.0)
        assert [ch.index for ch in t.choices] == list(range(6))
        for k, ch in enumerate(t.choices):
            want_seed = _choice_seed(seed, k % 2)
            assert ch.model_extra["seed"] == want_seed, (k, ch.model_extra["seed"], want_seed)
            one = c.completions.create(model="x", prompt=prompts[k // 2], max_tokens=6, seed=want_seed,
                                       temperature=1.0)
            assert (one.choices[0].text, one.choices[0].model_extra["token_ids"]) == \
                (ch.text, ch.model_extra["token_ids"]), f"choice {k}"
        # the two seeds of one prompt differ (the rule varies the seed per choice index)
        assert t.choices[0].model_extra["seed"] != t.choices[1].model_extra["seed"]


@pytest.mark.parametrize("policy,probe", [("auto", True), ("wide", True), ("narrow", True), ("auto", False),
                                          ("narrow", False)])
def test_fingerprint_names_the_kernel_family_in_use(model_path, model_sha, policy, probe):
    """Under each --kernels policy the server accepts (`lockstep serve --help`: auto, wide,
    narrow), probed or not, system_fingerprint names the family the engine's rows that
    need parity run: the one an engine created through the C API with the same policy
    reports (ls_engine_get_info), and the one the policy documents (auto: wide)."""
    import ls_ffi
    m = ls_ffi.Model(model_path)
    try:
        e = m.engine(n_ctx=64, kernels=policy)
        try:
            engine_fam = e.info().kernels.decode()
        finally:
            e.close()
    finally:
        m.close()
    assert engine_fam == {"auto": "wide", "wide": "wide", "narrow": "narrow"}[policy]
    args = ["--parallel", "1", "--ctx-size", "128", "--kernels", policy] + ([] if probe else ["--no-probe"])
    srv = Server(model_path, *args)
    try:
        want = f"lockstep-r1-{engine_fam}-{model_sha[:16]}"
        r = srv.client().completions.create(model="x", prompt="Hi", max_tokens=2, seed=1)
        assert r.system_fingerprint == want
        st, props, _ = srv.request("GET", "/props")
        assert __import__("json").loads(props)["system_fingerprint"] == want
        if probe:
            assert srv.health["kernels"] == engine_fam
    finally:
        assert srv.stop() == 0, srv.logtext()


def test_echo_and_generated_top_logprobs_are_the_log_softmax_exactly(servers, model_path):
    """Every log-probability /v1/completions prints (echo and generated, the token's and the
    top 5, in order) is, as printed (17 digits: the float's bits), the log-softmax of the
    engine's logits by ls_sample_logprobs' documented recipe, recomputed here; the top
    tokens are the reference's ids (/completion's n_probs carries ids)."""
    plain, _ = servers
    prompt = "The quick brown fox jumps over"
    st, tk, _ = plain.post("/tokenize", {"content": prompt, "add_special": True})
    ptoks = tk["tokens"]
    body = {"prompt": prompt, "max_tokens": 6, "echo": True, "logprobs": 5, "temperature": 0.9, "seed": 31}
    st, r, _ = plain.post("/v1/completions", body)
    assert st == 200, r
    gen = r["choices"][0]["token_ids"]
    toks = ptoks + gen
    lp = r["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(toks) and lp["token_logprobs"][0] is None
    rows = _ffi_scores(model_path, toks)
    names = {}
    for i in range(1, len(toks)):
        want, top = _log_softmax_like_server(rows[i - 1], toks[i], 5)
        assert lp["token_logprobs"][i] == want, (i, lp["token_logprobs"][i], want)
        assert list(lp["top_logprobs"][i].values()) == [v for _, v in top], i
        for (tid, _), key in zip(top, lp["top_logprobs"][i]):
            if tid not in names:
                names[tid] = plain.post("/detokenize", {"tokens": [tid]})[1]["content"]
            if "\ufffd" not in names[tid]:  # a piece of a character is printed as "bytes:\x.."
                assert key == names[tid], (i, key, names[tid])
    # the generated positions once more with ids: /completion's n_probs, the same request
    st, n, _ = plain.post("/completion", {"prompt": prompt, "n_predict": 6, "n_probs": 5, "temperature": 0.9,
                                          "seed": 31, "top_k": 0, "top_p": 1.0, "min_p": 0.0})
    assert st == 200 and n["tokens"] == gen, n
    for k, e in enumerate(n["completion_probabilities"]):
        want, top = _log_softmax_like_server(rows[len(ptoks) - 1 + k], gen[k], 5)
        assert e["id"] == gen[k] and e["logprob"] == want
        assert [(t["id"], t["logprob"]) for t in e["top_logprobs"]] == top, k
