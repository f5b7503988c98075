"""`lockstep serve` with several models (router mode, issue 32): -m repeated and
--models-dir, --alias, loading on first use within --models-max, least-recently-used
unloading, GET /models, POST /models/load and /models/unload, per-model probe verdicts.

- A request routed by its "model" gets the same bytes (content, token ids, logprobs) as
  a single-model server of that model: SmolLM2 under two names, and Gemma 3 270M.
- --models-max 1: A, then B unloads A, then A reloads and answers identically.
- --models-max 2: the least recently used idle model is the one unloaded, and a model
  with a request in flight is never unloaded; with every model busy, a request for
  another waits --timeout, then gets 503 (the stream it waited on runs to its end).
- Concurrent first requests for one model load it once, and all get the same bytes.
- Unknown model: 404 naming it and listing the models; no model with several: 400.
- --models-dir: the *.gguf files by stem; a file that is not a model fails to load with
  a 503 naming why, the others are served; one model there: requests need no "model".
- Each model's own parity probe: its verdict in /health and /v1/models; a model whose
  probe fails (a planted fault) is not served.
- /metrics sums every model's counters (an unloaded one's too) and names each model's state.
"""
import concurrent.futures as cf
import http.client
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXE = REPO / os.environ.get("LOCKSTEP_BUILD", "build") / "lockstep"
GEMMA = REPO / "models" / "gemma-3-270m-q4_k_m.gguf"
COMMON = ["-t", "1", "--parallel", "4", "--ctx-size", "512"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, *args, env=None, exe=None):
        self.port = free_port()
        self.cmd = [str(exe or EXE), "serve", "--port", str(self.port), *COMMON, *args]
        self.log = open(f"/tmp/lockstep-router-{self.port}.log", "w+")
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + 60
        while True:
            try:
                st, _, _ = self.request("GET", "/health")
                if st == 200:
                    break
            except OSError:
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"server did not start: {self.logtext()}")
            time.sleep(0.05)

    def logtext(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return Path(self.log.name).read_text()

    def request(self, method, path, body=None, timeout=120):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        c.request(method, path, body=data, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        out = r.read()
        c.close()
        return r.status, out, dict(r.getheaders())

    def post(self, path, body):
        st, out, _ = self.request("POST", path, body)
        return st, json.loads(out)

    def get(self, path):
        st, out, _ = self.request("GET", path)
        return st, json.loads(out)

    def status(self) -> dict:
        """Each model's status value, from GET /models."""
        return {m["id"]: m["status"]["value"] for m in self.get("/models")[1]["data"]}

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=60)
        self.log.close()
        return rc


CHAT = {"messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 16, "temperature": 0.8,
        "seed": 7, "logprobs": True, "top_logprobs": 3}
COMPL = {"prompt": "The capital of France is", "max_tokens": 12, "temperature": 0.8, "seed": 11, "logprobs": 3}


def answer(out: dict) -> bytes:
    """What must be byte-identical: the reply's text, token ids and log-probabilities."""
    ch = out["choices"][0]
    keep = {k: ch.get(k) for k in ("message", "text", "logprobs", "token_ids", "finish_reason")}
    return json.dumps(keep, sort_keys=True).encode()


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    """A second model unlike the first (another family, other weights, so a request routed
    to the wrong model answers differently): the real Gemma 3 270M file when it is there,
    else a synthetic gemma3 file (synth_family.py) that CI always has."""
    if GEMMA.exists():
        return GEMMA
    import synth_family
    p = tmp_path_factory.mktemp("router") / "gemma3-synthetic.gguf"
    synth_family.write(str(p), "gemma3", seed=5)
    return p


def reference(cases) -> dict:
    """The answers of single-model servers, each of its model."""
    ref = {}
    for name, path, ep, req in cases:
        s = Server("-m", str(path), "--no-probe")
        try:
            st, out = s.post(ep, req)
            assert st == 200, out
            ref[name] = answer(out)
        finally:
            assert s.stop() == 0, s.logtext()
    return ref


@pytest.fixture(scope="module")
def singles(model_path):
    return reference((("smol", model_path, "/v1/chat/completions", CHAT),
                      ("smol-c", model_path, "/v1/completions", COMPL)))


@pytest.fixture(scope="module")
def gemma_ref(gemma):
    return reference((("gemma", gemma, "/v1/completions", COMPL),))


@pytest.fixture(scope="module")
def router1(model_path, gemma):
    """Three names, two files, one model loaded at a time."""
    s = Server("-m", str(model_path), "--alias", "smol", "-m", str(model_path), "--alias", "smol2",
               "-m", str(gemma), "--alias", "gemma", "--models-max", "1", "--no-probe")
    yield s
    assert s.stop() == 0, s.logtext()


def test_lists_every_model_with_its_status(router1):
    st, out = router1.get("/v1/models")
    assert st == 200 and out["object"] == "list"
    assert [m["id"] for m in out["data"]] == ["smol", "smol2", "gemma"]
    for m in out["data"]:
        assert m["object"] == "model" and m["status"]["value"] in ("unloaded", "loaded") and m["path"].endswith(".gguf")
    st, same = router1.get("/models")
    assert st == 200 and [m["id"] for m in same["data"]] == ["smol", "smol2", "gemma"]
    st, h = router1.get("/health")
    assert st == 200 and h["status"] == "ok" and [m["id"] for m in h["models"]] == ["smol", "smol2", "gemma"]


def test_routed_requests_give_the_single_model_bytes(router1, singles, gemma_ref):
    singles = {**singles, **gemma_ref}
    for model, ep, req, ref in (("smol", "/v1/chat/completions", CHAT, "smol"),
                                ("smol2", "/v1/chat/completions", CHAT, "smol"),
                                ("smol", "/v1/completions", COMPL, "smol-c"),
                                ("gemma", "/v1/completions", COMPL, "gemma")):
        st, out = router1.post(ep, {**req, "model": model})
        assert st == 200, out
        assert out["model"] == model
        assert answer(out) == singles[ref], (model, ep)


def test_budget_of_one_unloads_and_reloads_identically(router1, singles, gemma_ref):
    st, a1 = router1.post("/v1/chat/completions", {**CHAT, "model": "smol"})
    assert st == 200 and router1.status()["smol"] == "loaded"
    st, b = router1.post("/v1/completions", {**COMPL, "model": "gemma"})
    assert st == 200 and answer(b) == gemma_ref["gemma"]
    assert router1.status() == {"smol": "unloaded", "smol2": "unloaded", "gemma": "loaded"}
    st, a2 = router1.post("/v1/chat/completions", {**CHAT, "model": "smol"})
    assert st == 200 and answer(a2) == answer(a1) == singles["smol"]
    assert router1.status() == {"smol": "loaded", "smol2": "unloaded", "gemma": "unloaded"}
    assert "model 'smol' unloaded (least recently used" in router1.logtext()


def test_load_and_unload_endpoints(router1):
    st, out = router1.post("/models/load", {"model": "smol2"})
    assert st == 200 and out == {"success": True}
    assert router1.status()["smol2"] == "loaded"
    st, out = router1.post("/models/unload", {"model": "smol2"})
    assert st == 200 and out == {"success": True}
    assert router1.status()["smol2"] == "unloaded"
    st, out = router1.post("/models/unload", {"model": "smol2"})
    assert st == 400 and "'smol2' is not loaded" in out["error"]["message"]
    st, out = router1.post("/models/load", {"model": "nope"})
    assert st == 404 and "'nope'" in out["error"]["message"] and "smol, smol2, gemma" in out["error"]["message"]
    st, out = router1.post("/models/load", {"model": "smol", "extra": 1})
    assert st == 400 and "'extra'" in out["error"]["message"]
    st, out = router1.post("/models/load", {})
    assert st == 400 and "'model' is required" in out["error"]["message"]
    st, out = router1.post("/models/load", b"[1]")
    assert st == 400


def test_unknown_or_missing_model_is_refused_by_name(router1):
    st, out = router1.post("/v1/chat/completions", {**CHAT, "model": "gpt-4o"})
    assert st == 404
    msg = out["error"]["message"]
    assert "'gpt-4o'" in msg and "available: smol, smol2, gemma" in msg
    st, out = router1.post("/v1/chat/completions", CHAT)
    assert st == 400 and "'model' is required" in out["error"]["message"] and "smol, smol2, gemma" in out["error"]["message"]
    st, out = router1.post("/v1/completions", {**COMPL, "model": 3})
    assert st == 400 and "'model'" in out["error"]["message"]
    st, out = router1.post("/v1/chat/completions", b"{not json")
    assert st == 400 and "not a JSON object" in out["error"]["message"]
    st, out = router1.get("/props?model=nope")
    assert st == 404 and "'nope'" in out["error"]["message"]
    st, out = router1.get("/slots")
    assert st == 400
    st, out = router1.get("/props?model=smol2")
    assert st == 200 and out["model"] == "smol2"
    st, out = router1.post("/tokenize", {"model": "smol", "content": "hello"})
    assert st == 200 and out["tokens"]


def test_metrics_count_every_model(router1):
    """/metrics sums the models' counters (an unloaded model's included) and shows each
    model's state and verdict."""
    _, out, _ = router1.request("GET", "/metrics")
    m = {}
    for line in out.decode().splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            m[k] = float(v)
    loaded = [m[f'lockstep_model_loaded{{model="{x}"}}'] for x in ("smol", "smol2", "gemma")]
    assert sum(loaded) <= 1 and set(loaded) <= {0.0, 1.0}
    assert m['lockstep_requests_total{status="2xx"}'] >= 7  # the replies of the tests above, on three models
    assert m["lockstep_generated_tokens_total"] >= 16 * 4 + 12 * 2
    assert m['lockstep_parity_verified{model="gemma",verdict="skipped",spec="off"}'] == 0


@pytest.fixture(scope="module")
def router2(model_path):
    s = Server("-m", str(model_path), "--alias", "a", "-m", str(model_path), "--alias", "b",
               "-m", str(model_path), "--alias", "c", "--models-max", "2", "--no-probe")
    yield s
    assert s.stop() == 0, s.logtext()


def test_concurrent_first_requests_load_once(router2, singles):
    with cf.ThreadPoolExecutor(8) as ex:
        outs = list(ex.map(lambda _: router2.post("/v1/chat/completions", {**CHAT, "model": "a"}), range(8)))
    assert all(st == 200 for st, _ in outs), outs
    assert {answer(o) for _, o in outs} == {singles["smol"]}
    assert router2.logtext().count("loading model 'a'") == 1


def test_least_recently_used_goes_first(router2):
    for m in ("a", "b", "a"):  # b is now the least recently used
        assert router2.post("/v1/completions", {**COMPL, "model": m, "max_tokens": 2})[0] == 200
    assert router2.post("/v1/completions", {**COMPL, "model": "c", "max_tokens": 2})[0] == 200
    assert router2.status() == {"a": "loaded", "b": "unloaded", "c": "loaded"}


def test_a_model_in_flight_is_not_unloaded(router2, singles):
    """c and a loaded, c busy streaming: a request for b unloads a (idle), never c, and c's
    stream runs to its end."""
    assert router2.post("/models/load", {"model": "c"})[0] == 200
    assert router2.post("/models/load", {"model": "a"})[0] == 200
    c = http.client.HTTPConnection("127.0.0.1", router2.port, timeout=120)
    body = json.dumps({**COMPL, "model": "c", "max_tokens": 200, "ignore_eos": True, "stream": True}).encode()
    c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    first = r.readline()  # the stream has begun: c is in flight
    assert first.startswith(b"data: "), first
    st, out = router2.post("/v1/chat/completions", {**CHAT, "model": "b"})
    assert st == 200 and answer(out) == singles["smol"]
    rest = r.read().decode()
    c.close()
    assert rest.rstrip().endswith("data: [DONE]") and '"finish_reason":"length"' in rest
    assert router2.status() == {"a": "unloaded", "b": "loaded", "c": "loaded"}


def test_models_dir(tmp_path, model_path, singles):
    d = tmp_path / "models"
    d.mkdir()
    (d / "SmolLM2.gguf").symlink_to(model_path)
    (d / "broken.gguf").write_bytes(b"GGUF" + b"\0" * 60)
    (d / "notes.txt").write_text("not a model")
    (d / "stray.gguf").write_text("not a model either")  # skipped with a warning
    for i in (1, 2):  # a split model's shards: one model, named without the shard tail
        (d / f"split-0000{i}-of-00002.gguf").symlink_to(model_path)
    s = Server("--models-dir", str(d), "--no-probe")
    try:
        assert s.status() == {"SmolLM2": "unloaded", "broken": "unloaded", "split": "unloaded"}
        assert s.logtext().count("model 'split': ") == 1 and "split-00001-of-00002.gguf (187.6 MiB)" in s.logtext()
        assert "skipping" in s.logtext() and "stray.gguf" in s.logtext()
        st, out = s.post("/v1/chat/completions", {**CHAT, "model": "SmolLM2"})
        assert st == 200 and answer(out) == singles["smol"] and out["model"] == "SmolLM2"
        st, out = s.post("/v1/chat/completions", {**CHAT, "model": "broken"})
        assert st == 503 and "model 'broken' is not available" in out["error"]["message"]
        m = {x["id"]: x for x in s.get("/models")[1]["data"]}
        assert m["broken"]["status"]["failed"] is True and m["broken"]["status"]["error"]
        assert s.post("/v1/chat/completions", {**CHAT, "model": "SmolLM2"})[0] == 200
    finally:
        assert s.stop() == 0, s.logtext()
    for f in ("broken.gguf", "stray.gguf", "split-00001-of-00002.gguf", "split-00002-of-00002.gguf"):
        (d / f).unlink()
    s = Server("--models-dir", str(d), "--no-probe")
    try:  # one model: a request need not name it
        st, out = s.post("/v1/chat/completions", CHAT)
        assert st == 200 and answer(out) == singles["smol"], out
    finally:
        assert s.stop() == 0, s.logtext()


def test_each_model_has_its_own_probe_verdict(model_path):
    s = Server("-m", str(model_path), "--alias", "x", "-m", str(model_path), "--alias", "y")
    try:
        h = {m["id"]: m for m in s.get("/health")[1]["models"]}
        assert h["x"]["parity"] == "pending" and h["y"]["parity"] == "pending"
        assert s.post("/models/load", {"model": "x"})[0] == 200
        h = {m["id"]: m for m in s.get("/health")[1]["models"]}
        assert h["x"]["parity"] in ("verified", "scoped") and h["x"]["axes"]["batch_mix"] == "passed"
        assert h["y"]["parity"] == "pending"
        v = {m["id"]: m for m in s.get("/v1/models")[1]["data"]}
        assert v["x"]["parity"] == h["x"]["parity"] and v["y"]["parity"] == "pending"
    finally:
        assert s.stop() == 0, s.logtext()


def test_a_model_whose_probe_fails_is_not_served(model_path):
    faults = EXE.parent / "lockstep-faults"
    if not faults.exists():
        pytest.skip("build/lockstep-faults not built (make all) [optional in CI]")
    s = Server("-m", str(model_path), "--alias", "x", "-m", str(model_path), "--alias", "y",
               env={**os.environ, "LOCKSTEP_FAULT": "kv-skip"}, exe=faults)
    try:
        st, out = s.post("/v1/chat/completions", {**CHAT, "model": "x"})
        assert st == 503 and "parity probe failed" in out["error"]["message"], out
        h = {m["id"]: m for m in s.get("/health")[1]["models"]}
        assert h["x"]["parity"] == "failed" and h["x"]["axes"]["batch_mix"] == "failed"
        assert h["x"]["status"]["failed"] is True and h["x"]["status"]["value"] == "unloaded"
    finally:
        assert s.stop() == 0, s.logtext()


def test_flags(model_path, tmp_path):
    (tmp_path / "d").mkdir()
    same = tmp_path / "d" / model_path.name  # another file of the same name
    same.symlink_to(model_path)
    out = subprocess.run([str(EXE), "serve", "--help"], capture_output=True, text=True).stdout
    for f in ("--models-dir", "--models-max", "--models-memory", "/models/load", "/models/unload"):
        assert f in out, f
    bad = [
        (["-m", str(model_path), "--alias", "a", "--alias", "b", "-m", str(model_path)], "two --alias"),
        (["--models-dir", str(tmp_path / "none")], "cannot read --models-dir"),
        (["-m", str(model_path), "-m", "/etc/hostname"], "is not a GGUF file"),
        (["-m", str(model_path), "-m", str(same)], "two models are named"),
        (["-m", str(model_path), "--alias", "a", "-m", str(model_path), "--alias", "b", "--models-memory", "1M"],
         "exceeds --models-memory"),
    ]
    for args, want in bad:
        r = subprocess.run([str(EXE), "serve", "--port", str(free_port()), *args], capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 2 and want in r.stderr, (args, r.stderr)


def test_no_room_while_every_model_is_busy(model_path):
    """--models-max 1 and the one model busy streaming: a request for another waits up to
    --timeout for it, then gets 503 with Retry-After naming the budget; the stream is untouched."""
    s = Server("-m", str(model_path), "--alias", "a", "-m", str(model_path), "--alias", "b", "--models-max", "1",
               "--timeout", "2", "--no-probe")
    try:
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=120)
        body = json.dumps({**COMPL, "model": "a", "max_tokens": 480, "ignore_eos": True, "stream": True}).encode()
        c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        assert r.readline().startswith(b"data: ")
        with cf.ThreadPoolExecutor(1) as ex:  # read the stream meanwhile (one nobody reads is cut at --timeout)
            reading = ex.submit(r.read)
            t0 = time.time()
            st, out, h = s.request("POST", "/v1/completions", json.dumps({**COMPL, "model": "b"}).encode())
            waited = time.time() - t0
            rest = reading.result()
        c.close()
        if st == 200:  # the stream ended within the 2 s (a fast host): nothing to refuse
            pytest.skip(f"the 480-token stream finished within --timeout ({waited:.1f} s)")
        msg = json.loads(out)["error"]["message"]
        assert st == 503 and h.get("Retry-After") == "1" and "no room to load model 'b'" in msg, (st, out)
        assert 1.8 <= waited < 10, waited
        assert rest.decode().rstrip().endswith("data: [DONE]") and '"finish_reason":"length"' in rest.decode()
        assert s.status() == {"a": "loaded", "b": "unloaded"}
    finally:
        assert s.stop() == 0, s.logtext()
