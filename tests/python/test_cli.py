"""The lockstep CLI: flags, errors (exit code 2 with a clear message), JSON output,
and `info --json` checked against the gguf package's reading of the same file."""
import json
import os
import subprocess

import pytest

from ls_ffi import ROOT, model_path

BIN = ROOT / os.environ.get("LOCKSTEP_BUILD", "build") / "lockstep"
# The same CLI with test-only parity faults (LOCKSTEP_FAULT; build/lockstep has none)
BIN_FAULTS = ROOT / os.environ.get("LOCKSTEP_BUILD", "build") / "lockstep-faults"
BENCH = ROOT / os.environ.get("LOCKSTEP_BUILD", "build") / "lockstep-bench"


def run(*args, timeout=300):
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


@pytest.fixture(scope="module")
def model():
    p = model_path()
    if not p.exists():
        pytest.skip(f"model {p} missing (make model)")
    return str(p)


@pytest.mark.parametrize("cmd", [[], ["run"], ["info"], ["tokenize"]])
def test_help(cmd):
    r = run(*cmd, "--help")
    assert r.returncode == 0, r.stderr
    assert "usage: lockstep" in r.stdout


@pytest.mark.parametrize(
    "args,needle",
    [
        (["frobnicate"], "unknown command 'frobnicate'"),
        (["run", "--bogus"], "unknown flag '--bogus'"),
        (["run", "-p", "hi", "--temp", "abc"], "invalid value 'abc' for --temp"),
        (["run", "-p", "hi", "--temp", "-1"], "invalid value '-1' for --temp"),
        (["run", "-p", "hi", "--top-p", "1.5"], "invalid value '1.5' for --top-p"),
        (["run", "-p", "hi", "-t", "0"], "invalid value '0' for --threads"),
        (["run", "-p", "hi", "-n", "12x"], "invalid value '12x' for --n-predict"),
        (["run", "-p", "hi", "--seed", "-3"], "invalid value '-3' for --seed"),
        (["run"], "give exactly one of -p PROMPT or --chat MESSAGE"),
        (["run", "-p", "a", "--chat", "b"], "give exactly one of -p PROMPT or --chat MESSAGE"),
        (["run", "-p", "a", "--system", "s"], "--system needs --chat"),
        (["run", "-m", "/nonexistent/x.gguf", "-p", "hi"], "cannot read model file '/nonexistent/x.gguf'"),
        (["info", "-m", "/nonexistent/x.gguf"], "cannot read model file"),
        (["tokenize"], "give exactly one TEXT argument"),
        (["run", "-p"], "flag -p needs a value"),
        (["run", "-p", "hi", "--spec", "ngram", "--draft-lookup", "2"], "--draft-lookup applies to --spec mtp"),
        (["run", "-p", "hi", "--spec", "layerskip", "--draft-lookup", "5"], "--draft-lookup 5 exceeds --ngram-max 4"),
        (["run", "-p", "hi", "--spec", "layerskip", "--draft-lookup", "x"], "invalid value 'x' for --draft-lookup"),
        (["serve", "--spec", "off", "--draft-lookup", "2"], "--draft-lookup applies to --spec mtp"),
    ],
)
def test_bad_flags_exit_2(args, needle):
    r = run(*args)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert needle in r.stderr, r.stderr


def test_not_a_gguf_file(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"NOPE" + b"\0" * 60)
    r = run("run", "-m", str(bad), "-p", "hi")
    assert r.returncode == 2
    assert "bad magic" in r.stderr and str(bad) in r.stderr, r.stderr


def test_prompt_longer_than_context(model):
    r = run("run", "-m", model, "-c", "16", "-p", "one two three four five six seven eight nine ten " * 3)
    assert r.returncode == 2, r.stderr
    assert "context holds 16" in r.stderr, r.stderr


def test_bad_chat_template_override(model):
    r = run("run", "-m", model, "--chat", "hi", "--chat-template", "nosuch")
    assert r.returncode == 2
    assert "nosuch" in r.stderr and "chatml" in r.stderr, r.stderr


