"""`lockstep serve` end to end, with the server started by the test.

- The official `openai` Python client: chat, completion, streaming.
- Parity: one request returns byte-identical text and token ids alone and amid 16
  concurrent requests, with and without --spec ngram (four cases, one answer).
- Load: 32 concurrent clients x LOCKSTEP_LOAD_REQUESTS requests each (default 200),
  0 failures.
- Bad input: every error of the API (400, 401, 404, 405, 413, 503 + Retry-After) is
  an OpenAI-style error JSON, and the server keeps serving.
- A client that disconnects mid-stream has its KV freed (metrics back to baseline).
- SIGTERM drains an in-flight request and exits 0.
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

openai = pytest.importorskip("openai")

REPO = Path(__file__).resolve().parents[2]
EXE = REPO / os.environ.get("LOCKSTEP_BUILD", "build") / "lockstep"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, model_path: Path, *args: str, env=None, exe=None):
        self.port = free_port()
        self.cmd = [str(exe or EXE), "serve", "-m", str(model_path), "--port", str(self.port), "-t", "2", *args]
        self.log = open(f"/tmp/lockstep-serve-{self.port}.log", "w+")
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + 120
        while True:
            try:
                st, body, _ = self.request("GET", "/health")
                if st == 200:
                    self.health = json.loads(body)
                    break
                assert st == 503 and json.loads(body)["status"] in ("loading", "probing")
            except (ConnectionError, OSError):
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"server did not start: {self.logtext()}")
            time.sleep(0.1)

    def logtext(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return Path(self.log.name).read_text()

    def request(self, method: str, path: str, body=None, headers=None, timeout=120):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        c.request(method, path, body=data, headers=headers or {"Content-Type": "application/json"})
        r = c.getresponse()
        out = r.read()
        hdrs = dict(r.getheaders())
        c.close()
        return r.status, out, hdrs

    def post(self, path, body, **kw):
        st, out, h = self.request("POST", path, body, **kw)
        return st, json.loads(out), h

    def metrics(self, headers=None) -> dict:
        _, out, _ = self.request("GET", "/metrics", headers=headers)
        m = {}
        for line in out.decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                m[k] = float(v)
        return m

    def client(self, key="none"):
        return openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key=key, max_retries=0)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=60)
        self.log.close()
        return rc


@pytest.fixture(scope="module")
def server(model_path):
    s = Server(model_path, "--parallel", "32", "--ctx-size", "1024")
    yield s
    assert s.stop() == 0, s.logtext()


@pytest.fixture(scope="module")
def spec_server(model_path):
    s = Server(model_path, "--parallel", "32", "--ctx-size", "1024", "--spec", "ngram", "--draft-max", "4")
    yield s
    assert s.stop() == 0, s.logtext()


def test_health_and_models(server):
    assert server.health["status"] == "ok" and server.health["parity"] == "verified"
    models = server.client().models.list()
    assert [m.id for m in models.data] == ["SmolLM2-135M-Instruct.Q4_1.gguf"]


def test_openai_chat_completion_and_stream(server):
    c = server.client()
    r = c.chat.completions.create(model="x", messages=[{"role": "user", "content": "Name a colour."}],
                                  max_tokens=12, temperature=0)
    ch = r.choices[0]
    assert r.object == "chat.completion" and ch.message.role == "assistant" and ch.message.content
    assert ch.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 5 and r.usage.completion_tokens == len(ch.model_extra["token_ids"]) <= 12
    # the same request streamed: the deltas add up to the same text, then [DONE]
    parts, finish = [], None
    for ev in c.chat.completions.create(model="x", messages=[{"role": "user", "content": "Name a colour."}],
                                        max_tokens=12, temperature=0, stream=True):
        assert ev.object == "chat.completion.chunk"
        d = ev.choices[0].delta
        parts.append(d.content or "")
        finish = ev.choices[0].finish_reason or finish
    assert "".join(parts) == ch.message.content and finish == ch.finish_reason
    t = c.completions.create(model="x", prompt="Once upon a time", max_tokens=8, temperature=0)
    assert t.object == "text_completion" and t.choices[0].text and t.usage.completion_tokens <= 8
    st = "".join(e.choices[0].text for e in c.completions.create(model="x", prompt="Once upon a time", max_tokens=8,
                                                                  temperature=0, stream=True))
    assert st == t.choices[0].text


def test_logprobs_and_stop(server):
    c = server.client()
    r = c.chat.completions.create(model="x", messages=[{"role": "user", "content": "Count: 1, 2, 3,"}], max_tokens=6,
                                  temperature=0, logprobs=True, top_logprobs=3)
    lp = r.choices[0].logprobs.content
    assert len(lp) == r.usage.completion_tokens and all(len(x.top_logprobs) == 3 for x in lp)
    # greedy: the token is the top one, the same float printed the same way (exact: both are one
    # float32 printed with 17 digits; test_server_api checks the values against the log-softmax)
    assert all(x.logprob <= 0 and (x.top_logprobs[0].token, x.top_logprobs[0].logprob) == (x.token, x.logprob)
               for x in lp)
    full = c.completions.create(model="x", prompt="1, 2, 3, 4, 5, 6, 7,", max_tokens=12, temperature=0)
    text = full.choices[0].text
    stop = text[len(text) // 2:len(text) // 2 + 2]
    cut = c.completions.create(model="x", prompt="1, 2, 3, 4, 5, 6, 7,", max_tokens=12, temperature=0, stop=[stop])
    assert cut.choices[0].finish_reason == "stop" and cut.choices[0].text == text[:text.index(stop)]


def test_tokenize_detokenize(server):
    st, out, _ = server.post("/tokenize", {"content": "Hello world"})
    assert st == 200 and out["tokens"]
    st, back, _ = server.post("/detokenize", {"tokens": out["tokens"]})
    assert st == 200 and back["content"] == "Hello world"
    st, err, _ = server.post("/detokenize", {"tokens": [10**9]})
    assert st == 400 and "token id" in err["error"]["message"]


PARITY_REQ = {"model": "x", "messages": [{"role": "user", "content": "Write two sentences about rivers."}],
              "max_tokens": 24, "temperature": 0.8, "seed": 1234, "top_p": 0.95}
# The same request under other seeds and sampling parameters (a server that ignored
# `seed`, or any of them, would answer two of these alike), and one that ngram drafts
# well (it repeats its prompt), so the spec server verifies accepted drafts.
PARITY_REQS = [
    PARITY_REQ,
    {**PARITY_REQ, "seed": 99},
    {**PARITY_REQ, "temperature": 1.3, "top_p": 1.0, "top_k": 5, "seed": 7},
    {"model": "x", "max_tokens": 40, "temperature": 0,
     "messages": [{"role": "user", "content": "Repeat exactly, three times: red green blue yellow, red green blue yellow."}]},
]


def _others(i):
    return {"model": "x", "messages": [{"role": "user", "content": f"Tell me fact number {i} about the sea."}],
            "max_tokens": 8 + i % 7, "temperature": 0.7, "seed": i}


def _full(srv, req):
    st, out, _ = srv.post("/v1/chat/completions", req)
    assert st == 200, out
    return out


def _one(srv, req):
    out = _full(srv, req)
    return out["choices"][0]["message"]["content"], out["choices"][0]["token_ids"]


def test_parity_alone_amid_16_with_and_without_spec(server, spec_server, report):
    """Each request alone and amid 16 others, on a plain and a speculating server: the
    same tokens every time; requests that differ only in seed or sampling differ."""
    answers, drafted, accepted = {}, 0, 0
    for name, srv in (("plain", server), ("spec ngram", spec_server)):
        for i, req in enumerate(PARITY_REQS):
            out = _full(srv, req)
            answers[(name, "alone", i)] = (out["choices"][0]["message"]["content"], out["choices"][0]["token_ids"])
            if name != "plain":
                drafted += out["timings"]["draft_n"]
                accepted += out["timings"]["draft_accepted"]
        with cf.ThreadPoolExecutor(20) as ex:
            futs = [ex.submit(_one, srv, _others(i)) for i in range(16)]
            mine = [ex.submit(_one, srv, r) for r in PARITY_REQS]
            for f in futs:
                f.result()
            for i, f in enumerate(mine):
                answers[(name, "amid 16", i)] = f.result()
    for (name, how, i), v in answers.items():
        ref = answers[("plain", "alone", i)]
        assert v == ref, f"request {i}, {name}, {how}: {v!r} != {ref!r}"
    toks = [answers[("plain", "alone", i)][1] for i in range(len(PARITY_REQS))]
    assert len({tuple(t) for t in toks}) == len(toks), "requests that differ in seed or sampling answered alike"
    assert drafted > 0 and 0 < accepted < drafted, (drafted, accepted)
    report(f"server parity: {len(PARITY_REQS)} requests x alone/amid 16 x plain/spec byte-identical; the spec server "
           f"drafted {drafted} tokens for them, {accepted} accepted")


def test_failed_probe_declines_speculation(model_path):
    """A planted parity bug (LOCKSTEP_FAULT=kv-skip): /health and /metrics name the failed
    axis, and the server serves without drafts (fail closed)."""
    s = Server(model_path, "--parallel", "4", "--ctx-size", "256", "--spec", "ngram",
               env={**os.environ, "LOCKSTEP_FAULT": "kv-skip"}, exe=EXE.parent / "lockstep-faults")
    try:
        h = s.health
        assert h["parity"] == "failed" and h["axes"]["batch_mix"] == "failed", h
        assert h["spec"] == "off" and h["spec_state"] == "ngram (declined)", h
        assert "batch_mix" in h["parity_detail"]
        out = _full(s, PARITY_REQS[3])
        assert out["timings"]["draft_n"] == 0 and out["parity"] == "failed"
        m = s.metrics()
        assert m['lockstep_parity_axis{axis="batch_mix"}'] == 0
    finally:
        assert s.stop() == 0, s.logtext()


def test_kv_exhaustion_preempts_without_corruption(server, model_path, report):
    """16 concurrent requests on a KV cache with room for about a quarter of them: the
    engine preempts (and recomputes) sequences; every answer is byte-identical to the
    same request's answer on a server with room to spare, and the KV cache is empty
    afterwards."""
    reqs = [{"model": "x", "messages": [{"role": "user", "content": f"Describe colour number {i} in detail."}],
             "max_tokens": 40, "temperature": 0.7, "seed": 100 + i, "ignore_eos": True} for i in range(16)]
    refs = [_one(server, r) for r in reqs]
    small = Server(model_path, "--parallel", "16", "--ctx-size", "128", "--kv-mem", "12M")
    try:
        with cf.ThreadPoolExecutor(16) as ex:
            got = list(ex.map(lambda r: _one(small, r), reqs))
        m = small.metrics()
    finally:
        assert small.stop() == 0, small.logtext()
    for i, (g, r) in enumerate(zip(got, refs)):
        assert g == r, f"request {i} differs under KV pressure: {g!r} != {r!r}"
    assert m["lockstep_preemptions_total"] > 0, m
    assert m["lockstep_kv_blocks_used"] == 0, m
    report(f"KV exhaustion: 16 requests on {m['lockstep_kv_blocks']:.0f} blocks, "
           f"{m['lockstep_preemptions_total']:.0f} preemptions, all byte-identical")


def test_load_32_clients(server, report):
    per = int(os.environ.get("LOCKSTEP_LOAD_REQUESTS", "200"))
    before = server.metrics()

    def client(i):
        fails = 0
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
        for k in range(per):
            body = json.dumps({"prompt": f"Client {i} request {k}:", "max_tokens": 2, "temperature": 0}).encode()
            conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
            if r.status != 200 or len(json.loads(data)["choices"]) != 1:
                fails += 1
        conn.close()
        return fails

    t0 = time.time()
    with cf.ThreadPoolExecutor(32) as ex:
        failures = sum(ex.map(client, range(32)))
    dt = time.time() - t0
    after = server.metrics()
    n = 32 * per
    assert failures == 0
    assert after['lockstep_requests_total{status="2xx"}'] - before['lockstep_requests_total{status="2xx"}'] >= n
    # the gauges are published at the end of the engine step that answered the last request
    deadline = time.time() + 10
    while after["lockstep_kv_blocks_used"] != 0 and time.time() < deadline:
        time.sleep(0.05)
        after = server.metrics()
    assert after["lockstep_kv_blocks_used"] == 0
    report(f"server load: {n} requests from 32 clients, 0 failures, {dt:.1f} s ({n / dt:.0f} req/s)")


def test_errors(server, model_path):
    bad = [
        (b"{not json", 400, "not valid JSON"),
        ({"messages": "hi"}, 400, "'messages' must be a non-empty list"),
        ({"model": "x"}, 400, "'messages' is required"),
        ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": "ten"}, 400, "'max_tokens' must be a number"),
        ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}, 400, "'max_tokens' is 0"),
        ({"messages": [{"role": "user", "content": "hi"}], "n": 17}, 400, "'n' is 17"),
        ({"messages": [{"role": "user", "content": "hi"}], "temperature": -1}, 400, "'temperature'"),
        ({"messages": [{"role": "user", "content": "hi"}], "stop": [1]}, 400, "'stop'"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, 400, "role"),
        ({"messages": [{"role": "user", "content": "word " * 2000}]}, 400, "context holds 1024"),
    ]
    for body, status, msg in bad:
        st, out, h = server.request("POST", "/v1/chat/completions", body)
        j = json.loads(out)
        assert st == status and msg in j["error"]["message"], (body if isinstance(body, bytes) else str(body)[:80], st, j)
        assert j["error"]["type"] == "invalid_request_error"
    st, out, _ = server.request("GET", "/v1/nope")
    assert st == 404 and "no such endpoint" in json.loads(out)["error"]["message"]
    st, out, _ = server.request("GET", "/v1/chat/completions")
    assert st == 405
    st, out, _ = server.request("POST", "/v1/completions", {"prompt": "x" * (2 << 20)})
    assert st == 413 and "exceeds the limit" in json.loads(out)["error"]["message"]
    assert _one(server, PARITY_REQ)  # still serving


def test_api_key_and_full_queue(model_path):
    s = Server(model_path, "--api-key", "sesame", "--parallel", "1", "--max-queue", "0", "--ctx-size", "512")
    try:
        req = {"prompt": "Hello", "max_tokens": 2}
        st, out, _ = s.request("POST", "/v1/completions", req)
        assert st == 401 and "API key" in json.loads(out)["error"]["message"]
        st, out, _ = s.request("POST", "/v1/completions", req, headers={"Authorization": "Bearer sesamf"})
        assert st == 401
        auth = {"Authorization": "Bearer sesame", "Content-Type": "application/json"}
        st, out, _ = s.request("POST", "/v1/completions", req, headers=auth)
        assert st == 200
        with pytest.raises(openai.AuthenticationError):
            s.client("wrong").completions.create(model="x", prompt="hi", max_tokens=1)
        assert s.client("sesame").completions.create(model="x", prompt="hi", max_tokens=1).choices
        # one long request fills the only slot; the next one is turned away with Retry-After
        with cf.ThreadPoolExecutor(1) as ex:
            long = ex.submit(s.request, "POST", "/v1/completions",
                             {"prompt": "Tell a long story.", "max_tokens": 400, "ignore_eos": True}, auth)
            deadline = time.time() + 30
            while s.metrics(auth)["lockstep_requests_in_flight"] < 1:  # the slot is taken
                assert time.time() < deadline and not long.done()
                time.sleep(0.02)
            st, out, h = s.request("POST", "/v1/completions", req, headers=auth)
            assert st == 503 and h.get("Retry-After") == "1" and "queue is full" in json.loads(out)["error"]["message"]
            assert long.result()[0] == 200
    finally:
        assert s.stop() == 0


def test_disconnect_frees_kv(server):
    base = server.metrics()["lockstep_kv_blocks_used"]
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    c.request("POST", "/v1/completions", body=json.dumps({"prompt": "Write a very long essay about the moon.",
                                                          "max_tokens": 900, "stream": True, "ignore_eos": True}),
              headers={"Content-Type": "application/json"})
    try:
        r = c.getresponse()
        assert r.status == 200
        r.fp.readline()  # the first event arrived: the sequence is running
        # /metrics shows the engine as of its last finished step, and the first token is
        # sent from inside the step that made it: wait for that step's snapshot
        deadline = time.time() + 20
        while server.metrics()["lockstep_kv_blocks_used"] <= base:
            assert time.time() < deadline
            time.sleep(0.02)
        c.sock.shutdown(socket.SHUT_RDWR)
    finally:
        c.close()
    deadline = time.time() + 20
    while time.time() < deadline:
        m = server.metrics()
        if m["lockstep_kv_blocks_used"] == base and m["lockstep_requests_in_flight"] == 0:
            break
        time.sleep(0.1)
    assert m["lockstep_kv_blocks_used"] == base and m["lockstep_requests_in_flight"] == 0, m


def test_abandoned_request_is_cancelled(server):
    """A non-streaming request whose client hangs up is cancelled: its slot and KV are
    freed at once, not when its 3000 tokens would have been generated."""
    base = server.metrics()["lockstep_kv_blocks_used"]
    body = json.dumps({"prompt": "Tell a long story.", "max_tokens": 900, "ignore_eos": True}).encode()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    deadline = time.time() + 20
    while server.metrics()["lockstep_kv_blocks_used"] <= base:  # it is running
        assert time.time() < deadline
        time.sleep(0.02)
    sock.close()
    t0 = time.time()
    while time.time() < t0 + 10:
        m = server.metrics()
        if m["lockstep_kv_blocks_used"] == base and m["lockstep_requests_in_flight"] == 0:
            break
        time.sleep(0.05)
    assert m["lockstep_kv_blocks_used"] == base and m["lockstep_requests_in_flight"] == 0, m
    assert "client gone: cancelled" in server.logtext()


def test_logprob_tokens_are_valid_utf8(server):
    """Tokens that are pieces of a multi-byte character are written as "bytes:\\xNN..."
    (JSON strings must be UTF-8); the raw bytes are in "bytes"."""
    seen_partial = False
    for content in ("Write in Chinese: 你好", "Emoji: 🎉🎉", "The Greek letter α and β"):
        st, raw, _ = server.request("POST", "/v1/chat/completions", {
            "messages": [{"role": "user", "content": content}], "max_tokens": 12, "temperature": 0,
            "logprobs": True, "top_logprobs": 5})
        assert st == 200
        out = json.loads(raw.decode("utf-8"))  # strict: invalid UTF-8 raises
        for e in out["choices"][0]["logprobs"]["content"]:
            for t in [e, *e["top_logprobs"]]:
                b = bytes(t["bytes"])
                if t["token"].startswith("bytes:"):
                    seen_partial = True
                    assert t["token"] == "bytes:" + "".join(f"\\x{x:02x}" for x in b)
                else:
                    assert t["token"].encode() == b
    assert seen_partial  # among 5 alternatives of 36 positions, some are partial characters


def test_sigterm_drains_in_flight(model_path):
    s = Server(model_path, "--ctx-size", "512")
    with cf.ThreadPoolExecutor(1) as ex:
        # long enough that a fast host is still generating when /metrics is first read
        fut = ex.submit(s.post, "/v1/completions", {"prompt": "Count to fifty:", "max_tokens": 300, "ignore_eos": True})
        deadline = time.time() + 30
        while s.metrics()["lockstep_requests_in_flight"] < 1:  # the request is in the engine
            assert time.time() < deadline and not fut.done()
            time.sleep(0.02)
        s.proc.send_signal(signal.SIGTERM)
        st, out, _ = fut.result()
    assert st == 200 and out["usage"]["completion_tokens"] == 300
    assert s.stop() == 0
    assert "stopped" in s.logtext()
