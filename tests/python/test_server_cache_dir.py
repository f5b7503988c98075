"""`lockstep serve --cache-dir`: the prefix cache survives a restart, bit for bit (issue 32, item 4).

- A server with --cache-dir answers a long prompt and is stopped (SIGTERM); a new server on
  the same directory answers that prompt plus a continuation with the same bytes (text and
  logprobs of a seeded, sampled reply) as a fresh server without a cache, and the hit is
  visible: usage.prompt_tokens_details.cached_tokens and lockstep_cache_dir_* in /metrics.
- A block file flipped in one byte, truncated, replaced by a file written for another
  model (Gemma 3 270M) or patched to another recipe version is ignored with a warning on
  stderr that names the file and the reason; the answer is still the fresh server's, and
  only the blocks before the bad one come from the directory.
- --cache-dir-max: the directory is kept under the cap.
"""
import json
import os
import shutil
import struct
from pathlib import Path

import pytest

from test_server_ops import EXE, Srv

REPO = Path(__file__).resolve().parents[2]
BS = 16
PROMPT = " ".join(f"Item {i}: the {i}th entry of the ledger is {i * 37 % 101} units." for i in range(18))
CONT = " The total of all the entries above is"
BODY = {"max_tokens": 12, "temperature": 0.7, "seed": 7, "logprobs": 3}


def files_by_prefix(d: Path) -> dict:
    """The directory's block files by the number of prefix tokens each holds (header offset 120)."""
    out = {}
    for f in d.glob("*.lskv"):
        b = f.read_bytes()
        assert b[:8] == b"LSKVBLK\0"
        out[struct.unpack_from("<I", b, 120)[0]] = f
    return out


def answer(srv, prompt):
    st, j, _ = srv.post("/v1/completions", {"prompt": prompt, **BODY})
    assert st == 200, j
    return j


def reply_bytes(j) -> bytes:
    """What must not change: the choices (text, logprobs, finish) and the token counts."""
    u = dict(j["usage"])
    u.pop("prompt_tokens_details", None)
    return json.dumps([j["choices"], u], sort_keys=True).encode()


def cached(j) -> int:
    return j["usage"]["prompt_tokens_details"]["cached_tokens"]


@pytest.fixture(scope="module")
def fresh(model_path):
    """The reply of a server without a cache directory, and a directory written by a
    server that answered the prompt alone (kept pristine; tests copy it)."""
    s = Srv(model_path)
    try:
        ref = answer(s, PROMPT + CONT)
    finally:
        assert s.stop() == 0, s.logtext()
    assert cached(ref) == 0
    base = Path(os.environ.get("TMPDIR", "/tmp")) / f"lockstep-cachedir-{os.getpid()}"
    shutil.rmtree(base, ignore_errors=True)
    pristine = base / "pristine"
    s = Srv(model_path, "--cache-dir", str(pristine))
    try:
        first = answer(s, PROMPT)
    finally:
        assert s.stop() == 0, s.logtext()
    n_prompt = first["usage"]["prompt_tokens"]
    blocks = files_by_prefix(pristine)
    assert n_prompt > 10 * BS and len(blocks) >= n_prompt // BS, (n_prompt, sorted(blocks))
    yield ref, pristine, base
    shutil.rmtree(base, ignore_errors=True)


def restart(model_path, d: Path, *args):
    s = Srv(model_path, "--cache-dir", str(d), *args)
    try:
        j = answer(s, PROMPT + CONT)
        m = s.metrics()
    finally:
        rc = s.stop()
    assert rc == 0, s.logtext()
    return j, m, s.logtext()


def test_restart_gives_the_bytes_of_a_fresh_server(fresh, model_path, report):
    ref, pristine, base = fresh
    d = base / "restart"
    shutil.copytree(pristine, d)
    n_files = len(files_by_prefix(d))
    j, m, log = restart(model_path, d)
    assert reply_bytes(j) == reply_bytes(ref)
    assert cached(j) == n_files * BS, (cached(j), n_files)
    assert m["lockstep_cache_dir_loaded_blocks_total"] == n_files
    assert m["lockstep_cache_dir_rejected_files_total"] == 0
    assert m["lockstep_prefix_cache_hit_tokens_total"] == cached(j)
    assert "ignoring" not in log
    assert len(files_by_prefix(d)) > n_files  # the continuation's blocks were written when it ended
    report(f"after a restart {cached(j)} of {j['usage']['prompt_tokens']} prompt tokens came from {n_files} block "
           f"files; reply bytes (text, logprobs) equal a fresh server's")


