#!/usr/bin/env bash
# Installs what lockstep needs on Debian, skipping what is already there.
#   install-deps.sh             build + run: a C compiler, make, pkg-config, PCRE2, cJSON, xxd, pip
#   install-deps.sh --test      also the test tools (cmocka, clang, valgrind, nginx, chromium, PyTorch for
#                               the MTP fitter) and the Python references in the project's virtual environment
#   install-deps.sh --bench     what `make bench` needs: cmake and g++ (llama.cpp), matplotlib
#   install-deps.sh --venv-path prints the virtual environment's path and exits
#
# The test references (tests/python/requirements.txt, pinned, plus llama-cpp-python built
# here from its sdist) live in a virtual environment of their own, outside the checkout so
# that every clone on a machine shares it, named by the hash of the llama-cpp-python build
# (its version and flags) and the Python it runs on:
#   ${LOCKSTEP_VENV:-${XDG_CACHE_HOME:-~/.cache}/lockstep/venv-HASH}
# A change to requirements.txt reinstalls those pins into it (seconds), not llama.cpp.
# Nothing already installed on the machine is trusted: the venv does not see the system's
# site-packages, pip's wheel cache is not used for llama-cpp-python, and the built
# llama-cpp-python is checked for what it must not use (AMX) and for a working forward
# pass in a separate process; a bad build is rebuilt once, then refused.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
req="$root/tests/python/requirements.txt"
LLAMA_CPP_PY=llama-cpp-python==0.3.36

# Explicit ISA flags instead of GGML_NATIVE: -march=native also turns on AMX on CPUs that
# report it.
llama_cmake_args() {
    local a="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
    a="$a -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
    if grep -qw avx512_vnni /proc/cpuinfo; then
        a="$a -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_BF16=ON"
    fi
    echo "$a"
}
venv_path() {
    local key
    key=$( { echo "$LLAMA_CPP_PY"; llama_cmake_args; "${PYTHON:-python3}" -c 'import sys; print(sys.version)'; } \
          | sha256sum | cut -c1-12)
    echo "${LOCKSTEP_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/lockstep/venv-$key}"
}
mode=${1:-}
case "$mode" in
--venv-path) venv_path; exit 0 ;;
""|--test|--bench) ;;
*) echo "install-deps: unknown option '$mode' (--test, --bench, --venv-path)" >&2; exit 2 ;;
esac
want_test=0; [ "$mode" = "--test" ] && want_test=1
want_bench=0; [ "$mode" = "--bench" ] && want_bench=1

# apt-get, waiting up to 10 minutes for the dpkg and package-list locks (a fresh machine
# may be running unattended upgrades) instead of failing at once.
apt_wait() {
    local i
    for i in $(seq 1 60); do
        if DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 "$@"; then return 0; fi
        # Retry only while another apt or dpkg holds a lock; any other failure is final.
        if ! pgrep -x 'apt|apt-get|dpkg|unattended-upgr|unattended-upgrade' >/dev/null 2>&1; then return 1; fi
        echo "install-deps: waiting for another package manager to finish ($i)" >&2
        sleep 10
    done
    return 1
}

pkgs=(gcc make pkg-config libpcre2-dev libcjson-dev libssl-dev libmicrohttpd-dev xxd)  # xxd: the chat page
# nginx: the replicas test; chromium + chromium-driver: the chat page's browser test;
# python3-torch: tools/fit_mtp.py's tiny fit (it runs under the system python3, not the venv),
# with OpenBLAS in place of the reference BLAS (about 5x faster matmuls)
[ $want_test = 1 ] && pkgs+=(libcmocka-dev cmake g++ clang valgrind nginx chromium chromium-driver python3-torch
                             libopenblas0-pthread)
[ $want_bench = 1 ] && pkgs+=(cmake g++)
missing=()
for p in "${pkgs[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
PYTHON=${PYTHON:-python3}
if ! command -v "$PYTHON" >/dev/null 2>&1; then missing+=(python3 python3-pip python3-venv)
else
    "$PYTHON" -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
    if [ $want_test = 1 ] && ! "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1; then missing+=(python3-venv); fi
fi
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "install-deps: missing packages: ${missing[*]} (run as root, or install them)" >&2; exit 1
    fi
    echo "install-deps: apt-get install ${missing[*]}" >&2
    apt_wait update -qq || { echo "install-deps: apt-get update failed" >&2; exit 1; }
    apt_wait install -y -qq "${missing[@]}" >/dev/null || { echo "install-deps: apt-get install failed" >&2; exit 1; }
fi

