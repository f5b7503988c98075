#!/usr/bin/env python3
"""HTTP load against `lockstep serve`: throughput and p50/p99 latency at concurrency 1, 4, 16.

Starts the server itself (or uses --url), then for each concurrency C runs C client
threads, each sending --requests chat completions back to back (max_tokens --gen,
temperature 0.7, distinct seeds and prompts), and reports requests/s, generated
tokens/s and the latency percentiles.  Prints a markdown table; --json-out keeps it all.

    python3 bench/http_load.py                  # default model, 2 threads, 16 requests per client
    python3 bench/http_load.py --url http://127.0.0.1:8080 --levels 1,4,16,32
"""
import argparse
import concurrent.futures as cf
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="an already running server (default: start one)")
    ap.add_argument("-m", "--model", default=str(ROOT / "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--levels", default="1,4,16")
    ap.add_argument("--requests", type=int, default=16, help="requests per client thread")
    ap.add_argument("--gen", type=int, default=32, help="max_tokens per request")
    ap.add_argument("--serve-args", default="", help="extra flags for lockstep serve")
    ap.add_argument("--json-out", type=Path)
    a = ap.parse_args()
    levels = [int(x) for x in a.levels.split(",")]
    proc = None
    if a.url:
        u = urlparse(a.url)
        host, port = u.hostname, u.port or 80
    else:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        host = "127.0.0.1"
        cmd = [str(ROOT / "build/lockstep"), "serve", "-m", a.model, "--port", str(port), "-t", str(a.threads),
               "--parallel", str(max(levels)), "--ctx-size", "1024", *a.serve_args.split()]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while True:
            try:
                c = http.client.HTTPConnection(host, port, timeout=5)
                c.request("GET", "/health")
                r = c.getresponse()
                r.read()
                if r.status == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline or (proc and proc.poll() is not None):
                sys.exit("http_load: the server did not come up")
            time.sleep(0.2)

        def client(i, level):
            conn = http.client.HTTPConnection(host, port, timeout=600)
            lat, toks, fails = [], 0, 0
            for k in range(a.requests):
                body = json.dumps({"messages": [{"role": "user", "content": f"Tell me something about topic {i}-{k}."}],
                                   "max_tokens": a.gen, "temperature": 0.7, "seed": 1000 * i + k, "ignore_eos": True})
                t0 = time.perf_counter()
                conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                data = r.read()
                lat.append(time.perf_counter() - t0)
                if r.status != 200:
                    fails += 1
                else:
                    toks += json.loads(data)["usage"]["completion_tokens"]
            conn.close()
            return lat, toks, fails

        rows = []
        for level in levels:
            client(0, 1) if level == levels[0] else None  # warm-up once
            t0 = time.perf_counter()
            with cf.ThreadPoolExecutor(level) as ex:
                res = list(ex.map(lambda i: client(i, level), range(level)))
            wall = time.perf_counter() - t0
            lat = [x for r in res for x in r[0]]
            toks = sum(r[1] for r in res)
            fails = sum(r[2] for r in res)
            rows.append({"concurrency": level, "requests": len(lat), "failures": fails, "wall_s": wall,
                         "req_s": len(lat) / wall, "gen_tok_s": toks / wall, "p50_ms": 1e3 * pct(lat, 50),
                         "p99_ms": 1e3 * pct(lat, 99)})
            print(f"[http_load] concurrency {level}: {rows[-1]['req_s']:.2f} req/s, {rows[-1]['gen_tok_s']:.1f} tok/s, "
                  f"p50 {rows[-1]['p50_ms']:.0f} ms, p99 {rows[-1]['p99_ms']:.0f} ms, {fails} failures",
                  file=sys.stderr)
    finally:
        if proc:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    print(f"HTTP load: {a.requests} requests per client, max_tokens {a.gen} (ignore_eos), {a.threads} threads\n")
    print("| concurrency | requests | failures | req/s | generated tok/s | p50 ms | p99 ms |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['concurrency']} | {r['requests']} | {r['failures']} | {r['req_s']:.2f} | {r['gen_tok_s']:.1f} | "
              f"{r['p50_ms']:.0f} | {r['p99_ms']:.0f} |")
    if a.json_out:
        a.json_out.parent.mkdir(parents=True, exist_ok=True)
        a.json_out.write_text(json.dumps({"levels": rows, "args": vars(a) | {"json_out": str(a.json_out)}}, indent=2))
    return 0 if all(r["failures"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
