#!/usr/bin/env python3
"""Soak test for `lockstep serve`: mixed traffic for a fixed time, failures, latency, RSS.

Starts the server itself (or attaches to --url, with --pid for RSS), then runs
--concurrency client threads for --duration seconds.  Each client picks a request
kind by weight (--mix):

  chat          POST /v1/chat/completions, non-streaming
  chat_stream   the same streamed (SSE), read to [DONE]
  completion    POST /v1/completions, streaming or not
  cancel        a long streamed request dropped (socket shut down) after a few chunks,
                or a non-streamed one abandoned before its answer
  malformed     bad JSON, wrong types, missing fields, n=2, huge max_tokens, a prompt
                beyond the context, an oversized body, wrong method or path, a body cut
                off mid-upload: each must get its 4xx with an OpenAI error JSON

Prompts, max_tokens (--min-tokens..--max-tokens), temperatures, seeds, top_p/top_k,
stop strings, logprobs and a shared system prompt (prefix cache) are drawn from --seed.

A failure is: an unexpected status (a 5xx other than 503 + Retry-After, which is
counted as "shed"), a response that breaks OpenAI's schema or the request's limits, a
connection error, a malformed request answered 2xx, the server exiting, a mismatch of
the determinism probe (every --det-interval s one greedy request, the same streamed, and
one seeded sampled request must be byte-identical to their first answers, taken alone
before the load), or KV blocks still held once the load stops.

The server's RSS (VmRSS), threads and open fds are sampled every --rss-interval s.  RSS
is "flat" when, after the warm-up, the least-squares trend grows less than
--rss-max-growth-mb over the window and max-min stays under --rss-max-spread-mb (and, if
given, the slope under --rss-max-slope-mb-h).  The warm-up is --warmup s (default 20% of
the run, at least 30 s), extended until every KV block has first held data: the pool is
allocated up front but its pages are touched lazily (--no-kv-warmup turns that off).
A one-minute run is too short for the verdict: the KV pool and the allocator take one
or two minutes to settle; use --duration 300 or more.

At the end: waits for the server to go idle, checks /metrics (KV blocks used back to
their baseline, nothing in flight), sends SIGTERM to a server it started and checks it
exits 0 within --timeout.  Prints a markdown report; --json-out keeps everything.
Exit status 0 only when there were no failures, RSS was flat and the server lived.

    python3 bench/soak.py --duration 1800 --concurrency 8            # the 30-minute record
    python3 bench/soak.py --duration 60 --concurrency 4 --json-out /tmp/soak.json
    python3 bench/soak.py --url http://127.0.0.1:8080 --pid 12345 --duration 600
    python3 bench/soak.py --concurrency 8 -np 2 --serve-args "--max-queue 2"   # shed some
"""
import argparse
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("chat", "chat_stream", "completion", "cancel", "malformed")
DEFAULT_MIX = "chat=3,chat_stream=3,completion=2,cancel=1,malformed=1"

WORDS = ("river mountain city ocean forest desert history music science garden winter market bridge "
         "library engine planet language friendship recipe journey storm harbor castle robot painting "
         "volcano island bicycle telescope festival café naïveté 日本語 你好 emoji🌍 Ελλάδα").split()
TEMPLATES = ("Tell me about the {}.", "Write a short poem about a {}.", "What is a {} used for?",
             "Describe a {} in two sentences.", "Give three facts about the {} and the {}.",
             "Explain the {} to a child.", "List some words related to {}.", "Why do people like the {}?")
SYSTEM = ("You are a concise assistant. Answer in plain English, keep answers short, and never "
          "invent facts you are not sure about. ") * 3  # shared by many requests: the prefix cache

# The determinism probe: fixed requests whose answers must never change under load.
DET_GREEDY = {"messages": [{"role": "user", "content": "Write two sentences about rivers."}],
              "max_tokens": 24, "temperature": 0}
DET_SEEDED = {"messages": [{"role": "user", "content": "Name some colours of autumn leaves."}],
              "max_tokens": 24, "temperature": 0.9, "top_p": 0.95, "seed": 4242}


class Bad(Exception):
    """The server's answer broke the API contract."""


def expect(cond, msg):
    if not cond:
        raise Bad(msg)


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def linfit(ts, ys):
    """Least-squares slope (y per unit t) of the points."""
    n = len(ts)
    mt, my = sum(ts) / n, sum(ys) / n
    sxx = sum((t - mt) ** 2 for t in ts)
    return sum((t - mt) * (y - my) for t, y in zip(ts, ys)) / sxx if sxx else 0.0


def proc_stats(pid):
    """(VmRSS in KiB, threads, open fds) of a process, or None once it is gone."""
    try:
        st = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    f = dict(line.split(":", 1) for line in st.splitlines() if ":" in line)
    if "VmRSS" not in f:  # a zombie
        return None
    try:
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        fds = -1
    return int(f["VmRSS"].split()[0]), int(f["Threads"]), fds