# A llama-cpp-python is good when its ggml was built without AMX (ggml's AMX path dies in
# `ldtilecfg` where the kernel has not granted the tile state: seen on this project's VMs)
# and, in a process of its own, it runs a forward pass over a tiny model written by the
# gguf package.  Prints the reason when it is not.
llama_cpp_check() {
    local vpy=$1
    "$vpy" - <<'PY' 2>&1
import subprocess, sys, tempfile, os
info = subprocess.run([sys.executable, "-c", "import llama_cpp; print(llama_cpp.llama_print_system_info().decode())"],
                      capture_output=True, text=True, timeout=120)
if info.returncode != 0:
    sys.exit(f"import llama_cpp failed (exit {info.returncode}): {info.stderr.strip()[-400:]}")
if "AMX_INT8 = 1" in info.stdout or "AMX = 1" in info.stdout:
    sys.exit(f"it was built with AMX: {info.stdout.strip()}")
code = r'''
import sys, numpy as np, gguf, llama_cpp
p = sys.argv[1]
w = gguf.GGUFWriter(p, "llama")
E, F, V, H = 64, 128, 256, 4
w.add_context_length(64); w.add_embedding_length(E); w.add_block_count(1); w.add_feed_forward_length(F)
w.add_head_count(H); w.add_head_count_kv(H); w.add_layer_norm_rms_eps(1e-5); w.add_rope_dimension_count(E // H)
w.add_tokenizer_model("llama"); w.add_token_list([b"<unk>", b"<s>", b"</s>"] + [bytes([65 + i % 26]) * (1 + i // 26) for i in range(V - 3)])
w.add_token_scores([0.0] * V); w.add_token_types([2, 3, 3] + [1] * (V - 3))
r = np.random.default_rng(0)
def t(n, *s): w.add_tensor(n, (r.standard_normal(s) * 0.05).astype(np.float32))
t("token_embd.weight", V, E); t("output_norm.weight", E); t("output.weight", V, E)
for n, s in [("attn_norm", (E,)), ("attn_q", (E, E)), ("attn_k", (E, E)), ("attn_v", (E, E)), ("attn_output", (E, E)),
             ("ffn_norm", (E,)), ("ffn_gate", (F, E)), ("ffn_up", (F, E)), ("ffn_down", (E, F))]:
    t(f"blk.0.{n}.weight", *s)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
m = llama_cpp.Llama(model_path=p, n_ctx=64, n_batch=64, n_threads=2, logits_all=True, verbose=False)
m.eval([1, 5, 9, 13, 17, 21, 25, 29])
assert np.isfinite(np.array(m.scores[:8])).all()
print("ok")
'''
with tempfile.TemporaryDirectory() as d:
    r = subprocess.run([sys.executable, "-c", code, os.path.join(d, "tiny.gguf")], capture_output=True, text=True,
                       timeout=300)
if r.returncode != 0 or "ok" not in r.stdout:
    how = f"signal {-r.returncode}" if r.returncode < 0 else f"exit {r.returncode}"
    sys.exit(f"its forward pass failed ({how}): {(r.stdout + r.stderr).strip()[-600:]}")
PY
}

if [ $want_test = 1 ]; then
    venv=$(venv_path)
    vpy="$venv/bin/python"
    llama_stamp="$venv/.lockstep-llama-ok"        # llama-cpp-python built and checked
    req_stamp="$venv/.lockstep-requirements"      # the requirements.txt last installed
    req_hash=$(sha256sum < "$req" | cut -c1-64)
    if [ ! -f "$llama_stamp" ] || [ ! -x "$vpy" ] || ! "$vpy" -c 'import llama_cpp' 2>/dev/null; then
        rm -rf "$venv"
        mkdir -p "$(dirname "$venv")"
        echo "install-deps: the Python test references, in $venv" >&2
        "$PYTHON" -m venv "$venv" || { echo "install-deps: python3 -m venv failed (python3-venv missing?)" >&2; exit 1; }
        "$vpy" -m pip install -q --upgrade pip 2>&1 | grep -v 'Running pip as the' || true
        "$vpy" -m pip install -q -r "$req" 2>&1 | grep -v 'Running pip as the' || true
        # --no-cache-dir: a wheel cached by an earlier build (made with other flags, or on
        # another CPU) is never reused.
        build_llama() {
            echo "install-deps: building $LLAMA_CPP_PY from its sdist (several minutes)" >&2
            CMAKE_ARGS="$(llama_cmake_args)" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$vpy" -m pip install -q --no-cache-dir \
                --force-reinstall --no-deps --no-binary llama-cpp-python "$LLAMA_CPP_PY" 2>&1 \
                | grep -v 'Running pip as the' || true
        }
        build_llama
        # llama-cpp-python's own needs (typing-extensions, diskcache, jinja2, numpy) from PyPI.
        "$vpy" -m pip install -q "$LLAMA_CPP_PY" 2>&1 | grep -v 'Running pip as the' || true
        if ! why=$(llama_cpp_check "$vpy"); then
            echo "install-deps: llama-cpp-python is not usable ($why); rebuilding it once" >&2
            build_llama
            if ! why=$(llama_cpp_check "$vpy"); then
                echo "install-deps: llama-cpp-python is still not usable after a clean rebuild: $why" >&2
                exit 1
            fi
        fi
        touch "$llama_stamp"
    fi
    if [ "$(cat "$req_stamp" 2>/dev/null)" != "$req_hash" ]; then
        echo "install-deps: pip install -r tests/python/requirements.txt (into $venv)" >&2
        "$vpy" -m pip install -q -r "$req" 2>&1 | grep -v 'Running pip as the' || true
        mods=$(grep -oE '^[A-Za-z0-9_.-]+==' "$req" | tr -d '=' | tr 'A-Z-' 'a-z_' | sed 's/^pyyaml$/yaml/' | paste -sd, -)
        "$vpy" -c "import importlib, sys; [importlib.import_module(m) for m in '$mods'.split(',')]" \
            || { echo "install-deps: pip install -r tests/python/requirements.txt failed" >&2; exit 1; }
        "$vpy" -m pip freeze > "$venv/freeze.txt"
        echo "$req_hash" > "$req_stamp"
    fi
fi
if [ $want_bench = 1 ] && ! "$PYTHON" -c 'import matplotlib' 2>/dev/null; then
    echo "install-deps: pip install matplotlib" >&2
    "$PYTHON" -m pip install -q matplotlib 2>&1 | grep -v 'Running pip as the' || true
    "$PYTHON" -c 'import matplotlib' || { echo "install-deps: matplotlib failed to install" >&2; exit 1; }
fi
