"""Each model family behind the architecture descriptor (src/model/arch.c), on a
synthetic file of its real block structure (synth_family.py: random weights, written
by the project's GGUF writer, a few MB):

  - lockstep's logits against an exact float64 forward pass (ref_llama.py) and against
    llama.cpp (llama-cpp-python) on the same file and token ids: lockstep is as close to
    the exact math as llama.cpp is (median and max 1-cosine within 1.5x and 2x of
    llama.cpp's), and close in absolute terms (a missing feature, e.g. a bias or a norm
    left out, or rope_freqs.weight ignored, moves the exact logits by 4e-3 to 4e-1 in
    median 1-cosine, YaRN left out 2.5e-3, gemma3's sliding window 5e-1; lockstep measured
    4e-5 to 2e-4);
  - gemma3's synthetic file has a window of 11 positions and its prompts are 41 tokens (the
    probe's and the engine test's run past the window too); qwen2_yarn is qwen2 with YaRN;
  - the parity axes on each family: the probe (`lockstep probe --no-memo`: batch mix,
    chunked prefill, prefix cache, block vs chain, threads, ISA), and the engine's
    random-case test (tests/unit/test_engine.c, memcmp of logits) run on the file;
  - `mistral` is the llama entry: the same weights under either name give the same bytes;
  - refusals: a missing family tensor or metadata key is named, exit code 2."""
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import add_report
from ls_ffi import Model
from ref_llama import RefLlama
import synth_family

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / os.environ.get("LOCKSTEP_BUILD", "build") / "lockstep"
TEST_ENGINE = ROOT / os.environ.get("LOCKSTEP_BUILD", "build") / "tests" / "test_engine"
FAMS = list(synth_family.FAMILIES)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("families")
    out = {f: synth_family.write(d / f"{f}.gguf", f) for f in FAMS}
    out["mistral_as_llama"] = synth_family.write(d / "mistral_as_llama.gguf", "mistral", arch="llama")
    return out