class Client:
    """One HTTP request per connection (stdlib only), with the API key if any."""

    def __init__(self, host, port, timeout, api_key=None):
        self.host, self.port, self.timeout = host, port, timeout
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"

    def conn(self):
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def request(self, method, path, body=None, abandon_after=None):
        """(status, headers, body bytes); body is bytes or a JSON-able object.

        With abandon_after (s): if no response has come by then, shut the socket down
        and return None."""
        c = self.conn()
        try:
            data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
            c.request(method, path, body=data, headers=self.headers)
            if abandon_after is not None:
                sock = c.sock
                sock.settimeout(abandon_after)
                try:
                    r = c.getresponse()
                except socket.timeout:
                    sock.shutdown(socket.SHUT_RDWR)
                    return None
                sock.settimeout(self.timeout)
            else:
                r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()

    def stream(self, path, body, cancel_after=0):
        """POST a streaming request; (status, headers, events or error body, saw [DONE], ttft s).

        ttft is the time to the first chunk with text (not the role chunk).

        With cancel_after > 0 the socket is shut down after that many events."""
        c = self.conn()
        t0 = time.perf_counter()
        try:
            c.request("POST", path, body=json.dumps(body).encode(), headers=self.headers)
            sock = c.sock  # getresponse() may hand it over to the response
            r = c.getresponse()
            hdrs = {k.lower(): v for k, v in r.getheaders()}
            if r.status != 200:
                return r.status, hdrs, r.read(), False, None
            expect(hdrs.get("content-type", "").startswith("text/event-stream"),
                   f"stream content-type {hdrs.get('content-type')!r}")
            events, done, ttft = [], False, None
            while True:
                line = r.readline()
                if not line:
                    break
                line = line.rstrip(b"\r\n")
                if not line:
                    continue
                expect(line.startswith(b"data: "), f"SSE line without 'data: ': {line[:80]!r}")
                if line == b"data: [DONE]":
                    done = True
                    break
                try:
                    events.append(json.loads(line[6:]))
                except ValueError as e:  # UnicodeDecodeError included
                    raise Bad(f"SSE event is not JSON: {not_json(line, e)}")
                if ttft is None and event_text(events[-1]):
                    ttft = time.perf_counter() - t0
                if cancel_after and len(events) >= cancel_after:
                    sock.shutdown(socket.SHUT_RDWR)
                    return 200, hdrs, events, False, ttft
            if done:
                rest = r.read()  # the blank line that ends the event, then the end of the body
                expect(rest.strip() == b"", f"bytes after [DONE]: {rest[:80]!r}")
            return 200, hdrs, events, done, ttft
        finally:
            c.close()

    def metrics(self):
        st, _, out = self.request("GET", "/metrics")
        expect(st == 200, f"/metrics returned {st}")
        m = {}
        for line in out.decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                m[k] = float(v)
        return m


# ---- checks of the server's answers ------------------------------------------------
def not_json(data, e):
    """Why data did not parse, with the bytes around the spot."""
    if isinstance(e, UnicodeDecodeError):
        return f"invalid UTF-8 at byte {e.start}: ...{data[max(0, e.start - 120):e.end + 40]!r}..."
    return f"{e}: {data[:200]!r}"


def event_text(e):
    """The text a stream chunk carries ('' for the role, finish and usage chunks)."""
    try:
        c = e["choices"][0]
        return (c.get("delta") or {}).get("content") or c.get("text") or ""
    except (KeyError, IndexError, TypeError, AttributeError):
        return ""


def check_error_json(data, status):
    try:
        j = json.loads(data)
    except ValueError:
        raise Bad(f"{status} body is not JSON: {data[:80]!r}")
    e = j.get("error") if isinstance(j, dict) else None
    expect(isinstance(e, dict) and isinstance(e.get("message"), str) and e["message"]
           and isinstance(e.get("type"), str) and "param" in e and "code" in e,
           f"{status} body is not an OpenAI error: {data[:120]!r}")
    return e


def check_usage(u, n_ids, req):
    expect(isinstance(u, dict) and u.get("prompt_tokens", 0) > 0, f"bad usage {u}")
    expect(u["completion_tokens"] == n_ids, f"usage.completion_tokens {u['completion_tokens']} != {n_ids} token ids")
    expect(u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], f"usage totals do not add up: {u}")


def check_full(data, req, chat):
    """A non-streamed chat/completion answer; returns (text, token ids)."""
    try:
        j = json.loads(data)
    except ValueError as e:
        raise Bad(f"response is not JSON: {not_json(data, e)}")
    expect(j.get("object") == ("chat.completion" if chat else "text_completion"), f"object {j.get('object')!r}")
    expect(isinstance(j.get("id"), str) and j["id"], "missing id")
    ch = j.get("choices")
    expect(isinstance(ch, list) and len(ch) == 1, f"choices {ch!r:.80}")
    c = ch[0]
    if chat:
        msg = c.get("message") or {}
        expect(msg.get("role") == "assistant" and isinstance(msg.get("content"), str), f"message {msg!r:.80}")
        text = msg["content"]
    else:
        text = c.get("text")
        expect(isinstance(text, str), f"text {text!r:.80}")
    ids = c.get("token_ids")
    expect(isinstance(ids, list), "missing token_ids")
    mt = req.get("max_tokens")
    expect(mt is None or len(ids) <= mt, f"{len(ids)} tokens > max_tokens {mt}")
    fr = c.get("finish_reason")
    expect(fr in ("stop", "length"), f"finish_reason {fr!r}")
    expect(fr != "length" or mt is None or len(ids) == mt, f"finish 'length' after {len(ids)} of {mt} tokens")
    check_usage(j.get("usage"), len(ids), req)
    if req.get("logprobs"):
        lp = c.get("logprobs") or {}
        n = len(lp.get("content") or []) if chat else len(lp.get("tokens") or [])
        expect(n == len(ids), f"{n} logprobs for {len(ids)} tokens")
    return text, ids


