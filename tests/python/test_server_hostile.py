"""`lockstep serve` against hostile and careless clients (issue 34: no request can crash or
wedge the server). Each test starts a real server on a free loopback port.

- Strict input: raw NUL and control characters in strings, invalid UTF-8 (a 400 naming the
  JSON path), trailing data, duplicate keys, unpaired surrogate escapes, nesting past 64,
  unknown nested keys (stream_options.foo, a message's name, /tokenize extras).
- Replies are valid UTF-8: /detokenize of a lone byte, a completion forced onto such a
  token (streamed and not, with logprobs): invalid bytes become U+FFFD.
- Browsers: a cross-origin "simple" request (text/plain, no preflight) is refused before
  any work; an Origin that is not allowed is a 403; curl -d (form content type) and the
  official openai client still work.
- Honest operations: an idle keep-alive connection is not a head timeout; a body trickled
  past --body-timeout is cut and counted; a declared body over --max-body is a 413 before
  the body; client-gone cancellations are counted for streams and non-streams; after
  SIGTERM new connections are refused at once; an embeddings request cut by shutdown is a
  503 and shutdown ends at the grace period.
- Grammar/schema bombs (6,000 and 5,000 nested groups, a 20,000-rule chain, minItems
  100000) get a 400 naming the limit within a second, and the server keeps serving.
"""
import http.client
import json
import shutil
import signal
import socket
import subprocess
import threading
import time

import pytest

from test_server_ops import Srv, parse, raw

COMPLETION = {"prompt": "The capital of France is", "max_tokens": 2, "temperature": 0}


def wait_for(cond, timeout, what):
    deadline = time.time() + timeout
    while True:
        v = cond()
        if v:
            return v
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def post_raw(srv, path, body: bytes, headers=None):
    st, h, out = srv.req("POST", path, body, headers=headers)
    try:
        return st, json.loads(out), h
    except ValueError:
        return st, out, h


def err_msg(out):
    assert isinstance(out, dict) and "error" in out, out
    return out["error"]["message"]


@pytest.fixture(scope="module")
def srv(model_path):
    s = Srv(model_path, "--header-timeout", "1", "--body-timeout", "2")
    yield s
    assert s.stop() == 0, s.logtext()


# ---- strict input -------------------------------------------------------------------

def test_raw_nul_and_control_characters_are_400(srv):
    st, out, _ = post_raw(srv, "/v1/completions", b'{"prompt": "abc\x00def", "max_tokens": 1}')
    assert st == 400 and "'prompt'" in err_msg(out) and "NUL" in err_msg(out), out
    st, out, _ = post_raw(srv, "/tokenize", b'{"content": "abc\x00def"}')
    assert st == 400 and "'content'" in err_msg(out), out
    st, out, _ = post_raw(srv, "/v1/chat/completions",
                          b'{"messages": [{"role": "user", "content": "a\x01b"}], "max_tokens": 1}')
    assert st == 400 and "'messages[0].content'" in err_msg(out) and "control character" in err_msg(out), out
    st, out, _ = post_raw(srv, "/tokenize", b'{"content": "tab\there"}')  # a raw tab is a control character too
    assert st == 400, out
    st, out, _ = post_raw(srv, "/tokenize", b'{"content": "tab\\there"}')  # escaped: fine
    assert st == 200, out


