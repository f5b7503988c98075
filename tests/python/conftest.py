"""Shared pytest fixtures for the Python suites (independent references: the gguf
package, HF tokenizers, llama-cpp-python).

Environment:
  LOCKSTEP_BUILD  build folder holding liblockstep.so (default: build), relative to the repo root
  MODEL           GGUF model file (default: models/SmolLM2-135M-Instruct.Q4_1.gguf), relative to the repo root
  CI              when true, a skipped test is a failure (a missing model or Python reference
                  must not turn a CI run green), except tests marked `optional` or whose skip
                  reason says "[optional in CI]" (files CI does not fetch); every skip is
                  listed, counted, in the terminal summary either way (pytest -rs)
"""
import ctypes
import os
import tempfile
from pathlib import Path

import pytest

# The parity probe memoizes its verdict (~/.cache/lockstep): a test run probes afresh.
os.environ["LOCKSTEP_CACHE"] = tempfile.mkdtemp(prefix="lockstep-test-cache-")

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = "models/SmolLM2-135M-Instruct.Q4_1.gguf"

_report_lines: list[str] = []


def _resolve(p: str) -> Path:
    path = Path(p)
    return path if path.is_absolute() else REPO_ROOT / path


@pytest.fixture(scope="session")
def lib() -> ctypes.CDLL:
    """ctypes handle on $LOCKSTEP_BUILD/liblockstep_test.so, the build that exports the
    internals these white-box tests call (set argtypes in the test module)."""
    so = _resolve(os.environ.get("LOCKSTEP_BUILD", "build")) / "liblockstep_test.so"
    if not so.exists():
        pytest.fail(f"{so} not found: run `make lib` first")
    return ctypes.CDLL(str(so))


@pytest.fixture(scope="session")
def model_path() -> Path:
    """Path of $MODEL (default model); skips the test if the file is absent."""
    path = _resolve(os.environ.get("MODEL", DEFAULT_MODEL))
    if not path.exists():
        pytest.skip(f"model {path} not present (make model)")
    return path


_LLAMA_CPP_CHECK = r"""
import sys, numpy as np, llama_cpp
m = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=64, n_batch=64, n_threads=2, logits_all=True, verbose=False)
m.eval([1, 504, 3458, 314, 4649, 282, 4649])
assert np.isfinite(np.array(m.scores[:7])).all()
e = llama_cpp.Llama(model_path=sys.argv[1], embedding=True, n_ctx=64, verbose=False)
assert len(e.embed("a check")) > 0
print("llama_cpp ok")
"""
_llama_cpp_state: dict = {}


@pytest.fixture(scope="session")
def llama_cpp():
    """The llama-cpp-python module, after a forward pass and an embedding in a process of
    its own have shown that it works on this host.  A build that crashes (ggml's AMX path
    on a host that has not granted the tile state died in `ldtilecfg`) fails each test
    that needs it, with the reason, instead of killing the whole pytest run.  Absent, the
    test is skipped (a failure under CI=true)."""
    if "mod" not in _llama_cpp_state:
        try:
            import llama_cpp as mod
        except ImportError as e:
            _llama_cpp_state["mod"], _llama_cpp_state["why"] = None, f"llama-cpp-python not installed ({e})"
        else:
            import subprocess
            import sys

            path = _resolve(os.environ.get("MODEL", DEFAULT_MODEL))
            if not path.exists():
                pytest.skip(f"model {path} not present (make model): llama-cpp-python is checked on it")
            r = subprocess.run([sys.executable, "-c", _LLAMA_CPP_CHECK, str(path)], capture_output=True, text=True,
                               timeout=600)
            if r.returncode == 0 and "llama_cpp ok" in r.stdout:
                _llama_cpp_state["mod"], _llama_cpp_state["why"] = mod, ""
            else:
                how = f"killed by signal {-r.returncode}" if r.returncode < 0 else f"exit {r.returncode}"
                _llama_cpp_state["mod"] = False
                _llama_cpp_state["why"] = (f"llama-cpp-python {mod.__version__} does not run on this host ({how}: "
                                           f"{(r.stdout + r.stderr).strip()[-500:]}); "
                                           f"`bash scripts/install-deps.sh --test` rebuilds it")
    mod = _llama_cpp_state["mod"]
    if mod is None:
        pytest.skip(_llama_cpp_state["why"])
    if mod is False:
        pytest.fail(_llama_cpp_state["why"])
    return mod


def add_report(line: str) -> None:
    """For module-scoped fixtures: a line for the terminal summary."""
    _report_lines.append(line)


@pytest.fixture
def report(request):
    """report(line): a line printed in the terminal summary of the run, pass or fail."""
    def add(line: str) -> None:
        _report_lines.append(f"{request.node.nodeid}: {line}")
    return add


def pytest_terminal_summary(terminalreporter):
    if _report_lines:
        terminalreporter.section("lockstep report")
        for line in _report_lines:
            terminalreporter.write_line(line)


# A skip reason containing this may stand under CI too (inputs CI does not fetch).
OPTIONAL = "[optional in CI]"


def _ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def pytest_configure(config):
    config.addinivalue_line("markers", "optional: may skip under CI (its input is not fetched there)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped and _ci():
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        if item.get_closest_marker("optional") is not None or OPTIONAL in reason:
            return
        rep.outcome = "failed"
        rep.longrepr = f"CI=true: a skip is a failure here ({reason})"
