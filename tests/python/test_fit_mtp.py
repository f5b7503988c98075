"""tools/fit_mtp.py and MTP modules in their own files: a tiny fit (a few steps on a few
hundred tokens) gives a module lockstep loads and runs (`--spec mtp --draft-model`), whose
forward lockstep computes as the fit does (the fit's own check: top tokens agree), and a
module is refused, with a message naming both files, for a model it was not fitted to.
The same for gemma3, on a synthetic Gemma 3 file (tests/python/synth_family.py: its
block structure, random weights, a sliding window of 11 positions shorter than the
sequences): the fit's block must be lockstep's (q/k norms, post-norms, GeGLU, the module's
global RoPE base and no window), else the check's agreement falls.

The fitter runs on PyTorch under /usr/bin/python3 (Debian's python3-torch;
scripts/install-deps.sh --test installs it), not in the test venv."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / os.environ.get("LOCKSTEP_BUILD", "build") / "lockstep"
FIT = ROOT / "tools" / "fit_mtp.py"
TORCH_PY = os.environ.get("LOCKSTEP_TORCH_PYTHON", "/usr/bin/python3")


def _has_torch() -> bool:
    try:
        return subprocess.run([TORCH_PY, "-c", "import torch, numpy"], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="module")
def tiny_module(tmp_path_factory, model_path):
    if not _has_torch():
        pytest.skip(f"{TORCH_PY} has no torch (scripts/install-deps.sh --test installs python3-torch)")
    d = tmp_path_factory.mktemp("fit")
    prompts = d / "prompts.txt"
    prompts.write_text("Write a limerick about a cat.\nWhat is the tallest mountain?\nName three colours.\n")
    out = d / "tiny.mtp.gguf"
    log = d / "fit.json"
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    r = subprocess.run([TORCH_PY, str(FIT), "-m", str(model_path), "-o", str(out), "--lockstep", str(BIN),
                        "--prompts", str(prompts), "--n-predict", "48", "--steps", "3", "--batch-rows", "96",
                        "--val-frac", "0.34", "--eval-every", "100", "--check-prompts", str(prompts),
                        "--check-max-prompts", "1", "--log", str(log)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return out, json.loads(log.read_text())


def _fit(d, model, prompts, *extra):
    out, log = d / "tiny.mtp.gguf", d / "fit.json"
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    r = subprocess.run([TORCH_PY, str(FIT), "-m", str(model), "-o", str(out), "--lockstep", str(BIN),
                        "--prompts", str(prompts), "--check-prompts", str(prompts), "--log", str(log), *extra],
                       capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return out, json.loads(log.read_text())


@pytest.fixture(scope="module")
def tiny_gemma_module(tmp_path_factory):
    if not _has_torch():
        pytest.skip(f"{TORCH_PY} has no torch (scripts/install-deps.sh --test installs python3-torch)")
    sys.path.insert(0, str(Path(__file__).parent))
    import synth_family

    d = tmp_path_factory.mktemp("fit_gemma")
    model = synth_family.write(d / "gemma3.gguf", "gemma3")
    prompts = d / "prompts.txt"  # raw text (a pretrained model), 20-40 tokens each before the answer
    prompts.write_text("The history of the printing press begins with\ndef count(xs):\n"
                       "Three colours: red, blue and\nA quick brown fox\n")
    out, rec = _fit(d, model, prompts, "--raw", "--n-predict", "40", "--steps", "4", "--batch-rows", "96",
                    "--val-frac", "0.25", "--eval-every", "100", "--check-max-prompts", "4", "--head-vocab", "600")
    return model, out, rec


def test_tiny_gemma3_fit_is_the_function_lockstep_computes(tiny_gemma_module):
    model, out, rec = tiny_gemma_module
    assert rec["steps"] == 4 and rec["tokens"] > 200 and rec["raw"]
    # a wrong detail of the block (the module's RoPE base, a norm, the activation, the
    # window) takes this under 0.9 (docs/mtp.md; scripts/mutants.py fit-gemma-*)
    assert rec["check"]["rows"] > 200 and rec["check"]["lockstep_vs_torch_top1"] >= 0.97, rec["check"]
    # with lockstep's int8 activations in the fit's forward too, only rounding is left
    assert rec["check"]["lockstep_vs_torch_int8_top1"] >= 0.99, rec["check"]
    assert_drafts_keep_plain_text(model, out, "-p", "The history of", "-n", "24")
    # the head over the data's 600 most frequent tokens (the check compares the best of those)
    assert rec["head_vocab"]["tokens"] == 600 and 0.5 < rec["head_vocab"]["data_coverage"] <= 1.0, rec
    assert _head_vocab(out) is not None and len(_head_vocab(out)) == 600


def run_cli(*args, timeout=300):
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def assert_drafts_keep_plain_text(model, module, *prompt):
    """`run --spec mtp` with the module drafts (alone: no prompt lookup first), and answers with
    plain decoding's text (T = 0)."""
    common = ("run", "-m", str(model), *prompt, "--temp", "0", "--json", "--no-probe")
    r = run_cli(*common, "--spec", "mtp", "--draft-model", str(module), "--draft-lookup", "0")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["spec"] == "mtp" and j["draft_n"] > 0
    plain = run_cli(*common)
    assert plain.returncode == 0, plain.stderr
    assert json.loads(plain.stdout)["text"] == j["text"]