def test_invalid_utf8_is_400_naming_the_path(srv):
    body = (b'{"messages": [{"role": "system", "content": "ok"}, {"role": "user", "content": "bad \xff here"}],'
            b' "max_tokens": 1}')
    st, out, _ = post_raw(srv, "/v1/chat/completions", body)
    assert st == 400 and "'messages[1].content'" in err_msg(out) and "UTF-8" in err_msg(out), out
    for path, body, where in (
            ("/v1/completions", b'{"prompt": "\xc3\x28", "max_tokens": 1}', "'prompt'"),
            ("/v1/completions", b'{"prompt": "x", "stop": ["ok", "\xed\xa0\x80"], "max_tokens": 1}', "'stop[1]'"),
            ("/tokenize", b'{"content": "\x80"}', "'content'"),
            ("/v1/embeddings", b'{"input": ["fine", "\xf5\x80\x80\x80"]}', "'input[1]'"),
            ("/completion", b'{"prompt": "\xe2\x82", "n_predict": 1}', "'prompt'"),
            ("/v1/completions", b'{"prompt": "x", "max_tokens": 1, "\xff": 1}', "a key of the body")):
        st, out, _ = post_raw(srv, path, body)
        assert st == 400 and where in err_msg(out) and "UTF-8" in err_msg(out), (path, body, out)
    # valid multi-byte text and a paired surrogate escape pass
    st, out, _ = post_raw(srv, "/tokenize", '{"content": "héllo \\ud83d\\ude00 😀"}'.encode())
    assert st == 200, out
    st, out, _ = post_raw(srv, "/tokenize", b'{"content": "\\ud800 alone"}')
    assert st == 400 and "surrogate" in err_msg(out), out


def test_trailing_data_duplicate_keys_and_depth_are_400(srv):
    st, out, _ = post_raw(srv, "/v1/completions", b'{"prompt": "x", "max_tokens": 1} garbage')
    assert st == 400 and "after its JSON object" in err_msg(out), out
    st, out, _ = post_raw(srv, "/v1/completions", b'{"prompt": "x", "max_tokens": 1}{"prompt": "y"}')
    assert st == 400, out
    st, out, _ = post_raw(srv, "/v1/completions", b'{"prompt": "first", "prompt": "second", "max_tokens": 1}')
    assert st == 400 and "'prompt' twice" in err_msg(out), out
    st, out, _ = post_raw(srv, "/v1/chat/completions",
                          b'{"messages": [{"role": "user", "content": "a", "content": "b"}], "max_tokens": 1}')
    assert st == 400 and "'messages[0]'" in err_msg(out) and "'content' twice" in err_msg(out), out
    deep = b'{"prompt": "x", "max_tokens": 1, "json_schema": ' + b'[' * 100 + b']' * 100 + b'}'
    st, out, _ = post_raw(srv, "/v1/completions", deep)
    assert st == 400 and "deeper than 64" in err_msg(out), out
    for bad in (b'{"prompt": "x", "max_tokens": 01}', b'{"prompt": "x", "max_tokens": 1,}', b"{'prompt': 'x'}",
                b'{"prompt": "x", "max_tokens": NaN}', b'', b'[]'):
        st, out, _ = post_raw(srv, "/v1/completions", bad)
        assert st == 400, (bad, out)
    assert srv.req("GET", "/health")[0] == 200


def test_unknown_nested_keys_are_400(srv):
    cases = [
        ("/v1/completions", {**COMPLETION, "stream": True, "stream_options": {"foo": 1}}, "stream_options.foo"),
        ("/v1/completions", {**COMPLETION, "stream_options": {"include_usage": True}}, "'stream'"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi", "name": "bob"}], "max_tokens": 1},
         "messages[0].name"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi",
                                                                              "cache": 1}]}], "max_tokens": 1},
         "messages[0].content[0].cache"),
        ("/tokenize", {"content": "a", "with_pieces": True}, "with_pieces"),
        ("/detokenize", {"tokens": [1], "x": 1}, "'x'"),
    ]
    for path, body, name in cases:
        st, out, _ = srv.post(path, body)
        assert st == 400 and name in err_msg(out), (path, body, out)
    # null is "absent", as at the top level
    st, out, _ = srv.post("/v1/chat/completions",
                          {"messages": [{"role": "user", "content": "hi", "name": None}], "max_tokens": 1})
    assert st == 200, out


# ---- replies are valid UTF-8 ----------------------------------------------------------

def lone_byte_tokens(srv, n=300):
    """Token ids whose text alone is not valid UTF-8 (byte-level BPE pieces)."""
    found = []
    for i in range(n):
        st, h, out = srv.req("POST", "/detokenize", {"tokens": [i]})
        assert st == 200
        text = out.decode("utf-8")  # old code: a lone continuation byte, raw: UnicodeDecodeError
        if "\ufffd" in json.loads(text)["content"]:
            found.append(i)
    return found


