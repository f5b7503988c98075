"""`lockstep serve`'s chat page at / (src/server/page/), in headless Chromium.

- GET /, /page.js, /page.css are served from the binary with a strict
  Content-Security-Policy and no key (they hold no data); unknown paths stay 404 and
  /health stays what load balancers read.
- In Chromium (Debian's chromium + chromium-driver, driven by selenium): a server with
  --api-key and --spec ngram; the key typed into the page; a two-turn greedy
  conversation whose texts equal /v1/chat/completions's replies for the same messages
  byte for byte; each reply's seed and system_fingerprint shown; its draft line (accepted
  of drafted, and the percentage) consistent; the replay button re-sends the request with that seed and
  the page says "identical" (and "DIFFERENT from character N" for a reply whose shown
  text was altered); the parity verdict shown is /health's.  No CSP violation
  in the browser's console.  LOCKSTEP_SCREENSHOT=docs/server-page.png saves a screenshot
  of the finished conversation there (how the one in docs/ was made).
- A server of several models (router mode): the page's picker lists them, nothing loads
  until one is used, and a reply from the picked model equals the API's for that model.
Skips (a failure under CI=true) when Chromium or chromedriver is missing:
scripts/install-deps.sh --test installs them.
"""
import re
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from test_server import REPO, Server

KEY = "page-test-key"
AUTH = {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def srv(model_path):
    s = Server(model_path, "--parallel", "4", "--ctx-size", "1024", "--api-key", KEY, "--spec", "ngram",
               "--draft-max", "4")
    yield s
    assert s.stop() == 0, s.logtext()


def test_page_is_served_with_a_strict_csp(srv):
    st, body, h = srv.request("GET", "/", headers={})
    assert st == 200 and h["Content-Type"].startswith("text/html") and b'<script src="/page.js"' in body
    csp = h["Content-Security-Policy"]
    for d in ("default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"):
        assert d in csp, csp
    assert "unsafe-inline" not in csp and b"<script>" not in body and b"style=" not in body
    assert h["X-Content-Type-Options"] == "nosniff"
    for path, ctype in (("/page.js", "text/javascript"), ("/page.css", "text/css"), ("/page.svg", "image/svg+xml")):
        st, _, h = srv.request("GET", path, headers={})
        assert st == 200 and h["Content-Type"].startswith(ctype), (path, h)
    # the rest is unchanged: /health open, other paths need the key, then 404; POST / is a 405
    assert srv.request("GET", "/health", headers={})[0] == 200
    assert srv.request("GET", "/nope", headers={})[0] == 401
    st, body, _ = srv.request("GET", "/nope", headers=AUTH)
    assert st == 404 and "/nope" in json.loads(body)["error"]["message"]
    st, _, h = srv.request("POST", "/", {}, headers=AUTH)
    assert st == 405 and h["Allow"] == "GET"
    # a page of another origin cannot use it; the page's own origin can
    bad = dict(AUTH, Origin="http://evil.example")
    assert srv.request("POST", "/v1/chat/completions", {"messages": []}, headers=bad)[0] == 403
    own = dict(AUTH, Origin=f"http://127.0.0.1:{srv.port}")
    st, _, _ = srv.request("POST", "/v1/chat/completions",
                           {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}, headers=own)
    assert st == 200
    # the server's stderr is a file here: no progress lines (they are for terminals)
    assert "parity check" not in srv.logtext()


def _driver():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed (tests/python/requirements.txt)")
    from selenium.webdriver.chrome.service import Service
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not browser or not driver:
        pytest.skip("Chromium or chromedriver is not installed (apt-get install chromium chromium-driver; "
                    "scripts/install-deps.sh --test installs them)")
    o = webdriver.ChromeOptions()
    o.binary_location = browser
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,860",
              "--no-first-run", "--disable-extensions", "--disable-background-networking"):
        o.add_argument(a)
    o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=driver), options=o)