def check_stream(events, done, req, chat):
    """A complete stream; returns its text."""
    expect(done, f"stream ended without [DONE] after {len(events)} events")
    obj = "chat.completion.chunk" if chat else "text_completion"
    usage = None
    if req.get("stream_options", {}).get("include_usage"):
        expect(events and events[-1].get("choices") == [] and "usage" in events[-1], "no usage chunk at the end")
        usage = events.pop()["usage"]
    expect(events, "no events before [DONE]")
    ids = {e.get("id") for e in events}
    expect(len(ids) == 1 and None not in ids, f"chunk ids differ: {ids}")
    parts, finishes = [], []
    for k, e in enumerate(events):
        expect(e.get("object") == obj, f"chunk object {e.get('object')!r}")
        ch = e.get("choices")
        expect(isinstance(ch, list) and len(ch) == 1, f"chunk choices {ch!r:.80}")
        c = ch[0]
        if c.get("finish_reason") is not None:
            finishes.append((k, c["finish_reason"]))
        if chat:
            d = c.get("delta")
            expect(isinstance(d, dict), f"chunk without delta: {c!r:.80}")
            if k == 0:
                expect(d.get("role") == "assistant", f"first chunk without the role: {d!r:.80}")
            parts.append(d.get("content") or "")
        else:
            expect(isinstance(c.get("text"), str), f"chunk text {c.get('text')!r:.80}")
            parts.append(c["text"])
    expect(len(finishes) == 1 and finishes[0][0] == len(events) - 1 and finishes[0][1] in ("stop", "length"),
           f"finish_reason must be on the last chunk only: {finishes}")
    if usage is not None:
        mt = req.get("max_tokens")
        expect(mt is None or usage.get("completion_tokens", 0) <= mt, f"stream usage {usage} > max_tokens {mt}")
        expect(finishes[0][1] != "length" or mt is None or usage.get("completion_tokens") == mt,
               f"stream finish 'length' after {usage.get('completion_tokens')} of {mt} tokens")
    return "".join(parts)


# ---- request generators ----------------------------------------------------------------
def random_prompt(rng):
    t = rng.choice(TEMPLATES)
    return t.format(*(rng.choice(WORDS) for _ in range(t.count("{}"))))


def sampling(rng, a, req, chat):
    req["max_tokens"] = rng.randint(a.min_tokens, a.max_tokens)
    req["temperature"] = rng.choice((0, 0, 0.3, 0.7, 1.0, 1.3))
    if rng.random() < 0.7:
        req["seed"] = rng.randrange(1 << 31)
    if rng.random() < 0.3:
        req["top_p"] = rng.choice((0.5, 0.9, 0.95))
    if rng.random() < 0.2:
        req["top_k"] = rng.choice((1, 5, 40))
    if rng.random() < 0.15:
        req["stop"] = rng.choice((".", "\n", ["the", "and"], ","))
    if rng.random() < 0.1:
        if chat:
            req["logprobs"], req["top_logprobs"] = True, rng.randint(0, 5)
        else:
            req["logprobs"] = rng.randint(0, 5)
    if rng.random() < 0.2:
        req["ignore_eos"] = True
    return req


def chat_body(rng, a):
    msgs = [{"role": "user", "content": random_prompt(rng)}]
    r = rng.random()
    if r < 0.3:
        msgs.insert(0, {"role": "system", "content": SYSTEM})
    elif r < 0.4:
        msgs = [{"role": "user", "content": random_prompt(rng)}, {"role": "assistant", "content": "Sure."}] + msgs
    return sampling(rng, a, {"model": "soak", "messages": msgs}, True)


def completion_body(rng, a):
    p = random_prompt(rng) if rng.random() < 0.7 else SYSTEM + random_prompt(rng)
    return sampling(rng, a, {"model": "soak", "prompt": p}, False)


def malformed_cases(a):
    """(name, method, path, body, expected status). body None: an upload cut off mid-body."""
    hi = {"role": "user", "content": "hi"}
    C, P = "/v1/chat/completions", "/v1/completions"
    return [
        ("bad json", "POST", C, b"{not json", 400),
        ("truncated json", "POST", C, b'{"messages": [{"role": "user", "content": "hi"}', 400),
        ("empty body", "POST", C, b"", 400),
        ("json array", "POST", C, b"[1, 2]", 400),
        ("deep nesting", "POST", C, b"[" * 100000, 400),
        ("messages not a list", "POST", C, {"messages": "hi"}, 400),
        ("missing messages", "POST", C, {"model": "x"}, 400),
        ("empty messages", "POST", C, {"messages": []}, 400),
        ("content not a string", "POST", C, {"messages": [{"role": "user", "content": 5}]}, 400),
        ("bad role", "POST", C, {"messages": [{"role": "robot", "content": "hi"}]}, 400),
        ("too many messages", "POST", C, {"messages": [hi] * 300}, 400),
        ("max_tokens string", "POST", C, {"messages": [hi], "max_tokens": "ten"}, 400),
        ("max_tokens 0", "POST", C, {"messages": [hi], "max_tokens": 0}, 400),
        ("max_tokens huge", "POST", C, {"messages": [hi], "max_tokens": 10 ** 9}, 400),
        ("max_tokens fraction", "POST", C, {"messages": [hi], "max_tokens": 1.5}, 400),
        ("n=2", "POST", C, {"messages": [hi], "n": 2}, 400),
        ("temperature -1", "POST", C, {"messages": [hi], "temperature": -1}, 400),
        ("temperature string", "POST", C, {"messages": [hi], "temperature": "hot"}, 400),
        ("stream not bool", "POST", C, {"messages": [hi], "stream": "yes"}, 400),
        ("stop not strings", "POST", C, {"messages": [hi], "stop": [1]}, 400),
        ("five stops", "POST", C, {"messages": [hi], "stop": list("abcde")}, 400),
        ("stop too long", "POST", C, {"messages": [hi], "stop": "x" * 300}, 400),
        ("top_logprobs 50", "POST", C, {"messages": [hi], "logprobs": True, "top_logprobs": 50}, 400),
        ("top_p 0", "POST", C, {"messages": [hi], "top_p": 0}, 400),
        ("prompt beyond context", "POST", C, {"messages": [{"role": "user", "content": "word " * 9000}]}, 400),
        ("missing prompt", "POST", P, {"max_tokens": 4}, 400),
        ("prompt list", "POST", P, {"prompt": ["a", "b"], "max_tokens": 4}, 400),
        ("completion n=2", "POST", P, {"prompt": "hi", "n": 2}, 400),
        ("oversized body", "POST", P, {"prompt": "x" * a.oversize_bytes}, 413),
        ("wrong method", "GET", C, None, 405),
        ("unknown path", "POST", "/v1/nope", {"prompt": "hi"}, 404),
        ("cut-off upload", "POST", C, None, None),
    ]