def test_replies_are_valid_utf8(srv):
    bad = lone_byte_tokens(srv)
    assert bad, "no token of this vocabulary is a lone byte"
    tok = bad[0]
    st, h, out = srv.req("POST", "/detokenize", {"tokens": [tok, tok]})
    assert json.loads(out.decode("utf-8"))["content"] == "\ufffd\ufffd"  # one U+FFFD per lone byte
    # a generation forced onto that token: replies, streamed and not, with logprobs, are
    # valid UTF-8 and the same text
    body = {"prompt": "Hello", "max_tokens": 3, "temperature": 0, "logit_bias": {str(tok): 100}, "logprobs": 2}
    st, h, out = srv.req("POST", "/v1/completions", body)
    assert st == 200
    whole = json.loads(out.decode("utf-8"))["choices"][0]
    assert "\ufffd" in whole["text"], whole
    st, h, out = srv.req("POST", "/v1/completions", {**body, "stream": True})
    events = [json.loads(x[6:]) for x in out.decode("utf-8").split("\n\n") if x.startswith("data: {")]
    assert "".join(e["choices"][0]["text"] for e in events if e.get("choices")) == whole["text"]
    st, h, out = srv.req("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                          "max_tokens": 3, "logit_bias": {str(tok): 100},
                                                          "logprobs": True, "top_logprobs": 2})
    assert st == 200 and "\ufffd" in json.loads(out.decode("utf-8"))["choices"][0]["message"]["content"]


# ---- browsers --------------------------------------------------------------------------

def test_cross_origin_simple_request_is_refused_before_work(srv):
    m0 = srv.metrics()
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}).encode()
    st, out, _ = post_raw(srv, "/v1/chat/completions", body,
                          headers={"Origin": "http://evil.example", "Content-Type": "text/plain"})
    assert st == 403 and "evil.example" in err_msg(out) and "--cors-origin" in err_msg(out), out
    st, out, _ = post_raw(srv, "/v1/chat/completions", body, headers={"Origin": "http://evil.example"})
    assert st == 403, out  # not allowed whatever the content type
    st, _, _ = srv.req("GET", "/v1/models", headers={"Origin": "http://evil.example"})
    assert st == 403
    # the server's own origin: JSON is fine, a preflight-free content type is not
    own = f"http://127.0.0.1:{srv.port}"
    st, out, _ = post_raw(srv, "/v1/completions", json.dumps(COMPLETION).encode(),
                          headers={"Origin": own, "Content-Type": "text/plain;charset=UTF-8"})
    assert st == 415 and "application/json" in err_msg(out), out
    st, out, _ = post_raw(srv, "/v1/completions", json.dumps(COMPLETION).encode(),
                          headers={"Origin": own, "Content-Type": "application/x-www-form-urlencoded"})
    assert st == 415, out
    st, out, _ = post_raw(srv, "/v1/completions", json.dumps(COMPLETION).encode(),
                          headers={"Host": f"localhost:{srv.port}", "Origin": f"http://localhost:{srv.port}"})
    assert st == 200, out
    m = srv.metrics()
    ran = m["lockstep_prompt_tokens_total"] - m0["lockstep_prompt_tokens_total"]
    assert ran == out["usage"]["prompt_tokens"]  # only the last one reached the engine
    assert m['lockstep_requests_total{status="415"}'] - m0['lockstep_requests_total{status="415"}'] == 2


