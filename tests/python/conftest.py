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
