#!/usr/bin/env bash
# Runs every C unit test binary, then the Python suites (independent references:
# the gguf package, HF tokenizers, llama-cpp-python).  Exits non-zero if any fails.
set -u
cd "$(dirname "$0")/.."
BUILD=${LOCKSTEP_BUILD:-build}
PYTHON=${PYTHON:-python3}
export LOCKSTEP_BUILD=$BUILD MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
pass=0; fail=0; failed=()
for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    echo "== $t"
    if "$t"; then pass=$((pass+1)); else fail=$((fail+1)); failed+=("$t"); fi
done
if [ "${1:-}" != "--c-only" ]; then
    echo "== pytest tests/python"
    "$PYTHON" -m pytest -q tests/python
    rc=$?
    if [ $rc -eq 0 ]; then pass=$((pass+1)); else fail=$((fail+1)); failed+=("pytest(rc=$rc)"); fi
fi
[ ${#failed[@]} -eq 0 ] || printf 'FAILED: %s\n' "${failed[@]}"
echo "suites: $pass passed, $fail failed"
[ $fail -eq 0 ]