def test_non_browser_clients_still_work(srv):
    # no Origin: the form type curl -d sends, or none at all, is read as JSON; text/plain is not
    body = json.dumps(COMPLETION).encode()
    st, out, _ = post_raw(srv, "/v1/completions", body, headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert st == 200, out
    data = b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: " + \
        str(len(body)).encode() + b"\r\n\r\n" + body
    st, _, out = parse(raw("127.0.0.1", srv.port, data))
    assert st == 200, out
    st, out, _ = post_raw(srv, "/v1/completions", body, headers={"Content-Type": "text/plain"})
    assert st == 415, out
    curl = shutil.which("curl")
    if curl:  # the README's command
        p = subprocess.run([curl, "-s", f"http://127.0.0.1:{srv.port}/v1/chat/completions", "-d",
                            '{"messages":[{"role":"user","content":"Hi!"}],"max_tokens":2}'],
                           capture_output=True, timeout=60)
        assert json.loads(p.stdout)["object"] == "chat.completion", p.stdout
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="none")
    r = client.chat.completions.create(model="x", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    assert r.choices[0].message.content is not None


# ---- honest operations -------------------------------------------------------------------

def test_idle_keepalive_is_not_a_head_timeout(srv):
    before = srv.metrics()["lockstep_head_timeouts_total"]
    c = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    body = json.dumps(COMPLETION).encode()
    req = (b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
           b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    try:
        for _ in range(2):
            c.sendall(req)
            got = b""
            while b'"usage"' not in got:
                b = c.recv(65536)
                assert b, "the server closed a keep-alive connection that was only idle"
                got += b
            assert got.startswith(b"HTTP/1.1 200"), got[:100]
            time.sleep(2.5)  # idle 2.5 x --header-timeout between requests: not a late head
    finally:
        port = c.getsockname()[1]
        c.close()
    cuts = [ln for ln in srv.logtext().splitlines() if "whose request head took over" in ln]
    assert srv.metrics()["lockstep_head_timeouts_total"] == before, (port, cuts)
    assert not cuts, (port, cuts)


def read_head(c) -> bytes:
    """What a raw socket receives until the end of a response head, the peer's close or the
    socket's timeout; closes the socket."""
    got = b""
    try:
        while b"\r\n\r\n" not in got:
            b = c.recv(4096)
            if not b:
                break
            got += b
    except socket.timeout:
        pass
    c.close()
    return got


def test_declared_body_over_max_body_is_413_at_once(srv):
    c = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    t0 = time.time()
    c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
              b"Content-Length: 67108864\r\n\r\n{\"prompt\": ")
    got = read_head(c)
    assert got.startswith(b"HTTP/1.1 413") and time.time() - t0 < 2, got[:200]


def test_expect_continue_over_max_body_is_413_before_the_body(srv):
    """A client that waits for the go-ahead (curl does for bodies over 1 MiB) gets the 413
    instead of a 100 Continue, whatever the size; it never has to send the body."""
    c = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
              b"Content-Length: 2000000\r\nExpect: 100-continue\r\n\r\n")
    got = read_head(c)
    assert got.startswith(b"HTTP/1.1 413"), got[:200]


def test_body_a_little_over_max_body_gets_a_readable_413(srv):
    """A client that writes its whole body before reading (http.client, as most SDKs) reads
    the 413 instead of a reset connection: a body under 8x the limit is read and dropped."""
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    c.request("POST", "/v1/completions", body=json.dumps({"prompt": "x" * (2 << 20)}).encode(),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    body = r.read()
    c.close()
    assert r.status == 413 and "exceeds the limit" in json.loads(body)["error"]["message"], body[:200]


def test_trickled_body_is_cut_at_the_body_deadline(srv):
    before = srv.metrics().get("lockstep_body_timeouts_total", 0)
    c = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    t0 = time.time()
    c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
              b"Content-Length: 100\r\n\r\n{")
    c.settimeout(0.3)
    cut = None
    while time.time() - t0 < 10:
        try:
            c.sendall(b" ")  # a byte at a time: never idle for long
            if c.recv(1024) == b"":
                cut = time.time() - t0
                break
        except socket.timeout:
            continue
        except OSError:
            cut = time.time() - t0
            break
    c.close()
    # cut at the 2 s deadline, not before; the upper bound allows a loaded host (the reaper runs each second)
    assert cut is not None and 1.8 <= cut <= 8.0, cut
    assert srv.metrics()["lockstep_body_timeouts_total"] >= before + 1
    assert "whose request body took over 2 s" in srv.logtext()


def cancelled(srv):
    m = srv.metrics()
    return {k: m[f'lockstep_requests_cancelled_total{{reason="{k}"}}'] for k in ("client_gone", "shutdown")}