def test_run_json_schema(model):
    r = run("run", "-m", model, "--chat", "Say hello.", "-n", "8", "--temp", "0", "--json")
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stdout.splitlines() if l.strip()]
    assert len(lines) == 1, r.stdout
    o = json.loads(lines[0])
    for k in ("text", "tokens", "n_prompt", "n_gen", "prefill_ms", "decode_ms", "decode_tok_s", "finish_reason"):
        assert k in o, k
    assert o["n_gen"] == len(o["tokens"]) and 1 <= o["n_gen"] <= 8
    assert o["finish_reason"] in ("stop", "length")
    assert o["parity"] == "verified"
    assert o["n_prompt"] > 5


def test_run_is_reproducible_with_seed(model):
    a = run("run", "-m", model, "-p", "Once upon a time", "-n", "16", "--temp", "0.9", "--seed", "7", "--json", "--no-probe")
    b = run("run", "-m", model, "-p", "Once upon a time", "-n", "16", "--temp", "0.9", "--seed", "7", "--json", "--no-probe", "-t", "1")
    c = run("run", "-m", model, "-p", "Once upon a time", "-n", "16", "--temp", "0.9", "--seed", "8", "--json", "--no-probe")
    ta, tb, tc = (json.loads(x.stdout)["tokens"] for x in (a, b, c))
    assert ta == tb
    assert ta != tc  # a different seed draws differently (16 tokens at T=0.9)


def test_run_streams_text_and_summary(model):
    r = run("run", "-m", model, "--chat", "What is 2+2?", "-n", "16", "--temp", "0")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
    assert "decode" in r.stderr and "tok/s" in r.stderr and "prefill" in r.stderr
    assert "parity: verified" in r.stderr


def test_hugepages_env(model):
    """LOCKSTEP_HUGEPAGES picks the weights' page size (on, off, auto): the same tokens each
    way; any other value is refused at the first run, naming the variable."""
    argv = [str(BIN), "run", "-m", model, "-p", "The capital of France is", "-n", "8", "--temp", "0", "--json",
            "--no-probe"]
    toks = []
    for v in ("on", "off", "auto"):
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT,
                           env={**os.environ, "LOCKSTEP_HUGEPAGES": v})
        assert r.returncode == 0, r.stderr
        toks.append(json.loads(r.stdout)["tokens"])
    assert toks[0] == toks[1] == toks[2] and len(toks[0]) == 8
    bad = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env={**os.environ, "LOCKSTEP_HUGEPAGES": "2m"})
    assert bad.returncode == 2 and "LOCKSTEP_HUGEPAGES='2m': expected on, off or auto" in bad.stderr, bad.stderr