# ---- the soak ----------------------------------------------------------------------------
class Soak:
    def __init__(self, a, mix, client, pid, proc):
        self.a, self.cl, self.pid, self.proc = a, client, pid, proc
        self.kinds, self.weights = zip(*mix)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.tls = threading.local()              # retry_after: this client's back-off
        self.t0 = time.time()
        self.counts = defaultdict(Counter)        # kind -> status (or outcome) -> n
        self.lat = defaultdict(list)              # kind -> seconds
        self.ttft = defaultdict(list)             # streaming kind -> seconds to the first text
        self.failures = []                        # (t, kind, what)
        self.n_failures = Counter()               # kind -> n
        self.shed = 0
        self.samples = []                         # dicts: t, rss_kb, threads, fds, kv_*, in_flight
        self.det = {"checks": 0, "mismatches": 0, "ref": {}}
        self.died = None
        self.cases = malformed_cases(a)
        self.baseline, self.after, self.load_s = {}, None, 0.0

    def now(self):
        return time.time() - self.t0

    def fail(self, kind, what):
        with self.lock:
            self.n_failures[kind] += 1
            self.counts[kind]["FAIL"] += 1
            if len(self.failures) < 200:
                self.failures.append((round(self.now(), 1), kind, what[:500]))
        print(f"[soak] {self.now():7.1f}s FAIL {kind}: {what[:300]}", file=sys.stderr)

    def served(self, kind, status, lat=None, ttft=None):
        with self.lock:
            self.counts[kind][status] += 1
            if lat is not None:
                self.lat[kind].append(lat)
            if ttft is not None:
                self.ttft[kind].append(ttft)

    def is_shed(self, kind, status, hdrs, data):
        """503 + Retry-After with an error JSON: the queue is full, not a failure.  The
        client then waits as told (up to 5 s) before its next request."""
        if status == 503 and hdrs.get("retry-after"):
            check_error_json(data, status)
            with self.lock:
                self.shed += 1
                self.counts[kind]["503 shed"] += 1
            try:
                self.tls.retry_after = min(max(float(hdrs["retry-after"]), 0.0), 5.0)
            except ValueError:
                raise Bad(f"Retry-After {hdrs['retry-after']!r} is not a number of seconds")
            return True
        return False

    # -- one request of each kind; raise Bad on a contract violation --
    def do_generate(self, kind, rng):
        """chat, chat_stream, completion or cancel.  A cancel is a long streamed request
        dropped after 1-4 chunks or (one in four) a non-streamed one abandoned after
        0.2-1 s: the server must cope with the client's socket going away."""
        chat = kind.startswith("chat") or (kind == "cancel" and rng.random() < 0.5)
        req = chat_body(rng, self.a) if chat else completion_body(rng, self.a)
        path = "/v1/chat/completions" if chat else "/v1/completions"
        stream = kind == "chat_stream" or (kind == "completion" and rng.random() < 0.5)
        abandon_after = None
        if kind == "cancel":
            req["max_tokens"], req["ignore_eos"] = rng.randint(64, 256), True
            stream = rng.random() < 0.75
            abandon_after = None if stream else rng.uniform(0.2, 1.0)
        if stream:
            req["stream"] = True
            if rng.random() < 0.3:
                req["stream_options"] = {"include_usage": True}
        t0 = time.perf_counter()
        if not stream:
            res = self.cl.request("POST", path, req, abandon_after)
            if res is None:
                self.served(kind, "abandoned")
                return
            st, hdrs, data = res
            if self.is_shed(kind, st, hdrs, data):
                return
            expect(st == 200, f"status {st}: {data[:200]!r}")
            check_full(data, req, chat)
            self.served(kind, st, time.perf_counter() - t0)
            return
        cancel_after = rng.randint(1, 4) if kind == "cancel" else 0
        st, hdrs, events, done, ttft = self.cl.stream(path, req, cancel_after)
        if st != 200:
            if self.is_shed(kind, st, hdrs, events):
                return
            raise Bad(f"status {st}: {events[:200]!r}")
        if kind == "cancel" and not done:
            self.served(kind, "dropped", None, ttft)
            return
        check_stream(events, done, req, chat)
        self.served(kind, st, time.perf_counter() - t0, ttft)

    def do_malformed(self, rng):
        name, method, path, body, want = rng.choice(self.cases)
        t0 = time.perf_counter()
        if want is None:  # announce a body, send part of it, hang up
            with socket.create_connection((self.cl.host, self.cl.port), timeout=self.a.request_timeout) as s:
                s.sendall(f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                          f"Content-Length: 1000\r\n\r\n{{\"messages\": [".encode())
                s.shutdown(socket.SHUT_RDWR)
            self.served("malformed", "dropped", None)
            return
        st, hdrs, data = self.cl.request(method, path, body)
        if self.is_shed("malformed", st, hdrs, data):
            return
        expect(400 <= st < 500, f"{name}: status {st} (want {want}): {data[:200]!r}")
        check_error_json(data, st)
        expect(st == want, f"{name}: status {st}, want {want}: {data[:200]!r}")
        self.served("malformed", st, time.perf_counter() - t0)

    def worker(self, i):
        rng = random.Random(self.a.seed * 1000003 + i)
        deadline = self.t0 + self.a.duration
        while not self.stop.is_set() and time.time() < deadline:
            kind = rng.choices(self.kinds, self.weights)[0]
            try:
                if kind == "malformed":
                    self.do_malformed(rng)
                else:
                    self.do_generate(kind, rng)
            except Bad as e:
                if self.server_gone():  # a stream cut short by the crash: counted as the crash
                    return
                self.fail(kind, f"malformed response: {e}")
            except (OSError, http.client.HTTPException) as e:
                if self.server_gone():
                    return
                self.fail(kind, f"connection error: {type(e).__name__}: {e}")
            backoff = getattr(self.tls, "retry_after", 0)
            if backoff:
                self.tls.retry_after = 0
                self.stop.wait(backoff * rng.uniform(0.5, 1.5))

    # -- the determinism probe --
    def det_ask(self, req, stream):
        """The text of one probe request; None when it was shed 10 times in a row."""
        for _ in range(10):
            if stream:
                st, hdrs, events, done, _ = self.cl.stream("/v1/chat/completions", dict(req, stream=True))
                if st == 200:
                    return check_stream(events, done, req, True)
                data = events
            else:
                st, hdrs, data = self.cl.request("POST", "/v1/chat/completions", req)
                if st == 200:
                    return check_full(data, req, True)[0]
            if not self.is_shed("determinism", st, hdrs, data):
                raise Bad(f"status {st}: {data[:200]!r}")
            time.sleep(self.tls.retry_after)
        return None

    def det_probe(self, first=False):
        """The fixed requests; the first call (alone, before the load) sets the answers."""
        probes = (("greedy", DET_GREEDY, False), ("greedy stream", DET_GREEDY, True), ("seeded", DET_SEEDED, False))
        for name, req, stream in probes:
            key = "greedy" if name == "greedy stream" else name  # streamed text == non-streamed text
            try:
                text = self.det_ask(req, stream)
            except Bad as e:
                self.fail("determinism", f"{name}: {e}")
                continue
            except (OSError, http.client.HTTPException) as e:
                if not self.server_gone():
                    self.fail("determinism", f"{name}: connection error: {e}")
                continue
            if text is None:
                continue
            with self.lock:
                ref = self.det["ref"].setdefault(key, text)
                if not first:
                    self.det["checks"] += 1
            self.served("determinism", 200)
            if text != ref:
                with self.lock:
                    self.det["mismatches"] += 1
                self.fail("determinism", f"{name} answer changed under load: {text!r} != {ref!r}")

    def det_loop(self):
        while not self.stop.wait(self.a.det_interval):
            if time.time() >= self.t0 + self.a.duration:
                break
            self.det_probe()

    # -- the server process --
    def server_gone(self):
        if self.died is not None:
            return True
        if self.proc is not None:
            rc = self.proc.poll()
            if rc is not None:
                self.died = f"the server exited with status {rc} at {self.now():.0f} s"
        elif self.pid and not Path(f"/proc/{self.pid}").exists():
            self.died = f"the server (pid {self.pid}) is gone at {self.now():.0f} s"
        if self.died:
            self.stop.set()
            print(f"[soak] {self.died}", file=sys.stderr)
        return self.died is not None

    def sample(self, label=None):
        s = {"t": round(self.now(), 1)}
        if label:
            s["label"] = label
        if self.pid:
            ps = proc_stats(self.pid)
            if ps:
                s["rss_kb"], s["threads"], s["fds"] = ps
        try:
            m = self.cl.metrics()
            s["kv_used"] = int(m["lockstep_kv_blocks_used"])
            s["kv_cached"] = int(m["lockstep_kv_blocks_cached"])
            s["kv_blocks"] = int(m["lockstep_kv_blocks"])
            s["in_flight"] = int(m["lockstep_requests_in_flight"])
        except (OSError, http.client.HTTPException, Bad, KeyError):
            pass
        with self.lock:
            self.samples.append(s)
        return s

    def monitor(self):
        nxt = time.time()
        while not self.stop.is_set():
            if self.server_gone():
                return
            if time.time() >= nxt:
                s = self.sample()
                nxt += self.a.rss_interval
                if "rss_kb" in s:
                    print(f"[soak] {s['t']:7.1f}s rss {s['rss_kb'] / 1024:.1f} MB, threads {s['threads']}, "
                          f"fds {s['fds']}, kv used {s.get('kv_used')}, in flight {s.get('in_flight')}, "
                          f"{sum(sum(c.values()) for c in self.counts.values())} requests, "
                          f"{sum(self.n_failures.values())} failures", file=sys.stderr)
            self.stop.wait(0.5)

    def run(self):
        self.baseline = self.cl.metrics()
        self.det_probe(first=True)
        self.t0 = time.time()  # the clock starts with the load
        workers = [threading.Thread(target=self.worker, args=(i,), daemon=True) for i in range(self.a.concurrency)]
        others = [threading.Thread(target=f, daemon=True) for f in (self.det_loop, self.monitor)]
        for t in workers + others:
            t.start()
        try:
            for t in workers:
                while t.is_alive():
                    t.join(0.5)
        except KeyboardInterrupt:
            print("[soak] interrupted: stopping the clients", file=sys.stderr)
            self.stop.set()
            for t in workers:
                t.join(self.a.request_timeout)
        self.load_s = self.now()
        self.stop.set()
        for t in others:
            t.join(self.a.request_timeout)
        if self.server_gone():
            return
        # idle: nothing in flight (abandoned requests run to their end), every KV block back
        deadline = time.time() + self.a.idle_wait
        while True:
            try:
                m = self.cl.metrics()
            except (OSError, http.client.HTTPException, Bad) as e:
                self.fail("end", f"/metrics after the load: {e}")
                return
            idle = (m["lockstep_requests_in_flight"] == 0
                    and m["lockstep_kv_blocks_used"] == self.baseline["lockstep_kv_blocks_used"])
            if idle or time.time() > deadline:
                break
            time.sleep(0.2)
        self.after = m
        if not idle:
            self.fail("end", f"not idle {self.a.idle_wait:g} s after the load: "
                             f"{m['lockstep_requests_in_flight']:.0f} in flight, "
                             f"{m['lockstep_kv_blocks_used']:.0f} KV blocks used "
                             f"(baseline {self.baseline['lockstep_kv_blocks_used']:.0f})")
        self.sample("idle after the load")

    def kv_full_at(self):
        """When every KV block first held data (used or cached): its pages are all touched then."""
        for s in self.samples:
            if "kv_blocks" in s and s["kv_used"] + s["kv_cached"] >= s["kv_blocks"] > 0:
                return s["t"]
        return None

    def rss_verdict(self):
        """Least-squares trend and spread of RSS after the warm-up: flat or growing.

        The KV pool is allocated up front but its pages are touched only as blocks are
        first used, so RSS climbs until every block has held data; unless --no-kv-warmup,
        the warm-up lasts at least until then."""
        a = self.a
        kv_full = self.kv_full_at()
        warmup = a.warmup if a.no_kv_warmup or kv_full is None else max(a.warmup, kv_full)
        pts = [(s["t"], s["rss_kb"] / 1024) for s in self.samples
               if "rss_kb" in s and warmup <= s["t"] and "label" not in s]
        v = {"warmup_s": warmup, "kv_pool_full_at_s": kv_full, "samples": len(pts),
             "max_growth_mb": a.rss_max_growth_mb,
             "max_spread_mb": a.rss_max_spread_mb, "max_slope_mb_h": a.rss_max_slope_mb_h}
        if not self.pid:
            return dict(v, verdict="n/a (no pid)", ok=True)
        if len(pts) < 3:
            return dict(v, verdict="too few samples after warm-up (run longer)", ok=False)
        ts, ys = [p[0] for p in pts], [p[1] for p in pts]
        slope = linfit(ts, ys)  # MB per second
        window = ts[-1] - ts[0]
        v.update(window_s=round(window, 1), slope_mb_h=round(slope * 3600, 2), growth_mb=round(slope * window, 3),
                 spread_mb=round(max(ys) - min(ys), 3), first_mb=round(ys[0], 2), last_mb=round(ys[-1], 2))
        ok = v["growth_mb"] < a.rss_max_growth_mb and v["spread_mb"] < a.rss_max_spread_mb
        if a.rss_max_slope_mb_h is not None:
            ok = ok and v["slope_mb_h"] < a.rss_max_slope_mb_h
        return dict(v, verdict="flat" if ok else "GROWING", ok=ok)