def test_tiny_fit_makes_a_module_lockstep_runs(tiny_module, model_path):
    out, rec = tiny_module
    assert out.stat().st_size < 16 << 20
    assert rec["steps"] == 3 and rec["tokens"] > 100
    # lockstep's forward of the written module is the fit's function (near-ties aside: an
    # untrained module has many)
    assert rec["check"]["lockstep_vs_torch_top1"] >= 0.8, rec["check"]
    assert_drafts_keep_plain_text(model_path, out, "--chat", "Name a colour.", "-n", "16")


def test_module_for_another_model_is_refused(tiny_module, model_path, tmp_path):
    out, rec = tiny_module
    data = out.read_bytes()
    sha = rec["model_sha256"].encode()
    assert data.count(sha) >= 1  # the key, and the fit record that names it too
    other = tmp_path / "other.mtp.gguf"
    other.write_bytes(data.replace(sha, b"0" * 64))
    r = run_cli("run", "-m", str(model_path), "-p", "hi", "-n", "2", "--spec", "mtp", "--draft-model", str(other))
    assert r.returncode == 2
    assert "fitted to another model" in r.stderr and str(other) in r.stderr and str(model_path) in r.stderr, r.stderr
    gemma = ROOT / "models" / "gemma-3-270m-q4_k_m.gguf"
    if gemma.exists():
        r = run_cli("run", "-m", str(gemma), "-p", "hi", "-n", "2", "--spec", "mtp", "--draft-model", str(out))
        assert r.returncode == 2 and "architecture 'llama'" in r.stderr, r.stderr
    r = run_cli("run", "-m", str(model_path), "-p", "hi", "-n", "2", "--spec", "mtp")
    assert r.returncode == 2 and "--draft-model" in r.stderr, r.stderr


def _gguf_layout(path):
    """(lockstep.mtp.head_vocab or None, the data section's bytes) of a module file."""
    from gguf import GGUFReader

    r = GGUFReader(str(path))
    f = r.fields.get("lockstep.mtp.head_vocab")
    hv = [int(f.parts[i][0]) for i in f.data] if f is not None else None
    return hv, Path(path).read_bytes()[r.data_offset:]


def _head_vocab(path):
    return _gguf_layout(path)[0]


def test_head_vocab_only_copies_the_module_and_drafts_stay_in_it(tiny_module, model_path, tmp_path):
    """--head-vocab-only: the module's bytes with lockstep.mtp.head_vocab added (or
    replaced); lockstep's module top tokens (`mtp-data --module`) are all among those
    tokens, and answers stay plain decoding's."""
    out, rec = tiny_module
    data = str(out) + ".data"
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    hv1, hv2 = tmp_path / "hv1.mtp.gguf", tmp_path / "hv2.mtp.gguf"
    for src, dst, n in ((out, hv1, 300), (hv1, hv2, 200)):  # the second replaces the first's list
        r = subprocess.run([TORCH_PY, str(FIT), "-m", str(model_path), "--init", str(src), "--data", data,
                            "--head-vocab", str(n), "--head-vocab-only", "-o", str(dst)],
                           capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
        assert r.returncode == 0, r.stderr[-3000:]
    ids = _head_vocab(hv2)
    assert ids is not None and len(ids) == 200 and ids == sorted(set(ids)) and _head_vocab(out) is None
    assert hv2.read_bytes().count(b"lockstep.mtp.head_vocab") == 1
    tokens = [int(t) for t in __import__("numpy").fromfile(os.path.join(data, "tokens.i32"), dtype="<i4")]
    counts = {}
    for t in tokens:
        counts[t] = counts.get(t, 0) + 1
    top = sorted(counts, key=lambda t: (-counts[t], t))[:200]  # the 200 most frequent, ties to the lower id
    assert set(top) <= set(ids), "the head holds the data's most frequent tokens"
    # every tensor byte as it was: the data sections are equal
    assert _gguf_layout(out)[1] == _gguf_layout(hv2)[1] and len(_gguf_layout(out)[1]) > 1 << 20
    d = tmp_path / "check"
    r = run_cli("mtp-data", "-m", str(model_path), "--module", str(hv2), "--prompts", str(ROOT / "tools" / "mtp_prompts_heldout.txt"),
                "--out", str(d), "--max-prompts", "1", "-n", "24", "--temp", "0.8", "--seed", "3")
    assert r.returncode == 0, r.stderr
    top1 = __import__("numpy").fromfile(d / "mtp_top1.i32", dtype="<i4")
    assert len(top1) > 20 and set(int(t) for t in top1) <= set(ids)
    assert_drafts_keep_plain_text(model_path, hv2, "--chat", "Name a colour.", "-n", "16")