@pytest.mark.parametrize("hide", ["amx", "avx512", "avxvnni", "avx2"])
def test_run_on_older_cpus(model, hide):
    """As on a CPU without AMX (without AVX-512 and AMX; without AVX-VNNI and up; without
    AVX2 and up): the same tokens, the probe verifies the ISAs left, and the kernels picked
    are the best ones left (AVX-VNNI, where this CPU has it, once AVX-512 is hidden)."""
    has = subprocess.run([str(BIN), "info", "--isa"], capture_output=True, text=True, timeout=60,
                         cwd=ROOT).stdout.split()
    base = run("run", "-m", model, "--chat", "What is 2+2?", "-n", "12", "--temp", "0", "--json")
    env = {**os.environ, "LOCKSTEP_CPU_HIDE": hide}
    r = subprocess.run([str(BIN), "run", "-m", model, "--chat", "What is 2+2?", "-n", "12", "--temp", "0", "--json"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr
    o, b = json.loads(r.stdout), json.loads(base.stdout)
    order = ["scalar", "avx2", "avxvnni", "avx512", "amx"]  # a level hidden hides the ones above it
    left = [i for i in order[:order.index(hide)] if i in has]
    assert subprocess.run([str(BIN), "info", "--isa"], capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env=env).stdout.split() == left
    assert o["isa"] == left[-1]
    assert o["parity"] == "verified"
    assert o["tokens"] == b["tokens"]
    name = {"amx": "AMX", "avx512": "AVX-512", "avxvnni": "AVX-VNNI", "avx2": "AVX2"}[hide]
    forced = subprocess.run([str(BIN), "run", "-m", model, "-p", "x", "-n", "1"], capture_output=True, text=True,
                            timeout=60, cwd=ROOT, env={**env, "LOCKSTEP_ISA": hide})
    assert forced.returncode == 2 and f"LOCKSTEP_ISA={hide} but this CPU lacks {name}" in forced.stderr
    bad = subprocess.run([str(BIN), "run", "-m", model, "-p", "x", "-n", "1"], capture_output=True, text=True,
                         timeout=60, cwd=ROOT, env={**os.environ, "LOCKSTEP_CPU_HIDE": "sse9"})
    assert bad.returncode == 2 and "LOCKSTEP_CPU_HIDE='sse9'" in bad.stderr
    empty = subprocess.run([str(BIN), "info", "--isa"], capture_output=True, text=True, timeout=60, cwd=ROOT,
                           env={**os.environ, "LOCKSTEP_CPU_HIDE": ""})  # empty: hides nothing, as unset
    assert empty.returncode == 0 and empty.stdout == subprocess.run(
        [str(BIN), "info", "--isa"], capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "LOCKSTEP_CPU_HIDE"}).stdout


def test_tokenize_json(model):
    r = run("tokenize", "-m", model, "--json", "<|im_start|>user\nHello 123")
    assert r.returncode == 0, r.stderr
    o = json.loads(r.stdout)
    assert o["tokens"][0] == 1  # <|im_start|> is id 1 in SmolLM2's vocab
    assert "".join(o["pieces"]) == "<|im_start|>user\nHello 123"


def test_tokenize_json_partial_characters(model):
    """Tokens that hold part of a UTF-8 character: the output still parses (Python's json
    refuses invalid UTF-8 on stdout bytes), such pieces are byte arrays, whole ones strings,
    and the pieces' bytes concatenated are the text's."""
    text = "中文分词测试 🦀"
    r = subprocess.run([str(BIN), "tokenize", "-m", model, "--json", "--no-special", text], capture_output=True,
                       timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    o = json.loads(r.stdout.decode("utf-8"))
    kinds = {type(x) for x in o["pieces"]}
    assert kinds == {str, list}, o["pieces"]  # this text has both in SmolLM2's vocabulary
    joined = b"".join(x.encode() if isinstance(x, str) else bytes(x) for x in o["pieces"])
    assert joined == text.encode()


def test_info_json_matches_gguf_package(model):
    gguf = pytest.importorskip("gguf")
    r = run("info", "-m", model, "--json")
    assert r.returncode == 0, r.stderr
    o = json.loads(r.stdout)
    rd = gguf.GGUFReader(model)
    assert o["architecture"] == "llama"
    assert o["hparams"]["n_layer"] == 30 and o["hparams"]["n_embd"] == 576 and o["hparams"]["n_head_kv"] == 3
    assert o["hparams"]["tied_output"] is True
    assert o["vocab_size"] == 49152
    assert o["chat_template"] == "chatml"
    assert o["file_size"] == os.path.getsize(model)
    ts = {t["name"]: t for t in o["tensors"]}
    assert len(ts) == len(rd.tensors)
    for t in rd.tensors:
        mine = ts[t.name]
        assert mine["type"] == t.tensor_type.name
        assert mine["shape"] == [int(x) for x in t.shape]
        assert mine["nbytes"] == int(t.n_bytes)
    # every scalar and string metadata value
    md = o["metadata"]
    for k, f in rd.fields.items():
        if k.startswith("GGUF."):
            continue
        v = f.contents()
        if isinstance(v, list):
            assert md[k]["n"] == len(v), k
        elif isinstance(v, float):
            assert md[k] == pytest.approx(v, rel=1e-7), k
        else:
            assert md[k] == v, k


def bench(*args, timeout=300):
    return subprocess.run([str(BENCH), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def test_bench_kernels_json(model):
    r = bench("kernels", "-m", model, "--reps", "1", "--json")
    assert r.returncode == 0, r.stderr
    o = json.loads(r.stdout)
    assert o["dram_read_gbs"] > 0
    shapes = {(c["type"], c["K"], c["N"]) for c in o["cases"]}
    # every distinct matrix of SmolLM2-135M: q, k/v, o, gate/up, down, the tied Q8_0 head
    assert shapes == {("Q4_1", 576, 576), ("Q4_1", 576, 192), ("Q4_1", 576, 1536), ("Q4_1", 1536, 576),
                      ("Q8_0", 576, 49152)}
    for s in shapes:
        ms = sorted(c["M"] for c in o["cases"] if (c["type"], c["K"], c["N"]) == s)
        assert ms == [1, 2, 4, 8, 16, 64, 512]
    for c in o["cases"]:
        assert c["gbs"] > 0 and c["gflops"] > 0 and c["path"] == ("narrow" if c["M"] == 1 else "wide" if c["M"] < 16 else "gemm")


def test_bench_unknown_suite():
    r = bench("nosuch")
    assert r.returncode == 2 and "unknown suite 'nosuch'" in r.stderr
    r = run("bench", "kernels")  # the benchmarks moved out of the product binary
    assert r.returncode == 2 and "lockstep-bench" in r.stderr


def test_probe_json_certifies_every_axis(model):
    r = run("probe", "-m", model, "--json", "--no-memo", "-t", "2")
    assert r.returncode == 0, r.stderr
    o = json.loads(r.stdout)
    assert o["verdict"] == "verified" and o["threads"] == 2 and o["spec"] == "ngram"
    for axis, st in o["axes"].items():
        if axis == "isa" and o["isa"] == "scalar":
            continue
        assert st["state"] == "passed", (axis, st)
    assert o["logits_rows"] > 100 and o["drafted"] > 0 and 0 < o["accepted"] < o["drafted"]
    ph = o["phase_ms"]  # where the time went: every phase ran, and they account for the whole
    assert set(ph) == {"setup", "reference", "mix", "threads", "isa"}
    assert all(ph[k] > 0 for k in ("reference", "mix", "threads", "isa")) and sum(ph.values()) <= o["ms"]
    again = json.loads(run("probe", "-m", model, "--json", "-t", "2").stdout)  # memoized now
    assert again["memoized"] and again["verdict"] == "verified"


@pytest.mark.parametrize("fault,axis", [("kv-skip", "batch_mix"), ("threads", "threads")])
def test_probe_catches_a_planted_fault(model, fault, axis):
    env = {**os.environ, "LOCKSTEP_FAULT": fault}
    r = subprocess.run([str(BIN_FAULTS), "probe", "-m", model, "--json", "-t", "2"], capture_output=True, text=True,
                       timeout=300, cwd=ROOT, env=env)
    assert r.returncode == 1, r.stderr
    o = json.loads(r.stdout)
    assert o["verdict"] == "failed" and o["axes"][axis]["state"] == "failed", o
    assert o["detail"].startswith(axis), o["detail"]
    assert "speculation stays off" in r.stderr


def test_run_declines_speculation_when_the_probe_fails(model):
    """A planted parity bug (a skipped K/V write): run still answers, plainly, names the
    failing axis and exits 1; with --allow-inexact it speculates anyway."""
    env = {**os.environ, "LOCKSTEP_FAULT": "kv-skip"}
    args = [str(BIN_FAULTS), "run", "-m", model, "-p", "one two three one two three one two three one two", "-n", "16",
            "--temp", "0", "--spec", "ngram", "-t", "2"]
    r = subprocess.run(args + ["--json"], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert r.returncode == 1, r.stderr
    o = json.loads(r.stdout)
    assert o["parity"] == "failed" and o["parity_axes"]["batch_mix"] == "failed"
    assert o["spec_declined"] and o["draft_n"] == 0 and o["n_gen"] == 16
    assert "parity: FAILED (batch_mix" in r.stderr
    t = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert "spec ngram declined" in t.stderr and "parity: FAILED (batch_mix" in t.stderr
    a = subprocess.run(args + ["--json", "--allow-inexact"], capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env=env)
    oa = json.loads(a.stdout)
    assert not oa["spec_declined"] and oa["draft_n"] > 0


def test_mtp_with_lookup_first_keeps_the_plain_answer(model):
    """--spec mtp --draft-lookup 2 with the shipped module: where the answer repeats itself,
    prompt lookup drafts (and is accepted), elsewhere the module does; the tokens equal plain
    decoding's at temperature 0 (where this answer repeats a line) and 0.8."""
    module = ROOT / "mtp" / "SmolLM2-135M-Instruct.Q4_1.mtp.gguf"
    if "SmolLM2-135M-Instruct.Q4_1" not in str(model) or not module.exists():
        pytest.skip("the shipped module fits the default model only")
    for temp in ("0", "0.8"):
        common = ["run", "-m", model, "--chat", "Write a poem about autumn leaves.",
                  "-n", "64", "--temp", temp, "--seed", "5", "-t", "2", "--json", "--no-probe"]
        plain = json.loads(run(*common).stdout)
        r = run(*common, "--spec", "mtp", "--draft-model", str(module), "--draft-max", "4", "--draft-lookup", "2")
        assert r.returncode == 0, r.stderr
        o = json.loads(r.stdout)
        assert o["tokens"] == plain["tokens"], temp
        assert o["lookup_proposals"] < o["draft_proposals"] and o["lookup_accepted"] <= o["lookup_drafted"], o
        if temp == "0":
            assert o["lookup_proposals"] > 0 and o["lookup_accepted"] > 0, o
    t = run(*common[:-2], "--no-probe", "--spec", "mtp", "--draft-model", str(module))  # 2: mtp's default
    assert "lookup made" in t.stderr, t.stderr
    o = json.loads(run(*common, "--spec", "mtp", "--draft-model", str(module), "--draft-lookup", "0").stdout)
    assert o["tokens"] == plain["tokens"] and "lookup_proposals" not in o


def test_the_shipped_binary_plants_no_fault(model):
    """LOCKSTEP_FAULT does nothing to build/lockstep (only build/lockstep-faults has the
    test hook): the probe verifies and nothing announces planted faults."""
    env = {**os.environ, "LOCKSTEP_FAULT": "kv-skip"}
    r = subprocess.run([str(BIN), "probe", "-m", model, "--json", "-t", "2", "--no-memo"], capture_output=True,
                       text=True, timeout=300, cwd=ROOT, env=env)
    assert r.returncode == 0 and json.loads(r.stdout)["verdict"] == "verified", r.stdout + r.stderr
    assert "LOCKSTEP_FAULT" not in r.stderr


def test_info_tokenize_run_on_a_split_model(model, tmp_path):
    """A model split by the gguf package's writer (split.no / split.count / split.tensors.count,
    NAME-0000i-of-0000N.gguf, as gguf-split writes them) loads by its first shard: info
    lists every tensor, tokenize and run give what the whole file gives."""
    gguf = pytest.importorskip("gguf")
    rd = gguf.GGUFReader(model)
    arch = rd.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), arch, split_max_tensors=100)
    for k, f in rd.fields.items():
        if k.startswith("GGUF.") or k in ("general.architecture", "general.alignment"):
            continue
        vt = f.types[0]
        sub = f.types[-1] if vt == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(k, f.contents(), vt, sub_type=sub)
    for t in rd.tensors:
        w.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)  # quantized: data is the byte shape
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    shards = sorted(p.name for p in tmp_path.glob("m-*.gguf"))
    assert len(shards) == 3 and shards[0] == "m-00001-of-00003.gguf", shards
    first = str(tmp_path / shards[0])
    r = run("info", "-m", first, "--json")
    assert r.returncode == 0, r.stderr
    o = json.loads(r.stdout)
    assert o["shards"] == 3 and len(o["tensors"]) == len(rd.tensors)
    assert o["file_size"] == sum(os.path.getsize(tmp_path / s) for s in shards)
    import hashlib  # the model's identity covers every shard, in order

    assert o["sha256"] == hashlib.sha256(b"".join((tmp_path / s).read_bytes() for s in shards)).hexdigest()
    r = run("info", "-m", first)
    assert r.returncode == 0 and "3 shards" in r.stdout, r.stdout + r.stderr
    a, b = run("tokenize", "-m", first, "Hello world"), run("tokenize", "-m", model, "Hello world")
    assert a.returncode == 0 and a.stdout == b.stdout, a.stderr
    a = run("run", "-m", first, "-p", "The sky is", "-n", "8", "--no-probe", "--temp", "0")
    b = run("run", "-m", model, "-p", "The sky is", "-n", "8", "--no-probe", "--temp", "0")
    assert a.returncode == 0 and a.stdout == b.stdout, a.stderr
    r = run("info", "-m", str(tmp_path / shards[1]))
    assert r.returncode != 0 and "open the first shard" in r.stderr, r.stderr


# ---- progress on a terminal (issue 32 item 6) -----------------------------------------
LONG = "word " * 600  # about 600 tokens: two prefill steps of the default 512-token budget


def on_pty(args, until=None, timeout=120):
    """Runs the program with stdout and stderr on a pseudo-terminal; what it wrote.  With
    `until`, stops it (SIGTERM) once that text has appeared."""
    import pty
    import select
    import signal
    import time
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(ROOT)
        os.execv(str(BIN), [str(BIN), *args])
    out, t0 = b"", time.time()
    try:
        while time.time() - t0 < timeout:
            if until and until.encode() in out:
                os.kill(pid, signal.SIGTERM)
                until = None
            if not select.select([fd], [], [], 0.5)[0]:
                continue
            try:
                b = os.read(fd, 65536)
            except OSError:  # the child closed the terminal
                break
            if not b:
                break
            out += b
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
        os.close(fd)
    return out.decode(errors="replace")


def test_run_progress_only_on_a_terminal(model):
    base = ["-m", model, "-p", LONG, "-n", "1", "--temp", "0", "-t", "2", "-c", "1024"]
    tty = on_pty(["run", *base])
    assert "parity check running ..." in tty and "parity check: " in tty, tty
    assert "\rprefill 512/601 tokens" in tty, tty
    assert "\r\x1b[K" in tty  # the progress line is erased before the answer
    for quiet in (["--no-progress"], ["--json"]):
        out = on_pty(["run", *base, *quiet])
        assert "prefill " not in out.replace("| prefill ", "") and "parity check" not in out, (quiet, out)
    r = run("run", *base)  # not a terminal: the same run prints no progress
    assert r.returncode == 0, r.stderr
    assert "\rprefill" not in r.stderr and "parity check" not in r.stderr and "\x1b" not in r.stderr, r.stderr


def test_serve_probe_progress_only_on_a_terminal(model):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    tty = on_pty(["serve", "-m", model, "--port", port, "-t", "2", "-np", "2", "-c", "256"], until="lockstep serve: ready")
    assert "startup parity check running ..." in tty and "startup parity check took " in tty, tty
    quiet = on_pty(["serve", "-m", model, "--port", port, "-t", "2", "-np", "2", "-c", "256", "--no-progress"],
                   until="lockstep serve: ready")
    assert "lockstep serve: ready" in quiet and "parity check" not in quiet, quiet


def test_info_keeps_the_hash_by_file_identity(model, tmp_path):
    """`info` keeps the file's SHA-256 in lockstep's cache directory, keyed by the file's
    identity (device, inode, size, modification and change times): an unchanged file's hash
    is read from there, a damaged entry is ignored and rewritten, and a file changed in place
    (same size, same inode) is hashed again, never given the hash of its old bytes."""
    import hashlib
    import shutil
    import time

    m = tmp_path / "m.gguf"
    shutil.copyfile(model, m)
    cache = tmp_path / "cache"
    env = {**os.environ, "LOCKSTEP_CACHE": str(cache)}

    def sha():
        r = subprocess.run([str(BIN), "info", "-m", str(m), "--json"], capture_output=True, text=True, env=env,
                           cwd=ROOT, timeout=120)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["sha256"]

    want = hashlib.sha256(m.read_bytes()).hexdigest()
    assert sha() == want
    entries = list(cache.glob("sha256-*.txt"))
    assert len(entries) == 1 and entries[0].read_text() == want + "\n"
    entries[0].write_text("0" * 64 + "\n")  # a planted value is what info reports: the entry is read
    assert sha() == "0" * 64
    entries[0].write_text("not a hash\n")  # damaged: ignored, the file hashed, the entry rewritten
    assert sha() == want and entries[0].read_text() == want + "\n"
    entries[0].write_text("0" * 64 + "\n")
    time.sleep(0.05)  # past the file system's timestamp granularity
    with open(m, "r+b") as f:  # one byte of the last tensor's data, in place: same size, same inode
        f.seek(-1, os.SEEK_END)
        b = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([b[0] ^ 0x01]))
    changed = hashlib.sha256(m.read_bytes()).hexdigest()
    assert changed != want and sha() == changed