def _wait(what, fn, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        v = fn()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _fill(d, id_, value):
    e = d.find_element("id", id_)
    e.clear()
    e.send_keys(value)


def test_page_chat_replay_and_parity_in_chromium(srv):
    d = _driver()
    try:
        d.get(f"http://127.0.0.1:{srv.port}/")
        parity = _wait("the parity badge", lambda: d.find_element("id", "parity").get_attribute("data-parity"))
        assert parity == srv.health["parity"] == "verified"
        assert d.find_element("id", "parity").text == "parity: verified"
        assert "ngram" in d.find_element("id", "spec").text
        # the key: typed, kept in sessionStorage, sent as Bearer (/props answers with it)
        _fill(d, "apikey", KEY + "\t")
        _wait("/props through the key", lambda: "fingerprint:" in d.find_element("id", "server").text)
        assert d.execute_script("return sessionStorage.getItem('lockstep-api-key')") == KEY
        _fill(d, "temperature", "0")
        _fill(d, "max_tokens", "40")
        turns = ["Count from one to ten in words.", "Now say them again, backwards."]
        messages, replies = [], []
        for i, text in enumerate(turns):
            messages.append({"role": "user", "content": text})
            _fill(d, "input", text)
            d.find_element("id", "send").click()
            _wait(f"reply {i}", lambda: len(d.find_elements("css selector", ".msg.assistant .meta")) == i + 1
                  and d.find_element("tag name", "body").get_attribute("data-state") == "idle")
            st, ref, _ = srv.post("/v1/chat/completions", {"messages": messages, "temperature": 0, "top_p": 1,
                                                           "max_tokens": 40}, headers=AUTH)
            assert st == 200, ref
            msg = d.find_elements("css selector", ".msg.assistant")[i]
            shown = msg.find_element("css selector", ".text").get_property("textContent")
            want = ref["choices"][0]["message"]["content"]
            assert shown.encode() == want.encode(), (shown, want)
            meta = msg.find_element("css selector", ".meta .fields").text
            assert ref["system_fingerprint"] in meta and "seed " in meta, meta
            # The page shows its own reply's draft counts.  They need not equal the reference
            # request's: the adaptive draft length follows measured (wall-clock) costs, so two
            # identical requests may draft differently while their texts stay byte-identical.
            m = re.search(r"draft: (\d+) of (\d+) accepted \((\d+) %\)", meta)
            if ref["timings"]["draft_n"]:
                assert m, (meta, ref["timings"])
            if m:
                a, n, pct = (int(g) for g in m.groups())
                assert 0 <= a <= n and n > 0 and pct == int(100 * a / n + 0.5), meta  # toFixed(0): halves up
            replies.append(meta)
            messages.append({"role": "assistant", "content": want})
        assert any("draft: " in m for m in replies), f"no drafts reported: {replies}"
        # replay the second reply: the same request with its seed, byte-identical
        last = d.find_elements("css selector", ".msg.assistant")[1]
        last.find_element("css selector", "button.replay").click()
        res = last.find_element("css selector", ".replay-result")
        verdict = _wait("the replay verdict", lambda: res.get_attribute("data-verdict"))
        assert verdict == "identical" and res.text.startswith("replay: identical"), res.text
        # the comparison is real: a reply whose shown text was altered replays as different
        first = d.find_elements("css selector", ".msg.assistant")[0]
        d.execute_script("arguments[0].textContent += '!'", first.find_element("css selector", ".text"))
        first.find_element("css selector", "button.replay").click()
        res0 = first.find_element("css selector", ".replay-result")
        verdict = _wait("the altered reply's replay verdict", lambda: res0.get_attribute("data-verdict"))
        n = len(messages[1]["content"])
        assert verdict == "different" and f"DIFFERENT from character {n}" in res0.text, res0.text
        d.execute_script("arguments[0].textContent = arguments[1]", first.find_element("css selector", ".text"),
                         messages[1]["content"])
        d.execute_script("arguments[0].removeAttribute('data-verdict'); arguments[0].textContent = ''", res0)
        last.location_once_scrolled_into_view
        # no CSP violation, no script error (the 401 of /props before the key was typed is expected)
        logs = [e for e in d.get_log("browser") if "Content Security Policy" in e["message"]
                or (e["level"] == "SEVERE" and "/props" not in e["message"])]
        assert not logs, logs
        shot = os.environ.get("LOCKSTEP_SCREENSHOT")
        if shot:
            shot = Path(shot) if Path(shot).is_absolute() else REPO / shot
            shot.parent.mkdir(parents=True, exist_ok=True)
            d.save_screenshot(str(shot))
    finally:
        d.quit()


def test_page_picks_a_model_on_a_server_of_several(model_path):
    """Router mode: the page lists the models, sends the picked one's name, and shows its
    verdict; the reply equals /v1/chat/completions's for that model."""
    from test_server_router import Server as RouterServer

    s = RouterServer("-m", str(model_path), "--alias", "first", "-m", str(model_path), "--alias", "second")
    d = _driver()
    try:
        d.get(f"http://127.0.0.1:{s.port}/")
        _wait("the model picker", lambda: not d.find_element("id", "models").get_attribute("hidden"))
        opts = [o.text for o in d.find_elements("css selector", "#models option")]
        assert opts == ["first", "second"], opts
        assert d.find_element("id", "parity").text == "parity: pending"  # nothing loaded on opening the page
        d.execute_script("const s = document.getElementById('models'); s.value = 'second';"
                         "s.dispatchEvent(new Event('change'));")
        _wait("the picked model's verdict", lambda: d.find_element("id", "parity").get_attribute("data-parity")
              == "verified")
        _fill(d, "temperature", "0")
        _fill(d, "max_tokens", "24")
        _fill(d, "input", "Name a colour.")
        d.find_element("id", "send").click()
        _wait("the reply", lambda: len(d.find_elements("css selector", ".msg.assistant .meta")) == 1
              and d.find_element("tag name", "body").get_attribute("data-state") == "idle")
        st, ref = s.post("/v1/chat/completions", {"model": "second", "temperature": 0, "top_p": 1, "max_tokens": 24,
                                                  "messages": [{"role": "user", "content": "Name a colour."}]})
        assert st == 200, ref
        shown = d.find_element("css selector", ".msg.assistant .text").get_property("textContent")
        assert shown.encode() == ref["choices"][0]["message"]["content"].encode()
        status = {m["id"]: m["status"]["value"] for m in s.get("/models")[1]["data"]}
        assert status == {"first": "unloaded", "second": "loaded"}, status
    finally:
        d.quit()
        assert s.stop() == 0, s.logtext()