def cos(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def prompts(n_vocab, n=3, T=24):
    rng = np.random.default_rng(7)
    return [[1] + [int(t) for t in rng.integers(5, n_vocab, T)] for _ in range(n)]


@pytest.mark.parametrize("fam", FAMS)
def test_close_to_exact_float64(files, fam):
    """Against the exact float64 forward alone (no llama.cpp needed): a missing family feature
    moves the exact logits by 2.5e-3 or more in median 1-cosine; lockstep measured 4e-5 to 2e-4."""
    ours = Model(files[fam])
    exact = RefLlama(files["mistral_as_llama" if fam == "mistral" else fam])
    eng = ours.engine(n_ctx=64, threads=2)
    err = []
    try:
        for toks in prompts(ours.n_vocab, T=40 if fam == "gemma3" else 24):
            a, x = eng.score(toks), exact.logits(toks)
            err += [1 - cos(a[j], x[j]) for j in range(len(toks))]
    finally:
        eng.close()
        ours.close()
    add_report(f"family {fam}: 1-cosine vs exact float64 median {np.median(err):.2e} max {max(err):.2e}")
    assert np.median(err) < 1e-3 and max(err) < 1e-2, f"{fam}: far from the exact forward pass ({np.median(err):.2e})"


@pytest.mark.parametrize("fam", FAMS)
def test_as_accurate_as_llamacpp(files, fam, llama_cpp):
    path = files["mistral_as_llama" if fam == "mistral" else fam]  # llama.cpp has no "mistral" architecture
    ours = Model(files[fam])
    exact = RefLlama(path)
    ref = llama_cpp.Llama(model_path=str(path), n_ctx=64, n_batch=64, n_threads=2, logits_all=True, verbose=False,
                          type_k=0, type_v=0)
    eng = ours.engine(n_ctx=64, threads=2)
    e_ours, e_ref = [], []
    try:
        # gemma3: 40 tokens, beyond its window of 11 (a missing window moves the exact logits by far more)
        for toks in prompts(ours.n_vocab, T=40 if fam == "gemma3" else 24):
            a, x = eng.score(toks), exact.logits(toks)
            ref.reset()
            ref.eval(toks)
            b = np.array(ref.scores[: len(toks)])
            e_ours += [1 - cos(a[j], x[j]) for j in range(len(toks))]
            e_ref += [1 - cos(b[j], x[j]) for j in range(len(toks))]
    finally:
        eng.close()
        ours.close()
    mo, mr = np.median(e_ours), np.median(e_ref)
    add_report(f"family {fam}: 1-cosine vs exact float64 lockstep median {mo:.2e} max {max(e_ours):.2e}; "
               f"llama.cpp median {mr:.2e} max {max(e_ref):.2e}")
    assert mo <= 1.5 * mr and max(e_ours) <= 2.0 * max(e_ref)
    assert mo < 1e-3, f"{fam}: lockstep is far from the exact forward pass (median 1-cosine {mo:.2e})"


def test_mistral_is_the_llama_entry(files):
    a, b = Model(files["mistral"]), Model(files["mistral_as_llama"])
    try:
        ea, eb = a.engine(n_ctx=64), b.engine(n_ctx=64)
        toks = prompts(a.n_vocab, n=1)[0]
        la, lb = ea.score(toks), eb.score(toks)
        ea.close()
        eb.close()
    finally:
        a.close()
        b.close()
    assert la.tobytes() == lb.tobytes()


@pytest.mark.parametrize("fam", FAMS)
def test_probe_verifies_family(files, fam):
    r = subprocess.run([str(BIN), "probe", "--no-memo", "-m", str(files[fam])], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    for axis in ("batch_mix", "chunked_prefill", "prefix_cache", "block_vs_chain", "threads", "isa"):
        line = next((l for l in r.stdout.splitlines() if l.split()[:1] == [axis]), None)
        assert line and line.split()[1] == "ok", f"{fam}: probe axis {axis}: {line!r}\n{r.stdout}"


@pytest.mark.parametrize("hide", ["", "avxvnni"])
@pytest.mark.parametrize("fam", FAMS)
def test_engine_random_cases_on_family(files, fam, hide):
    env = dict(os.environ, MODEL=str(files[fam]), LOCKSTEP_ENGINE_CASES="2")
    env.pop("LOCKSTEP_CPU_HIDE", None)
    if hide:  # as on an AVX2-only CPU (avxvnni hides AVX-VNNI and AVX-512)
        env["LOCKSTEP_CPU_HIDE"] = hide
    r = subprocess.run([str(TEST_ENGINE)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "SKIPPED" not in r.stdout and "engine parity: 2 cases" in r.stdout, r.stdout[-2000:]


@pytest.mark.parametrize("fam,drop,needle", [
    ("qwen2", "blk.1.attn_k.bias", "missing tensor 'blk.1.attn_k.bias'"),
    ("qwen3", "blk.0.attn_q_norm.weight", "missing tensor 'blk.0.attn_q_norm.weight'"),
    ("gemma3", "blk.3.post_ffw_norm.weight", "missing tensor 'blk.3.post_ffw_norm.weight'"),
])
def test_missing_family_tensor_is_named(tmp_path, fam, drop, needle):
    p = synth_family.write(tmp_path / f"{fam}.gguf", fam, drop=(drop,))
    r = subprocess.run([str(BIN), "run", "-m", str(p), "-p", "a", "-n", "1"], capture_output=True, text=True)
    assert r.returncode == 2 and needle in r.stderr, r.stderr
    r = subprocess.run([str(BIN), "info", "-m", str(p)], capture_output=True, text=True)
    assert r.returncode == 2 and needle in r.stderr, r.stderr


@pytest.mark.parametrize("fam,extra,needle", [
    ("qwen2", {"rope.scaling.type": "longrope"}, "rope scaling type 'longrope' is not supported (none, linear, yarn)"),
    ("qwen2_yarn", {"rope.scaling.yarn_log_multiplier": 0.1},
     "'qwen2.rope.scaling.yarn_log_multiplier' (YaRN variant) is not supported"),
    ("qwen2", {"rope.scaling.type": "yarn", "rope.scaling.factor": -2.0}, "rope.scaling.factor -2 is invalid"),
])
def test_rope_scaling_refusals_are_named(tmp_path, fam, extra, needle):
    p = synth_family.write(tmp_path / "x.gguf", fam, extra=extra)
    r = subprocess.run([str(BIN), "info", "-m", str(p)], capture_output=True, text=True)
    assert r.returncode == 2 and needle in r.stderr, r.stderr


def test_unknown_architecture_is_named(tmp_path):
    p = synth_family.write(tmp_path / "x.gguf", "mistral", arch="falcon")
    r = subprocess.run([str(BIN), "run", "-m", str(p), "-p", "a", "-n", "1"], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert "unsupported architecture 'falcon'" in r.stderr and "qwen3" in r.stderr and "gemma3" in r.stderr


def test_info_names_family_and_types(files):
    r = subprocess.run([str(BIN), "info", "-m", str(files["gemma3"])], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "family:        gemma3" in r.stdout, r.stdout
    for t in ("Q8_0", "Q5_0", "Q4_0", "F16", "F32"):
        assert t in r.stdout.split("types:")[1].splitlines()[0], r.stdout


# ---- the real Gemma 3 file (`make model MODEL=gemma3`; CI does not fetch it) -------
GEMMA = Path(os.environ.get("GEMMA_MODEL", ROOT / "models" / "gemma-3-270m-q4_k_m.gguf"))
# google/gemma-3-270m is the pretrained (not instruction-tuned) model: plain text
# continuations are what it does sensibly; one chat-formatted prompt is scored too.
GEMMA_PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "The three laws of thermodynamics are:\n1.",
    "<start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n",
]


@pytest.fixture(scope="module")
def gemma(request):
    from conftest import OPTIONAL

    if not GEMMA.exists():
        pytest.skip(f"Gemma 3 file {GEMMA} missing (make model MODEL=gemma3) {OPTIONAL}")
    llama_cpp = request.getfixturevalue("llama_cpp")
    ours = Model(GEMMA)
    ref = llama_cpp.Llama(model_path=str(GEMMA), n_ctx=256, n_batch=256, n_threads=2, logits_all=True,
                          verbose=False, type_k=0, type_v=0)
    exact = RefLlama(GEMMA)
    eng = ours.engine(n_ctx=256, threads=2)
    rows = []
    try:
        for p in GEMMA_PROMPTS:
            toks = ours.tokenize(p)
            last, greedy = eng.greedy(toks, 24)
            ref.reset()
            ref.eval(toks)
            rows.append(dict(toks=toks, ref_toks=ref.tokenize(p.encode(), add_bos=True, special=True), ours=last,
                             l32=np.array(ref.scores[len(toks) - 1]), exact=exact.logits(toks)[-1],
                             text=ref.detokenize(greedy).decode(errors="replace")))
    finally:
        eng.close()
        ours.close()
    for i, x in enumerate(rows):
        add_report(f"gemma3 270M prompt {i}: 1-cos vs exact lockstep {1 - cos(x['ours'], x['exact']):.2e} llama.cpp "
                   f"{1 - cos(x['l32'], x['exact']):.2e}; cos(lockstep, llama.cpp) {cos(x['ours'], x['l32']):.6f}; "
                   f"greedy: {x['text'][:60]!r}")
    return rows


def test_gemma_tokenizes_like_llamacpp(gemma):
    assert [x["toks"] for x in gemma] == [x["ref_toks"] for x in gemma]


def test_gemma_as_accurate_as_llamacpp(gemma):
    e_ours = np.array([1 - cos(x["ours"], x["exact"]) for x in gemma])
    e_ref = np.array([1 - cos(x["l32"], x["exact"]) for x in gemma])
    assert np.median(e_ours) <= 1.5 * np.median(e_ref) and e_ours.max() <= 2.0 * e_ref.max(), (e_ours, e_ref)
    agree = sum(int(np.argmax(x["ours"])) == int(np.argmax(x["l32"])) for x in gemma)
    assert agree >= len(gemma) - 1, f"top-1 agrees with llama.cpp on {agree}/{len(gemma)}"


def test_gemma_greedy_text_is_sensible(gemma):
    # Measured: ' the capital of the country of France. It is the largest city in France ...',
    # '    elif n == 1:\n        return 1\n ...', ' The first law of thermodynamics states ...'
    # (llama.cpp's own greedy text on this file reads the same way).
    assert "France" in gemma[0]["text"] and "city" in gemma[0]["text"], gemma[0]["text"]
    assert "return" in gemma[1]["text"] and "elif" in gemma[1]["text"], gemma[1]["text"]
    assert "law" in gemma[2]["text"], gemma[2]["text"]


def test_gemma_beyond_the_window(request):
    """A prompt of 941 tokens, past Gemma 3 270M's 512-position window: the last position
    against llama.cpp and the exact float64 pass (whose window is shown to matter here)."""
    from conftest import OPTIONAL

    if not GEMMA.exists():
        pytest.skip(f"Gemma 3 file {GEMMA} missing (make model MODEL=gemma3) {OPTIONAL}")
    llama_cpp = request.getfixturevalue("llama_cpp")
    text = "".join(f"Line {i}: the quick brown fox jumps over the lazy dog.\n" for i in range(1, 60)) + "Line 60:"
    ours = Model(GEMMA)
    eng = ours.engine(n_ctx=1024, threads=2)
    try:
        toks = ours.tokenize(text)
        last, greedy = eng.greedy(toks, 12)
    finally:
        eng.close()
        ours.close()
    assert 600 < len(toks) < 1000, len(toks)  # 941
    ref = llama_cpp.Llama(model_path=str(GEMMA), n_ctx=1024, n_batch=512, n_threads=2, logits_all=True,
                          verbose=False, type_k=0, type_v=0)
    ref.eval(toks)
    l32 = np.array(ref.scores[len(toks) - 1])
    text_ours = ref.detokenize(greedy).decode(errors="replace")
    del ref
    exact = RefLlama(GEMMA)
    x = exact.logits(toks, last_only=True)[0]
    exact.window = 0
    x_full = exact.logits(toks, last_only=True)[0]
    e_ours, e_ref, e_full = 1 - cos(last, x), 1 - cos(l32, x), 1 - cos(x_full, x)
    add_report(f"gemma3 270M {len(toks)} tokens: 1-cos vs exact lockstep {e_ours:.2e} llama.cpp {e_ref:.2e} "
               f"(exact without the window: {e_full:.2e}); greedy {text_ours!r}")
    assert e_full > 20 * max(e_ours, 1e-5), "the window does not matter at this length: the test shows nothing"
    assert e_ours <= 2.0 * e_ref or e_ours < 1e-4, (e_ours, e_ref)
    assert int(np.argmax(last)) == int(np.argmax(l32))
    assert text_ours.startswith(" the quick brown fox"), text_ours


# ---- chat templates detected from tokenizer.chat_template, rendered as jinja2 does --
@pytest.mark.parametrize("fam,family", [("qwen2", "chatml"), ("qwen3", "qwen3"), ("gemma3", "gemma")])
def test_family_template_detected(files, fam, family):
    m = Model(files[fam])
    try:
        assert m.info.chat_template.decode() == family
    finally:
        m.close()


# The published templates (tests/python/data: Qwen 2.5 7B Instruct's, Qwen 3 0.6B's (the Qwen 3
# family's), Gemma 3's; the Qwen ones as llama.cpp's models/templates holds them).
@pytest.mark.parametrize("name", ["qwen2.5.jinja", "qwen3.jinja", "gemma3.jinja"])
def test_family_template_matches_jinja(lib, name):
    from test_tokenizer import CONVERSATIONS, _jinja_render, _ours_render

    src = (Path(__file__).parent / "data" / name).read_text()
    for conv in CONVERSATIONS[1:]:
        if name.startswith("gemma") and conv[0]["role"] == "assistant":
            continue  # Gemma's template raises on a conversation that does not start with the user
        for gen in (False, True):
            _, got = _ours_render(lib, src, conv, gen)
            assert got == _jinja_render(src, conv, gen), (conv, gen)


# Where Qwen 3's template is not ChatML (lockstep's "qwen3" family renders it): an assistant
# turn after the last user query gets a think block when it is the last message or has
# reasoning (an empty one, "<think>\n\n</think>\n\n", when it has none), and earlier assistant
# turns lose their "<think>...</think>" part.  Each conversation, with and without the
# generation prompt, is compared byte for byte with jinja2's render.
_THINK = "<think>\nhmm, a greeting\n</think>\n\n"
QWEN3_THINK_CONVERSATIONS = [
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nHello"},
     {"role": "user", "content": "again"}],
    # a system message; several assistant turns with and without think blocks, before the last query
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": _THINK + "Hello"}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "and 3+3?"},
     {"role": "assistant", "content": "<think>\n3+3 is 6\n</think>\n\n6"}, {"role": "user", "content": "thanks"}],
    # ending on an assistant turn that has a think block (written in the template's own layout)
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "<think>2+2 is 4</think>4"}],
    # assistant turns after the last query: one without reasoning (plain), one with, the last without
    [{"role": "user", "content": "Count"}, {"role": "assistant", "content": "one"},
     {"role": "assistant", "content": "<think>two?</think>two"}, {"role": "assistant", "content": "three"}],
    # odd think markup: several blocks, no <think> opener, stray newlines
    [{"role": "user", "content": "a"},
     {"role": "assistant", "content": "x<think>\n\n r1 \n</think>\n\nmid</think>\n\n\nend\n"},
     {"role": "user", "content": "b"}, {"role": "assistant", "content": "\n\nno opener</think>tail"},
     {"role": "assistant", "content": "\n\nplain\n"}],
    # a user turn that is a tool result is not the last query
    [{"role": "user", "content": "weather?"}, {"role": "assistant", "content": _THINK + "calling"},
     {"role": "user", "content": "<tool_response>\nsunny\n</tool_response>"},
     {"role": "assistant", "content": "It is sunny."}],
    # no user turn at all, a system message after the first turn
    [{"role": "assistant", "content": _THINK + "I start."}, {"role": "system", "content": "late system"}],
]

# plain ChatML, to show each think conversation renders differently from it
_CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
           "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


@pytest.mark.parametrize("gen", [False, True])
@pytest.mark.parametrize("conv", range(len(QWEN3_THINK_CONVERSATIONS)))
def test_qwen3_think_blocks_match_jinja(lib, conv, gen):
    from test_tokenizer import _jinja_render, _ours_render

    src = (Path(__file__).parent / "data" / "qwen3.jinja").read_text()
    c = QWEN3_THINK_CONVERSATIONS[conv]
    family, got = _ours_render(lib, src, c, gen)
    assert family == 8  # LS_CHAT_QWEN3
    assert got == _jinja_render(src, c, gen), (c, gen)
    assert got != _ours_render(lib, _CHATML, c, gen)[1]


# enable_thinking: jinja's render with no variable (above) writes no think block into the
# generation prompt; false writes an empty one; true writes none.
@pytest.mark.parametrize("enable", [False, True])
def test_qwen3_enable_thinking_matches_jinja(lib, enable):
    from test_tokenizer import _jinja_render, _ours_render

    src = (Path(__file__).parent / "data" / "qwen3.jinja").read_text()
    for c in QWEN3_THINK_CONVERSATIONS:
        for gen in (False, True):
            _, got = _ours_render(lib, src, c, gen, enable_thinking=int(enable))
            assert got == _jinja_render(src, c, gen, enable_thinking=enable), (c, gen)
    _, got = _ours_render(lib, src, QWEN3_THINK_CONVERSATIONS[0], True, enable_thinking=int(enable))
    assert got.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n") != enable


# Qwen 3-like templates that do not render as Qwen 3's stay ChatML: a "Thinking" one whose
# generation prompt opens <think>, one without the enable_thinking switch, one without the
# last-query logic.
def test_qwen3_variants_stay_chatml(lib):
    from test_tokenizer import _ours_render

    src = (Path(__file__).parent / "data" / "qwen3.jinja").read_text()
    thinking = src.replace("{{- '<|im_start|>assistant\\n' }}", "{{- '<|im_start|>assistant\\n<think>\\n' }}")
    no_switch = src[:src.index("    {%- if enable_thinking")] + "{%- endif %}"
    no_query = src.replace("last_query_index", "last_query")
    assert len({src, thinking, no_switch, no_query}) == 4
    for s in (thinking, no_switch, no_query):
        assert _ours_render(lib, s, [{"role": "user", "content": "x"}], True)[0] == 1  # LS_CHAT_CHATML
