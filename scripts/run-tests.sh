#!/usr/bin/env bash
# Runs every C unit test binary, then the Python suites (independent references:
# the gguf package, HF tokenizers, llama-cpp-python).  Exits non-zero if any fails.
# Its closing lines say what this host could not check: instruction sets the CPU
# lacks, and every skipped test (counted, with its reason).  Under CI=true a skip
# caused by a missing model or Python reference is a failure, not a skip.
set -u
cd "$(dirname "$0")/.."
BUILD=${LOCKSTEP_BUILD:-build}
PYTHON=${PYTHON:-python3}
export LOCKSTEP_BUILD=$BUILD MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
LOGS=$BUILD/test-logs
rm -rf "$LOGS"
mkdir -p "$LOGS"
pass=0; fail=0; failed=(); notes=()
# run NAME CMD...: one suite, timed, its output also in $LOGS.
run() {
    local name=$1; shift
    echo "== $name"
    local t0=$SECONDS log="$LOGS/$(echo "$name" | tr -c 'A-Za-z0-9_.-' '_').log"
    if "$@" 2>&1 | tee "$log"; [ "${PIPESTATUS[0]}" -eq 0 ]; then pass=$((pass+1)); else fail=$((fail+1)); failed+=("$name"); fi
    echo "-- $name: $((SECONDS - t0)) s"
}
have=$("$BUILD/lockstep" info --isa 2>/dev/null || echo scalar)
for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    run "$t" "$t"
done
# As on CPUs without AVX-512, and without AVX2: the model's parity across the ISAs
# left, threads and chunks, and the batched engine, must hold there too, and nothing
# may touch a hidden instruction set (the kernel tables assert).  Each pass runs only
# where the CPU has what it hides (elsewhere the main run already was that CPU).
# (The quick subset: the full sweeps ran above, on every ISA this CPU has.  The engine's
# random mixes run only without AVX-512: on the scalar kernels alone 4 cases took over
# 10 minutes; model parity and test_kernels hold the scalar kernels to the same bits.)
# Not at smoke size (LOCKSTEP_TEST_QUICK=2, the sanitizer runs in CI): what these add is
# the dispatch on an older CPU, which make test checks; under a sanitizer they take minutes.
quick=${LOCKSTEP_TEST_QUICK:-1}
hide_cases=${LOCKSTEP_ENGINE_CASES:-4}
[ "$hide_cases" -le 4 ] || hide_cases=4
if [ "$quick" = 2 ]; then
    echo "== older-CPU passes: not at smoke size (LOCKSTEP_TEST_QUICK=2)"
    notes+=("older-CPU passes (LOCKSTEP_CPU_HIDE): not run at smoke size")
else
    # LOCKSTEP_CPU_HIDE=avxvnni hides AVX-VNNI and AVX-512: the kernels an AVX2-only CPU
    # (Zen 2/3) runs; =avx2 hides every SIMD level: the scalar-only CPU.
    above_avx2=no
    case " $have " in *" avxvnni "*|*" avx512 "*) above_avx2=yes ;; esac
    for hide in avxvnni avx2; do
        has=no
        if [ $hide = avxvnni ]; then has=$above_avx2; else case " $have " in *" avx2 "*) has=yes ;; esac; fi
        if [ $has = yes ]; then
            run "$BUILD/tests/test_model_parity (LOCKSTEP_CPU_HIDE=$hide, LOCKSTEP_TEST_QUICK=$quick)" \
                env LOCKSTEP_CPU_HIDE=$hide LOCKSTEP_TEST_QUICK=$quick "$BUILD"/tests/test_model_parity
        else
            notes+=("model parity with LOCKSTEP_CPU_HIDE=$hide: not run (this CPU has nothing it would hide: the main run was that CPU)")
        fi
    done
    if [ $above_avx2 = yes ]; then
        run "$BUILD/tests/test_engine (LOCKSTEP_CPU_HIDE=avxvnni: AVX2 only, $hide_cases cases)" \
            env LOCKSTEP_CPU_HIDE=avxvnni LOCKSTEP_ENGINE_CASES=$hide_cases "$BUILD"/tests/test_engine
    else
        notes+=("the engine as on an AVX2-only CPU: not run separately (this CPU has nothing above avx2: the main run was that CPU)")
    fi
