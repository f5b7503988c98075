"""The layering promises of docs/embedding.md and the layout:
- the command line and the server include nothing of the library but lockstep.h;
- the shared library exports exactly the public API (the LS_API functions of lockstep.h);
- the embedding example, built from the public header and the shared library alone,
  runs: the probe verifies its engine and a replayed request gives the same tokens."""
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / os.environ.get("LOCKSTEP_BUILD", "build")


def test_cli_and_server_use_only_the_public_header():
    own = {"cli/cli.h", "lockstep.h"} | {f"server/{p.name}" for p in (ROOT / "src/server").glob("*.h")}
    bad = []
    for f in sorted((ROOT / "src/cli").glob("*.[ch]")) + sorted((ROOT / "src/server").glob("*.[ch]")):
        for inc in re.findall(r'^#include "([^"]+)"', f.read_text(), re.M):
            if inc not in own:
                bad.append(f"{f.relative_to(ROOT)}: {inc}")
    assert not bad, "the CLI and the server must use only lockstep.h:\n" + "\n".join(bad)


def public_functions():
    text = (ROOT / "include/lockstep.h").read_text()
    return set(re.findall(r"LS_API[^(;]*?\b(ls_\w+)\s*\(", text))


def test_shared_library_exports_exactly_the_public_api():
    so = BUILD / "liblockstep.so"
    if not so.exists():
        pytest.fail(f"{so} not built")
    out = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True, check=True).stdout
    exported = {l.split()[-1] for l in out.splitlines() if l.split()[-2] in ("T", "W")}
    api = public_functions()
    assert len(api) > 30
    assert exported == api, (f"exported but not public: {sorted(exported - api)}; "
                             f"public but not exported: {sorted(api - exported)}")


def test_embedding_example_runs(model_path):
    exe = BUILD / "embed"
    assert exe.exists(), f"{exe} not built (make)"
    r = subprocess.run([str(exe), str(model_path), "Name three colours."], capture_output=True, text=True,
                       timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "parity: verified" in r.stderr and "replay identical" in r.stderr, r.stderr
    assert len(r.stdout.strip()) > 10