def damage_flip(p: Path, _):
    b = bytearray(p.read_bytes())
    b[len(b) // 2] ^= 0x01
    p.write_bytes(bytes(b))


def damage_truncate(p: Path, _):
    b = p.read_bytes()
    p.write_bytes(b[: len(b) - 1000])


def damage_recipe(p: Path, _):
    b = bytearray(p.read_bytes())
    struct.pack_into("<I", b, 12, struct.unpack_from("<I", b, 12)[0] + 1)
    p.write_bytes(bytes(b))


def damage_other_model(p: Path, other_dir):
    g = files_by_prefix(other_dir)
    shutil.copyfile(g[2 * BS], p)


@pytest.fixture(scope="module")
def other_dir(fresh, model_path):
    """Block files of another model of the very same shape: the default model with one
    character of its general.name changed (another sha256, the same weights and KV layout),
    so only the model check can tell its files apart."""
    _, _, base = fresh
    other = base / "other.gguf"
    b = bytearray(Path(model_path).read_bytes())
    i = b.find(b"general.name", 0, 1 << 20)
    assert i > 0
    j = i + len(b"general.name") + 4 + 8  # the value: type u32, length u64, then the characters
    b[j] ^= 0x01
    other.write_bytes(bytes(b))
    d = base / "other"
    s = Srv(other, "--cache-dir", str(d))
    try:
        answer(s, PROMPT)
    finally:
        assert s.stop() == 0, s.logtext()
    assert 2 * BS in files_by_prefix(d)
    return d


@pytest.mark.parametrize("damage,why", [
    (damage_flip, "checksum mismatch"),
    (damage_truncate, "truncated"),
    (damage_other_model, "written for another model"),
    (damage_recipe, "recipe version"),
])
def test_a_bad_file_is_ignored_with_a_warning(fresh, model_path, request, damage, why):
    ref, pristine, base = fresh
    gdir = request.getfixturevalue("other_dir") if damage is damage_other_model else None
    d = base / f"bad-{damage.__name__}"
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(pristine, d)
    victim = files_by_prefix(d)[2 * BS]  # the second block: the first still loads
    damage(victim, gdir)
    j, m, log = restart(model_path, d)
    assert reply_bytes(j) == reply_bytes(ref)
    assert cached(j) == BS
    assert m["lockstep_cache_dir_rejected_files_total"] == 1
    assert m["lockstep_cache_dir_loaded_blocks_total"] == 1
    line = next((x for x in log.splitlines() if "ignoring" in x), "")
    assert victim.name in line and why in line, log
    # the bad file was removed, and a good one written in its place when the request ended
    assert victim.exists() and struct.unpack_from("<I", victim.read_bytes(), 12)[0] == 1
    j2, _, log2 = restart(model_path, d)
    assert reply_bytes(j2) == reply_bytes(ref) and cached(j2) > 2 * BS and "ignoring" not in log2


def test_size_cap(fresh, model_path):
    ref, pristine, base = fresh
    d = base / "capped"
    shutil.copytree(pristine, d)
    one = max(f.stat().st_size for f in d.glob("*.lskv"))
    cap = 8 * one
    j, _, _ = restart(model_path, d, "--cache-dir-max", str(cap))
    assert reply_bytes(j) == reply_bytes(ref)
    assert sum(f.stat().st_size for f in d.glob("*.lskv")) <= cap
    assert not list(d.glob("*.tmp.*"))


def test_flags_are_checked(model_path, tmp_path):
    import subprocess
    p = subprocess.run([str(EXE), "serve", "-m", str(model_path), "--cache-dir-max", "1G"], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 2 and "--cache-dir-max needs --cache-dir" in p.stderr
    p = subprocess.run([str(EXE), "serve", "-m", str(model_path), "--cache-dir", str(tmp_path), "--cache-dir-max",
                        "lots"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "--cache-dir-max" in p.stderr


def test_run_cache_dir(model_path, tmp_path):
    """`lockstep run --cache-dir`: the second run of a prompt loads its blocks, same tokens."""
    import subprocess
    out = []
    for _ in range(2):
        p = subprocess.run([str(EXE), "run", "-m", str(model_path), "-p", PROMPT, "-n", "8", "--temp", "0.7",
                            "--seed", "3", "--no-probe", "-t", "1", "--json", "--cache-dir", str(tmp_path)],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        out.append(json.loads(p.stdout))
    assert out[0]["n_cached"] == 0 and out[1]["n_cached"] >= (out[1]["n_prompt"] // BS - 1) * BS
    assert out[0]["tokens"] == out[1]["tokens"] and out[0]["text"] == out[1]["text"]