fi
# The Python suites, one pytest process per file: a reference that crashes the process
# (a segfault inside llama-cpp-python, say) fails that file, the others still run, and the
# summary names the crash.  (conftest.py's `llama_cpp` fixture checks llama-cpp-python in a
# process of its own first, so a build that crashes fails only the tests that use it.)
py_pass=0; py_fail=0; py_skip=0; py_err=0; crashed=()
if [ "${1:-}" != "--c-only" ]; then
    if ! "$PYTHON" -c 'import pytest' 2>/dev/null; then
        echo "pytest is not importable by $PYTHON: run \`bash scripts/install-deps.sh --test\` (make test does)"
        fail=$((fail+1)); failed+=("pytest (not installed for $PYTHON)")
    else
        # py_count LOG: adds pytest's closing line ("N failed, N passed, N skipped, N errors
        # in T s") to the totals; fails when the log has none (the process died).
        py_count() {
            local last k n
            last=$(grep -E '^(=+ )?[0-9]+ (passed|failed|skipped|errors?|deselected)' "$1" | tail -1)
            [ -n "$last" ] || return 1
            for k in passed failed skipped error; do
                n=$(echo "$last" | grep -oE "[0-9]+ $k" | grep -oE '^[0-9]+' || true)
                case $k in passed) py_pass=$((py_pass+${n:-0}));; failed) py_fail=$((py_fail+${n:-0}));;
                           skipped) py_skip=$((py_skip+${n:-0}));; error) py_err=$((py_err+${n:-0}));; esac
            done
        }
        logof() { echo "$LOGS/$(echo "$1" | tr -c 'A-Za-z0-9_.-' '_').log"; }
        for f in tests/python/test_*.py; do
            name="pytest $f"
            run "$name" "$PYTHON" -X faulthandler -m pytest -q -rs --durations=5 -p no:cacheprovider "$f"
            py_count "$(logof "$name")" && continue
            # The process died.  faulthandler names the test function it was in: that test
            # fails, and the file runs once more without it.
            fn=$(grep -oE 'File "[^"]*tests/python/[^"]*", line [0-9]+ in test_[A-Za-z_0-9]+' "$(logof "$name")" \
                 | tail -1 | grep -oE 'test_[A-Za-z_0-9]+$' || true)
            if [ -z "$fn" ]; then
                crashed+=("$f: the pytest process died outside a test (see $(logof "$name")); none of its tests counted")
                continue
            fi
            py_fail=$((py_fail+1))
            crashed+=("$f::$fn: killed the pytest process (faulthandler's traceback: $(logof "$name")); the file's other tests ran again without it")
            run "$name (again, without $fn)" "$PYTHON" -X faulthandler -m pytest -q -rs -p no:cacheprovider \
                -k "not $fn" "$f"
            py_count "$(logof "$name (again, without $fn)")" \
                || crashed+=("$f: crashed again without $fn (see $(logof "$name (again, without $fn)"))")
        done
    fi
fi
echo
echo "== summary"
echo "instruction sets checked on this CPU: $have"
for isa in avx2 avxvnni avx512; do
    case " $have " in *" $isa "*) ;; *) echo "NOT CHECKED: the $isa kernels (this CPU lacks them${LOCKSTEP_CPU_HIDE:+, or LOCKSTEP_CPU_HIDE=$LOCKSTEP_CPU_HIDE hides them})" ;; esac
done
for n in "${notes[@]+"${notes[@]}"}"; do echo "not run: $n"; done
# Skips: the C tests print "SKIPPED: ..." (tests/unit/fixture.h, quick.h); pytest -rs
# prints "SKIPPED [n] file:line: reason"; the kernels name ISA paths they could not run.
# (A pass that hides an ISA on purpose says "LOCKSTEP_CPU_HIDE hides them": not a gap of this host.)
skips=$(cat "$LOGS"/*.log 2>/dev/null | grep -E '^(SKIPPED|NOT CHECKED)' | grep -v 'LOCKSTEP_CPU_HIDE hides them' \
        | sort | uniq -c | sed 's/^ */  /')
n_skip=$(cat "$LOGS"/*.log 2>/dev/null | grep -cE '^SKIPPED' || true)
if [ -n "$skips" ]; then
    echo "skipped or not checked ($n_skip skip lines):"
    echo "$skips"
else
    echo "skipped: nothing"
fi
if [ "${1:-}" != "--c-only" ]; then
    echo "python tests: $py_pass passed, $py_fail failed, $py_skip skipped, $py_err errors"
fi
for c in "${crashed[@]+"${crashed[@]}"}"; do echo "CRASHED: $c"; done
[ ${#failed[@]} -eq 0 ] || printf 'FAILED: %s\n' "${failed[@]}"
echo "suites: $pass passed, $fail failed"
[ $fail -eq 0 ]
