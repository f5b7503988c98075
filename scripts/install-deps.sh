#!/usr/bin/env bash
# Installs what lockstep needs on Debian, skipping what is already there.
#   install-deps.sh          build + run: a C compiler, make, pkg-config, PCRE2, pip
#   install-deps.sh --test   also the test tools: cmocka, nginx (test_server_ops), and the Python references
#                            (gguf, tokenizers, numpy, pytest, llama-cpp-python from sdist)
#   install-deps.sh --bench  what `make bench` needs: cmake and g++ (llama.cpp), matplotlib
set -euo pipefail
want_test=0; [ "${1:-}" = "--test" ] && want_test=1
want_bench=0; [ "${1:-}" = "--bench" ] && want_bench=1
pkgs=(gcc make pkg-config libpcre2-dev libcjson-dev libssl-dev libmicrohttpd-dev)
[ $want_test = 1 ] && pkgs+=(libcmocka-dev cmake g++ clang valgrind nginx)  # nginx: the replicas test
[ $want_bench = 1 ] && pkgs+=(cmake g++)
missing=()
for p in "${pkgs[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
PYTHON=${PYTHON:-python3}
if ! command -v "$PYTHON" >/dev/null 2>&1; then missing+=(python3 python3-pip)
elif ! "$PYTHON" -m pip --version >/dev/null 2>&1; then missing+=(python3-pip); fi
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "install-deps: missing packages: ${missing[*]} (run as root, or install them)" >&2; exit 1
    fi
    echo "install-deps: apt-get install ${missing[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
avx512_flags() {
    if grep -qw avx512_vnni /proc/cpuinfo; then
        echo "-DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_BF16=ON"
    fi
}
if [ $want_test = 1 ]; then
    # Pinned so the independent references do not move under the tests.
    pyreq=(gguf==0.19.0 tokenizers==0.23.3 sentencepiece==0.2.3 numpy pytest jinja2 llama-cpp-python==0.3.36)
    if ! "$PYTHON" - <<'PY' 2>/dev/null
import importlib.metadata as m, sys
need = {"gguf": "0.19.0", "tokenizers": "0.23.3", "sentencepiece": "0.2.3", "llama_cpp_python": "0.3.36"}
for k, v in need.items():
    if m.version(k) != v: sys.exit(1)
import numpy, pytest, jinja2
PY
    then
        echo "install-deps: pip install ${pyreq[*]} (llama-cpp-python builds from source: several minutes)" >&2
        # Explicit ISA flags instead of GGML_NATIVE: -march=native also turns on AMX on
        # CPUs that report it, and ggml's AMX path dies with SIGILL where the kernel
        # has not granted the tile state (seen on this project's VMs).
        CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON $(avx512_flags)" \
        CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$PYTHON" -m pip install -q --no-binary llama-cpp-python \
            "${pyreq[@]}" 2>&1 | grep -v 'Running pip as the' || true
        "$PYTHON" -c 'import gguf, tokenizers, numpy, pytest, llama_cpp' \
            || { echo "install-deps: python test references failed to install" >&2; exit 1; }
    fi
    # jsonschema: the independent reference for the JSON Schema -> grammar converter and
    # the server's json_schema replies (test_grammar_ref.py, test_server_grammar.py).
    if ! "$PYTHON" -c 'import importlib.metadata as m, sys; sys.exit(m.version("jsonschema") != "4.26.0")' 2>/dev/null; then
        echo "install-deps: pip install jsonschema==4.26.0" >&2
        "$PYTHON" -m pip install -q jsonschema==4.26.0 2>&1 | grep -v 'Running pip as the' || true
        "$PYTHON" -c 'import jsonschema' || { echo "install-deps: jsonschema failed to install" >&2; exit 1; }
    fi
    # The official OpenAI client, for the server tests (separate: no llama.cpp rebuild).
    if ! "$PYTHON" -c 'import importlib.metadata as m, sys; sys.exit(m.version("openai") != "3.57.0")' 2>/dev/null; then
        echo "install-deps: pip install openai==3.57.0" >&2
        "$PYTHON" -m pip install -q openai==3.57.0 2>&1 | grep -v 'Running pip as the' || true
        "$PYTHON" -c 'import openai' || { echo "install-deps: openai failed to install" >&2; exit 1; }
    fi
fi
if [ $want_bench = 1 ] && ! "$PYTHON" -c 'import matplotlib' 2>/dev/null; then
    echo "install-deps: pip install matplotlib" >&2
    "$PYTHON" -m pip install -q matplotlib 2>&1 | grep -v 'Running pip as the' || true
    "$PYTHON" -c 'import matplotlib' || { echo "install-deps: matplotlib failed to install" >&2; exit 1; }
fi