def parse_mix(text):
    """'chat=3,cancel=1' -> [("chat", 3.0), ("cancel", 1.0)]."""
    mix = []
    for part in text.split(","):
        k, _, w = part.partition("=")
        if k not in KINDS or not w:
            sys.exit(f"soak: bad --mix entry {part!r} (kind=weight; kinds: {', '.join(KINDS)})")
        mix.append((k, float(w)))
    return mix


# ---- server lifetime -----------------------------------------------------------------
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(cl, proc, limit):
    deadline = time.time() + limit
    while True:
        try:
            st, _, out = cl.request("GET", "/health")
            if st == 200:
                return json.loads(out)
        except (OSError, http.client.HTTPException):
            pass
        if (proc and proc.poll() is not None) or time.time() > deadline:
            return None
        time.sleep(0.2)


def stop_server(proc, grace):
    """SIGTERM; (exit status or None, seconds to exit)."""
    t0 = time.time()
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=grace + 10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        rc = None
    return rc, time.time() - t0


# ---- the report --------------------------------------------------------------------------
def report(a, soak, health, rss, term):
    lines = []
    out = lines.append
    total = sum(sum(c.values()) for k, c in soak.counts.items() if k not in ("determinism",))
    fails = sum(soak.n_failures.values())
    out(f"# lockstep serve soak: {soak.load_s:.0f} s, {a.concurrency} clients, seed {a.seed}\n")
    out(f"server: {health.get('cmd', a.url)}  \nparity {health.get('parity')}, spec {health.get('spec')}; "
        f"mix {a.mix}; max_tokens {a.min_tokens}..{a.max_tokens}\n")
    out(f"**{total} requests, {fails} failures, {soak.shed} shed (503 + Retry-After)**, "
        f"{total / max(soak.load_s, 1e-9):.2f} req/s; determinism {soak.det['checks']} checks, "
        f"{soak.det['mismatches']} mismatches; RSS {rss['verdict']}; "
        f"server {'DIED: ' + soak.died if soak.died else 'alive'}"
        + (f"; SIGTERM exit {term[0]} in {term[1]:.1f} s" if term else "") + "\n")
    out("| kind | requests | by status | failures | p50 ms | p99 ms | ttft p50 ms | ttft p99 ms |")
    out("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for k in (*KINDS, "determinism", "end"):
        c = soak.counts.get(k)
        if not c and not soak.n_failures.get(k):
            continue
        c = c or Counter()
        by = ", ".join(f"{s}: {n}" for s, n in sorted(c.items(), key=lambda x: str(x[0])))
        lat, tt = soak.lat.get(k, []), soak.ttft.get(k, [])
        f = lambda xs, p: f"{1e3 * pct(xs, p):.0f}" if xs else "-"
        out(f"| {k} | {sum(c.values())} | {by} | {soak.n_failures.get(k, 0)} | {f(lat, 50)} | {f(lat, 99)} | "
            f"{f(tt, 50)} | {f(tt, 99)} |")
    if soak.failures:
        out(f"\nFirst failures ({min(len(soak.failures), a.examples)} of {fails}):\n")
        for t, k, w in soak.failures[:a.examples]:
            out(f"- {t:.1f} s, {k}: {w}")
    if soak.died:
        out(f"\n**{soak.died}**")
    rs = [s for s in soak.samples if "rss_kb" in s]
    if rs:
        kvf = rss.get("kv_pool_full_at_s")
        out(f"\nRSS (every {a.rss_interval:g} s; warm-up {rss['warmup_s']:g} s: --warmup {a.warmup:g} s"
            + (f", KV pool first full at {kvf:g} s" if kvf is not None else ", KV pool never full") + "):\n")
        out("| t s | RSS MB | threads | fds | KV used | KV cached | in flight |")
        out("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        step = max(1, len(rs) // 24)
        shown = rs[::step] + ([rs[-1]] if (len(rs) - 1) % step else [])
        for s in shown:
            lab = f" ({s['label']})" if "label" in s else (" (warm-up)" if s["t"] < rss["warmup_s"] else "")
            out(f"| {s['t']:.0f}{lab} | {s['rss_kb'] / 1024:.1f} | {s['threads']} | {s['fds']} | "
                f"{s.get('kv_used', '-')} | {s.get('kv_cached', '-')} | {s.get('in_flight', '-')} |")
    if "slope_mb_h" in rss:
        out(f"\nRSS after warm-up: {rss['samples']} samples over {rss['window_s']:.0f} s, "
            f"{rss['first_mb']:.1f} → {rss['last_mb']:.1f} MB, trend {rss['slope_mb_h']:+.2f} MB/h "
            f"({rss['growth_mb']:+.3f} MB over the window; limit {a.rss_max_growth_mb:g}), max-min "
            f"{rss['spread_mb']:.2f} MB (limit {a.rss_max_spread_mb:g}): **{rss['verdict']}**")
    else:
        out(f"\nRSS: {rss['verdict']}")
    if soak.after:
        b, m = soak.baseline, soak.after
        st = {c: m.get('lockstep_requests_total{status="%s"}' % c, 0) for c in ("2xx", "400", "413", "503", "other")}
        out(f"\n/metrics when idle: KV blocks used {m['lockstep_kv_blocks_used']:.0f} (baseline "
            f"{b['lockstep_kv_blocks_used']:.0f}) of {m['lockstep_kv_blocks']:.0f}, cached "
            f"{m['lockstep_kv_blocks_cached']:.0f}, in flight {m['lockstep_requests_in_flight']:.0f}, "
            f"queue {m['lockstep_queue_depth']:.0f}; server's requests_total "
            + ", ".join(f"{c} {n:.0f}" for c, n in st.items()) + "; generated tokens "
            f"{m['lockstep_generated_tokens_total'] - b['lockstep_generated_tokens_total']:.0f}, prefix-cache hits "
            f"{m['lockstep_prefix_cache_hit_tokens_total'] - b['lockstep_prefix_cache_hit_tokens_total']:.0f} tokens, "
            f"preemptions {m['lockstep_preemptions_total'] - b['lockstep_preemptions_total']:.0f}")
    return "\n".join(lines), total, fails


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_argument_group("server")
    g.add_argument("--url", help="attach to a running server instead of starting one")
    g.add_argument("--pid", type=int, help="with --url: the server's pid, for RSS and liveness")
    g.add_argument("--lockstep", default=str(ROOT / "build/lockstep"), help="the binary (default build/lockstep)")
    g.add_argument("-m", "--model", default=str(ROOT / "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    g.add_argument("-np", "--parallel", type=int, default=8)
    g.add_argument("-c", "--ctx-size", type=int, default=1024)
    g.add_argument("-t", "--threads", type=int, default=2)
    g.add_argument("--timeout", type=int, default=30, help="the server's --timeout (the SIGTERM grace) (30)")
    g.add_argument("--serve-args", default="", help="more flags for lockstep serve")
    g.add_argument("--server-log", type=Path, help="the server's stderr (default /tmp/lockstep-soak-PORT.log)")
    g.add_argument("--api-key", default=os.environ.get("LOCKSTEP_API_KEY"))
    g = ap.add_argument_group("load")
    g.add_argument("--duration", type=float, default=300, help="seconds of load (300)")
    g.add_argument("--concurrency", type=int, default=8, help="client threads (8)")
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--mix", default=DEFAULT_MIX, help=f"kind=weight,... ({DEFAULT_MIX})")
    g.add_argument("--min-tokens", type=int, default=8)
    g.add_argument("--max-tokens", type=int, default=64)
    g.add_argument("--oversize-bytes", type=int, default=(1 << 20) + 4096, help="the oversized body (> --max-body)")
    g.add_argument("--request-timeout", type=float, default=300)
    g.add_argument("--idle-wait", type=float, default=60,
                   help="seconds the server may take to go idle after the load (60)")
    g.add_argument("--det-interval", type=float, help="seconds between determinism probes (min(60, duration/4))")
    g = ap.add_argument_group("RSS")
    g.add_argument("--rss-interval", type=float, default=10, help="seconds between samples (10)")
    g.add_argument("--warmup", type=float, help="seconds ignored by the verdict (20%% of --duration, min 30)")
    g.add_argument("--rss-max-growth-mb", type=float, default=2.0, help="trend over the window (2)")
    g.add_argument("--rss-max-spread-mb", type=float, default=8.0, help="max-min after warm-up (8)")
    g.add_argument("--rss-max-slope-mb-h", type=float, help="optional cap on the trend, MB per hour")
    g.add_argument("--no-kv-warmup", action="store_true",
                   help="do not extend the warm-up until every KV block has held data")
    g = ap.add_argument_group("output")
    g.add_argument("--json-out", type=Path)
    g.add_argument("--examples", type=int, default=5, help="failures shown in the report (5)")
    a = ap.parse_args()
    if a.warmup is None:
        a.warmup = max(30.0, 0.2 * a.duration)
    if a.det_interval is None:
        a.det_interval = min(60.0, a.duration / 4)
    mix = parse_mix(a.mix)

    proc, pid, health = None, a.pid, {}
    if a.url:
        u = urlparse(a.url)
        host, port = u.hostname, u.port or 80
    else:
        host, port = "127.0.0.1", free_port()
        cmd = [a.lockstep, "serve", "-m", a.model, "--port", str(port), "-np", str(a.parallel),
               "-c", str(a.ctx_size), "-t", str(a.threads), "--timeout", str(a.timeout), *a.serve_args.split()]
        a.server_log = a.server_log or Path(f"/tmp/lockstep-soak-{port}.log")
        log = open(a.server_log, "w")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        pid = proc.pid
        health["cmd"] = " ".join(cmd)
        print(f"[soak] started {' '.join(cmd)} (pid {pid}, log {a.server_log})", file=sys.stderr)
    cl = Client(host, port, a.request_timeout, a.api_key)
    h = wait_healthy(cl, proc, 300)
    if h is None:
        if proc:
            proc.kill()
            proc.wait()
            print(a.server_log.read_text()[-2000:], file=sys.stderr)
        sys.exit("soak: the server did not become healthy")
    health.update(h)

    soak = Soak(a, mix, cl, pid, proc)
    term = None
    try:
        soak.run()
    finally:
        if proc:
            if proc.poll() is None:
                term = stop_server(proc, a.timeout)
                print(f"[soak] SIGTERM: exit status {term[0]} after {term[1]:.1f} s", file=sys.stderr)
            else:
                soak.server_gone()
            log.close()
    rss = soak.rss_verdict()
    text, total, fails = report(a, soak, health, rss, term)
    term_ok = term is None or (term[0] == 0 and term[1] <= a.timeout + 1)
    if term and not term_ok:
        text += (f"\n\n**SIGTERM: exit status {term[0]} after {term[1]:.1f} s "
                 f"(want 0 within {a.timeout} s)**")
    if proc and a.server_log:
        bad = [ln for ln in a.server_log.read_text(errors="replace").splitlines()
               if "engine step failed" in ln or "out of memory" in ln or "ERROR" in ln or "sanitizer" in ln.lower()]
        if bad:
            text += f"\n\nServer log ({a.server_log}): {len(bad)} alarming lines, e.g. {bad[0][:200]!r}"
    print(text)
    ok = fails == 0 and rss["ok"] and not soak.died and term_ok
    if a.json_out:
        a.json_out.parent.mkdir(parents=True, exist_ok=True)
        a.json_out.write_text(json.dumps({
            "ok": ok, "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items()},
            "health": health, "load_s": soak.load_s, "requests": total, "failures": fails, "shed": soak.shed,
            "counts": {k: {str(s): n for s, n in c.items()} for k, c in soak.counts.items()},
            "latency_ms": {k: {"n": len(v), "p50": 1e3 * pct(v, 50), "p99": 1e3 * pct(v, 99)}
                           for k, v in soak.lat.items()},
            "ttft_ms": {k: {"n": len(v), "p50": 1e3 * pct(v, 50), "p99": 1e3 * pct(v, 99)}
                        for k, v in soak.ttft.items()},
            "failure_examples": soak.failures, "determinism": soak.det, "rss": rss, "samples": soak.samples,
            "metrics_baseline": soak.baseline, "metrics_idle": soak.after, "died": soak.died,
            "sigterm": {"exit": term[0], "seconds": term[1]} if term else None,
        }, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
