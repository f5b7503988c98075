"""`lockstep serve`'s progress lines for a long prefill (issue 32, item 6): on a terminal
(stderr a pty) a prompt that prefills for more than 2 s gets `prefill N/M tokens` lines and
a `prefill of M tokens done` line; with --no-progress, or when stderr is a file, none.
"""
import json
import os
import pty
import signal
import subprocess
import threading
import time
import urllib.request

import pytest

from test_server_ops import EXE, free_port

PROMPT = " ".join(f"Line {i}: the value of register {i % 17} is now {i * 7919 % 1000}." for i in range(200))  # ~2,700 tokens: several seconds of prefill on any CPU


def serve_once(model_path, *args, tty: bool):
    """Starts serve (stderr a pty or a pipe), sends one long completion, stops it; returns
    (stderr text, request seconds)."""
    port = free_port()
    cmd = [str(EXE), "serve", "-m", str(model_path), "--port", str(port), "-t", "1", "--no-probe",
           "--parallel", "1", "--ctx-size", "8192", *args]
    chunks = []
    if tty:
        master, slave = pty.openpty()
        p = subprocess.Popen(cmd, stdout=slave, stderr=slave, stdin=subprocess.DEVNULL)
        os.close(slave)

        def pump():
            while True:
                try:
                    b = os.read(master, 4096)
                except OSError:
                    break
                if not b:
                    break
                chunks.append(b)
        t = threading.Thread(target=pump, daemon=True)
        t.start()
    else:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert p.poll() is None and time.time() < deadline, "server did not start"
            time.sleep(0.1)
        body = json.dumps({"prompt": PROMPT, "max_tokens": 1, "temperature": 0}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                     {"Content-Type": "application/json"})
        t0 = time.time()
        with urllib.request.urlopen(req, timeout=300) as r:
            j = json.loads(r.read())
        secs = time.time() - t0
        assert j["usage"]["prompt_tokens"] > 2500
    finally:
        p.send_signal(signal.SIGTERM)
        out = p.communicate(timeout=60)[0] if not tty else None
        rc = p.wait(timeout=60)
    assert rc == 0, f"serve exited {rc}"
    if tty:
        t.join(timeout=10)
        os.close(master)
        return b"".join(chunks).decode(errors="replace"), secs
    return out.decode(errors="replace"), secs


def test_prefill_progress_on_a_terminal_only(model_path):
    text, secs = serve_once(model_path, tty=True)
    if secs < 3:
        pytest.skip(f"the prefill took {secs:.1f} s here, under the 2 s before the first progress line")
    assert "prefill " in text and "tokens (" in text, text
    assert "prefill of " in text and " tokens done in " in text, text
    quiet, _ = serve_once(model_path, "--no-progress", tty=True)
    assert "prefill" not in quiet, quiet
    piped, _ = serve_once(model_path, tty=False)
    assert "prefill" not in piped, piped
