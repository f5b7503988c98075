"""valgrind memcheck of a short `lockstep run` and a short `lockstep serve` session, both
without the parity probe (which test_probe runs under ASan+UBSan)
(issue 8): 0 errors and 0 leaks of any kind (definite, indirect, possible, still
reachable).

valgrind's CPU has no AVX-512, so these also run lockstep as it runs on an AVX2-only
machine (the attention dispatch once asserted AVX-512 there; this is how it was found).
valgrind is required (scripts/install-deps.sh --test installs it): a missing valgrind
fails the test, it does not skip.
"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXE = REPO / os.environ.get("LOCKSTEP_BUILD", "build") / "lockstep"
MODEL = Path(os.environ.get("MODEL", REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
if not MODEL.is_absolute():
    MODEL = REPO / MODEL

# --fair-sched=yes: valgrind runs one thread at a time, and by default a thread that
# keeps running (the engine and its pool workers) can keep the others from running for
# tens of seconds; a CI run once saw a stream's connection thread wait over 30 s.
VALGRIND = ["valgrind", "--tool=memcheck", "--leak-check=full", "--show-leak-kinds=all",
            "--errors-for-leak-kinds=all", "--error-exitcode=99", "--track-fds=no", "--fair-sched=yes"]


@pytest.fixture(scope="module", autouse=True)
def need_valgrind():
    if os.environ.get("LOCKSTEP_BUILD", "build") != "build":
        pytest.skip("valgrind runs on the plain build only (sanitizer builds cannot run under it)")
    assert shutil.which("valgrind"), "valgrind is not installed (scripts/install-deps.sh --test installs it)"
    assert MODEL.is_file(), f"no model at {MODEL}"


def check_report(log: str):
    m = re.search(r"ERROR SUMMARY: (\d+) errors", log)
    assert m, f"no valgrind summary in:\n{log[-3000:]}"
    assert int(m.group(1)) == 0, f"valgrind found errors:\n{log[-6000:]}"
    assert "All heap blocks were freed -- no leaks are possible" in log, f"leaks:\n{log[-6000:]}"


def test_run_memcheck(tmp_path):
    log = tmp_path / "vg.log"
    r = subprocess.run([*VALGRIND, f"--log-file={log}", str(EXE), "run", "-m", str(MODEL),
                        "-p", "The capital of France is", "-n", "3", "--temp", "0", "--no-probe"],
                       capture_output=True, text=True, timeout=900)
    report = log.read_text()
    assert r.returncode == 0, f"rc={r.returncode}\n{r.stderr[-3000:]}\n{report[-3000:]}"
    # (the parity probe is memory-checked under ASan+UBSan instead: tests/unit/test_probe.c,
    # make test-asan; under valgrind its three draws on two engines take many minutes)
    check_report(report)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port, method, path, body=None, timeout=300):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    c.request(method, path, body=data, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    out = r.read()
    c.close()
    return r.status, out


def test_server_session_memcheck(tmp_path):
    """Load, chat, a stream, a stream dropped mid-way, bad requests, /metrics, SIGTERM."""
    log = tmp_path / "vg.log"
    port = free_port()
    proc = subprocess.Popen([*VALGRIND, f"--log-file={log}", str(EXE), "serve", "-m", str(MODEL),
                             "--port", str(port), "-np", "2", "-t", "2", "--no-probe"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 600
        while True:
            try:
                if request(port, "GET", "/health", timeout=30)[0] == 200:
                    break
            except OSError:
                pass
            assert proc.poll() is None, f"server died: {proc.stderr.read()[-3000:]}"
            assert time.time() < deadline, "server did not start under valgrind in 600 s"
            time.sleep(1)
        st, out = request(port, "POST", "/v1/chat/completions",
                          {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3})
        assert st == 200 and json.loads(out)["usage"]["completion_tokens"] == 3
        st, out = request(port, "POST", "/v1/completions",
                          {"prompt": "One, two,", "max_tokens": 3, "stream": True, "stop": ["zzz"]})
        assert st == 200 and out.rstrip().endswith(b"data: [DONE]")
        # a stream the client drops after its first event
        s = socket.create_connection(("127.0.0.1", port), timeout=300)
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 64, "stream": True}).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        got = b""
        while b"data:" not in got:
            chunk = s.recv(4096)
            assert chunk, f"connection closed before the first event: {got!r}"
            got += chunk
        s.close()
        for bad in (b"{not json", json.dumps({"messages": "x"}).encode(), json.dumps({"prompt": "x", "n": 17}).encode()):
            st, out = request(port, "POST", "/v1/chat/completions" if b"messages" in bad else "/v1/completions", bad)
            assert st == 400 and "error" in json.loads(out)
        st, _ = request(port, "GET", "/metrics")
        assert st == 200
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    report = log.read_text()
    assert rc == 0, f"rc={rc}\n{proc.stderr.read()[-3000:]}\n{report[-3000:]}"
    check_report(report)