def leave_mid_request(srv, body):
    c = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    data = json.dumps(body).encode()
    c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    wait_for(lambda: srv.metrics()["lockstep_requests_in_flight"] >= 1, 30, "the request in flight")
    c.close()
    wait_for(lambda: srv.metrics()["lockstep_requests_in_flight"] == 0, 30, "the cancellation")


def test_client_gone_is_counted_for_streams_and_not(srv):
    long_req = {"prompt": "Count to a thousand:", "max_tokens": 400, "ignore_eos": True}
    c0 = cancelled(srv)
    leave_mid_request(srv, {**long_req, "stream": True})
    wait_for(lambda: cancelled(srv)["client_gone"] == c0["client_gone"] + 1, 10, "the stream's count")
    leave_mid_request(srv, long_req)
    wait_for(lambda: cancelled(srv)["client_gone"] == c0["client_gone"] + 2, 10, "the non-stream's count")
    leave_mid_request(srv, {**long_req, "n": 2})
    wait_for(lambda: cancelled(srv)["client_gone"] == c0["client_gone"] + 3, 10, "the n=2 request's count")
    assert cancelled(srv)["shutdown"] == c0["shutdown"]


def test_sigterm_refuses_new_connections_and_cuts_embeddings_at_the_grace_period(model_path):
    s = Srv(model_path, "--timeout", "2", "--parallel", "2", "--ctx-size", "1024")
    res = {}
    try:
        long_req = {"prompt": "Count to a thousand:", "max_tokens": 900, "ignore_eos": True}
        # 64 inputs of ~600 tokens: far more prefill than a 2 s grace period on any host
        emb = {"input": [f"{i} " + "the quick brown fox jumps over the lazy dog " * 60 for i in range(64)]}
        ts = [threading.Thread(target=lambda: res.update(gen=s.post("/v1/completions", long_req))),
              threading.Thread(target=lambda: res.update(emb=s.post("/v1/embeddings", emb)))]
        for t in ts:
            t.start()
        wait_for(lambda: s.metrics()["lockstep_requests_in_flight"] >= 3, 60, "both requests in flight")
        t0 = time.time()
        s.proc.send_signal(signal.SIGTERM)

        def refused():
            try:
                socket.create_connection(("127.0.0.1", s.port), timeout=0.5).close()
                return False
            except ConnectionRefusedError:
                return True
            except socket.timeout:
                return False
        wait_for(refused, 1.5, "new connections refused after SIGTERM")
        for t in ts:
            t.join(60)
        rc = s.proc.wait(60)
        took = time.time() - t0
    finally:
        rc = s.stop()
    assert rc == 0
    st, out, _ = res["emb"]
    assert st == 503 and out["error"]["type"] == "server_shutdown", out
    st, out, _ = res["gen"]
    assert st == 503 and out["error"]["type"] == "server_shutdown", out
    # the grace period, then an engine step or two (slow under sanitizers); computing all
    # 64 inputs would take far longer
    assert took < 2 + 15, took
    assert s.logtext().count("cancelled (shutdown)") == 2, s.logtext()[-3000:]


def big_schema_request(n, values=90):
    """A request whose every choice parses for a while: a 660 KB schema (1,024 properties,
    each a 90-value enum) converts to a 1.4 MB grammar; with n choices the body is parsed
    n times (0.1-0.3 s each on a 2-core host).  values=230 makes a 1.8 MB body whose grammar
    (about 3.7 MB) stays under the 4 MiB limit, at 0.25-0.8 s a choice."""
    schema = {"type": "object", "properties": {f"p{i}": {"enum": [f"v{j}" for j in range(values)]} for i in range(1024)},
              "required": [f"p{i}" for i in range(1024)]}
    return {"prompt": "x", "max_tokens": 1, "n": n, "json_schema": schema}


def send_only(srv, body):
    c = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
    data = json.dumps(body).encode()
    c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    return c


def test_sigterm_while_many_choices_parse_is_a_503_within_the_grace_period(model_path):
    """A request with n = 16 whose every choice parses a large schema keeps its handler
    busy for seconds before anything reaches the engine.  SIGTERM meanwhile: at the end of
    the grace period the handler stops between choices and answers 503 server_shutdown,
    and the server exits soon after (it used to parse every choice first: the client read
    an empty reply and the exit came seconds past the grace period)."""
    # 16 choices of the larger schema parse for 3-10 s, well past the 1 s grace period even on
    # a fast host (with 90-value enums all 16 could finish inside it: a 200, not the 503)
    s = Srv(model_path, "--timeout", "1", "--max-body", str(4 << 20))
    res = {}
    try:
        body = big_schema_request(16, values=230)
        t = threading.Thread(target=lambda: res.update(r=s.post("/v1/completions", body, timeout=60)))
        t.start()
        time.sleep(0.3)  # the body is sent and parsing; the parse of all 16 choices takes seconds
        t0 = time.time()
        s.proc.send_signal(signal.SIGTERM)
        rc = s.proc.wait(60)
        took = time.time() - t0
        t.join(60)
    finally:
        s.stop()
    assert rc == 0
    st, out, _ = res["r"]
    assert st == 503 and out["error"]["type"] == "server_shutdown", out
    # the grace period, one choice's parse, the reply; all 16 choices' parse would take 3-10 s
    assert took < 1 + 2.0, took


def test_client_gone_while_many_choices_parse_stops_the_work(srv):
    """The same request's client leaves while its choices parse: the handler notices
    between choices (not after all 16), counts it and submits nothing."""
    t0 = time.time()
    st, _, _ = srv.post("/v1/completions", big_schema_request(1), timeout=60)
    one = time.time() - t0  # one choice's parse, compile and a 1-token generation
    assert st == 200
    c0, p0 = cancelled(srv), srv.metrics()["lockstep_prompt_tokens_total"]
    c = send_only(srv, big_schema_request(16))
    time.sleep(0.2)
    c.close()
    t0 = time.time()
    wait_for(lambda: cancelled(srv)["client_gone"] == c0["client_gone"] + 1, 60, "the client-gone count")
    noticed = time.time() - t0
    assert srv.metrics()["lockstep_prompt_tokens_total"] == p0  # nothing reached the engine
    assert noticed < max(1.5, 4 * one), (noticed, one)  # 16 choices take about 16 x one


# ---- grammar and schema bombs -------------------------------------------------------------
# The limits live in src/sample/grammar.c and json_schema.c; build/tests/test_grammar
# (test_limits_named_and_fast) checks each on the server's 2 MiB stack, and the mutants
# grammar-nesting-unbounded, grammar-chain-unbounded and schema-count-unbounded.

def test_grammar_and_schema_bombs_are_quick_400s(srv):
    chain = "root ::= r0\n" + "".join(f"r{i} ::= r{i + 1}\n" for i in range(19999)) + 'r19999 ::= "x"\n'
    bombs = [  # the inputs: a segfault, a 5-minute wedge, and two 500 "out of memory"s
        ({"grammar": "root ::= " + "(" * 6000 + '"a"' + ")" * 6000}, "the limit of 256 levels"),
        ({"json_schema": {"type": "array", "items": {"type": "integer"}, "minItems": 100000}},
         "over the limit of 4096"),
        ({"grammar": "root ::= " + "(" * 5000 + '"a"' + ")" * 5000}, "the limit of 256 levels"),
        ({"grammar": chain}, "the limit of 1024 rules"),
        # compiles, but the tokens allowed at its start go over the mask's work budget: was a 500
        ({"grammar": 'root ::= ("a"{0,1000}){0,1000}'}, "work budget of 67108864 steps"),
    ]
    for extra, limit in bombs:
        t0 = time.time()
        st, out, _ = srv.post("/v1/completions", {"prompt": "x", "max_tokens": 1, **extra}, timeout=30)
        took = time.time() - t0
        assert st == 400 and limit in err_msg(out), out
        assert took < 1.0, took
        assert srv.req("GET", "/health")[0] == 200
