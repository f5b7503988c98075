#!/usr/bin/env bash
# Builds llama.cpp's `llama-bench`, `llama-batched-bench` and `llama-lookup` (n-gram
# speculation) for the side-by-side benchmarks (bench/vs_llamacpp.py, bench/suites.py).
#
# Source: the llama.cpp tree vendored in the llama-cpp-python sdist on PyPI
# (vendor/llama.cpp, a git submodule whose .git travels inside the sdist, so the
# commit is known).  PyPI is the only place the source is fetched from.  One patch is
# applied (see "patches" below: a GCC 12 miscompile of the AMX tile config that makes
# the stock build die with SIGILL in prefill on AMX CPUs); VERSION records it.
#
# Output (all under build/, which git ignores):
#   build/llama.cpp/dl/llama_cpp_python-<ver>.tar.gz   the sdist
#   build/llama.cpp/src/llama_cpp_python-<ver>/        the unpacked sdist
#   build/llama.cpp/build/bin/llama-bench              the binaries
#   build/llama.cpp/build/bin/llama-batched-bench
#   build/llama.cpp/build/bin/llama-lookup             (optional: a failure is recorded
#                                                      in VERSION and reported loudly,
#                                                      but does not fail the build)
#   build/llama.cpp/build/bin/llama-completion         (optional, every ISA, same rule:
#                                                      the one-shot `-n 1` load-cost runs
#                                                      of bench/remote/cpu_side_by_side.sh)
#   build/llama.cpp/VERSION                            version, commit, compiler and flags
#
# Idempotent: does nothing when the binaries exist and VERSION records the same
# sdist version.  FORCE=1 rebuilds.  Environment:
#   LLAMA_CPP_PYTHON_VERSION  sdist version (default 0.3.36)
#   LLAMA_CPP_SDIST           use this local .tar.gz instead of downloading
#   JOBS                      parallel compile jobs (default 2)
#   PYTHON                    python for `pip download` (default python3)
#   LLAMA_ISA                 native (default: -DGGML_NATIVE=ON, the host's best ISA) or
#                             avx2 (GGML_NATIVE=OFF, AVX/AVX2/FMA/F16C/BMI2 on, every AVX-512,
#                             AVX-VNNI and AMX path off: the llama.cpp an AVX2-only host runs)
#                             or avxvnni (avx2 plus GGML_AVX_VNNI) or amx (GGML_NATIVE=OFF,
#                             the avxvnni set plus AVX512 F/CD/VL/DQ/BW, AVX512_VBMI,
#                             AVX512_VNNI, AVX512_BF16, AMX_TILE, AMX_INT8 and AMX_BF16 on: a
#                             Sapphire-Rapids-class build with ggml's AMX int8 kernels, made on
#                             a host without AMX, where native leaves them out; it runs only on
#                             a CPU with all of those).  A non-native build goes to
#                             build/llama.cpp-<isa>/ (same layout) so both can exist at once.
# A failed build prints "BUILD FAILED" and exits non-zero; nothing is ever skipped
# silently.
set -euo pipefail

VER=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
JOBS=${JOBS:-2}
PYTHON=${PYTHON:-python3}
LLAMA_ISA=${LLAMA_ISA:-native}
root=$(cd "$(dirname "$0")/../.." && pwd)
case "$LLAMA_ISA" in
    native) out="$root/build/llama.cpp"; isa_args=(-DGGML_NATIVE=ON) ;;
    avx2|avxvnni)
        out="$root/build/llama.cpp-$LLAMA_ISA"
        vnni=OFF; [ "$LLAMA_ISA" = avxvnni ] && vnni=ON
        isa_args=(-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON
                  -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=$vnni -DGGML_AVX512=OFF
                  -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF
                  -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF) ;;
    amx)
        out="$root/build/llama.cpp-$LLAMA_ISA"
        isa_args=(-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON
                  -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=ON -DGGML_AVX512=ON
                  -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON
                  -DGGML_AMX_TILE=ON -DGGML_AMX_INT8=ON -DGGML_AMX_BF16=ON) ;;
    *) echo "llamacpp/build.sh: LLAMA_ISA must be native, avx2, avxvnni or amx (got '$LLAMA_ISA')" >&2; exit 2 ;;
esac
dl="$out/dl"
src_parent="$out/src"
bdir="$out/build"
bin="$bdir/bin"
vfile="$out/VERSION"
# PATCH_LEVEL is part of the stamp: changing the patches below forces a rebuild.
PATCH_LEVEL=1
stamp="sdist: llama-cpp-python==$VER, patch level $PATCH_LEVEL, isa $LLAMA_ISA"

log() { echo "llamacpp/build.sh: $*" >&2; }
reported=0
tmp=""
fail() {
    reported=1
    echo "" >&2
    echo "==================================================================" >&2
    echo "llamacpp/build.sh: BUILD FAILED: $*" >&2
    echo "==================================================================" >&2
    exit 1
}
trap 'rc=$?; [ -n "$tmp" ] && rm -rf "$tmp"; if [ $rc -ne 0 ] && [ $reported = 0 ]; then echo "llamacpp/build.sh: BUILD FAILED (exit $rc)" >&2; fi' EXIT

# llama-lookup is built (and required) only for the native build: the n-gram peer figures
# are not part of the per-ISA rows.
want_lookup=1; [ "$LLAMA_ISA" = native ] || want_lookup=0
if [ "${FORCE:-0}" != 1 ] && [ -x "$bin/llama-bench" ] && [ -x "$bin/llama-batched-bench" ] &&
   { [ $want_lookup = 0 ] || [ -x "$bin/llama-lookup" ]; } && [ -x "$bin/llama-completion" ] &&
   [ -f "$vfile" ] && grep -qxF "$stamp" "$vfile"; then
    log "up to date ($stamp, $(grep '^llama.cpp commit:' "$vfile" || true)); FORCE=1 rebuilds"
    exit 0
fi

command -v cmake >/dev/null || fail "cmake not found"
command -v c++ >/dev/null || command -v g++ >/dev/null || fail "no C++ compiler found"
t0=$(date +%s)
mkdir -p "$dl" "$src_parent"

# ---- 1. the sdist --------------------------------------------------------
tarball="$dl/llama_cpp_python-$VER.tar.gz"
if [ -n "${LLAMA_CPP_SDIST:-}" ]; then
    [ -f "$LLAMA_CPP_SDIST" ] || fail "LLAMA_CPP_SDIST=$LLAMA_CPP_SDIST does not exist"
    cp -f "$LLAMA_CPP_SDIST" "$tarball"
elif [ ! -s "$tarball" ]; then
    log "downloading llama-cpp-python==$VER sdist from PyPI"
    tmp=$(mktemp -d "$dl/tmp.XXXXXX")
    "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VER" -d "$tmp" ||
        fail "pip download of llama-cpp-python==$VER failed"
    got=$(ls "$tmp"/llama_cpp_python-*.tar.gz 2>/dev/null | head -1)
    [ -n "$got" ] || fail "pip download produced no llama_cpp_python-*.tar.gz"
    mv "$got" "$tarball"
    rm -rf "$tmp"; tmp=""
fi
sdist_sha=$(sha256sum "$tarball" | awk '{print $1}')

# ---- 2. unpack -----------------------------------------------------------
srcdir="$src_parent/llama_cpp_python-$VER"
lcpp="$srcdir/vendor/llama.cpp"
if [ ! -f "$lcpp/CMakeLists.txt" ] || [ ! -f "$srcdir/.unpacked" ]; then
    rm -rf "$srcdir"
    log "unpacking $(basename "$tarball")"
    tar -xzf "$tarball" -C "$src_parent" || fail "cannot unpack $tarball"
    [ -f "$lcpp/CMakeLists.txt" ] || fail "$tarball has no vendor/llama.cpp/CMakeLists.txt"
    touch "$srcdir/.unpacked"
fi

# ---- 2b. patches -----------------------------------------------------------
# (1) AMX tile config.  ggml-cpu/amx/mmq.cpp builds the 64-byte tile config on the stack
# and passes it to _tile_loadconfig(), whose GCC 12 definition (amxtileintrin.h) tells
# the compiler the asm reads only 8 bytes ("m" (*(const void **)p)); at -O3 GCC drops
# the stores of the rows/colsb fields as dead, ldtilecfg loads an all-zero config, and
# the first tileloadd raises #UD: llama-bench dies with SIGILL on any batch >= 32
# (pp512) on AMX CPUs (-march=native there, or LLAMA_ISA=amx anywhere, compiles the AMX
# kernels; this patch is applied to every variant and required).  Upstream knows the
# problem (ggml-org/llama.cpp PR #26954, open).  The fix names the whole struct as the
# asm's memory operand; the kernels are otherwise untouched.
mmq="$lcpp/ggml/src/ggml-cpu/amx/mmq.cpp"
if [ -f "$mmq" ] && grep -q '^    _tile_loadconfig(&tc);$' "$mmq"; then
    log "patching $mmq: ldtilecfg reads the whole 64-byte tile config (GCC 12 dead-store bug)"
    sed -i 's|^    _tile_loadconfig(&tc);$|    __asm__ volatile("ldtilecfg %0" :: "m"(tc)); /* lockstep bench patch: GCC 12 _tile_loadconfig declares an 8-byte read */|' "$mmq"
fi
if [ -f "$mmq" ] && ! grep -q 'lockstep bench patch' "$mmq"; then
    fail "the AMX tile-config patch did not apply to $mmq (the source changed?): see PATCH_LEVEL in $0"
fi
patches="AMX tile config: ggml-cpu/amx/mmq.cpp _tile_loadconfig(&tc) -> asm ldtilecfg with the whole struct as operand (GCC 12 drops the config stores; SIGILL in pp otherwise)"

commit=unknown commit_date=unknown commit_subject=unknown
if command -v git >/dev/null && git -C "$lcpp" rev-parse HEAD >/dev/null 2>&1; then
    commit=$(git -C "$lcpp" rev-parse HEAD)
    commit_date=$(git -C "$lcpp" log -1 --format=%ci)
    commit_subject=$(git -C "$lcpp" log -1 --format=%s)
else
    log "warning: cannot read the vendored llama.cpp commit with git"
fi
ggml_ver=$(sed -n 's/^set(GGML_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)).*/\2/p' "$lcpp/ggml/CMakeLists.txt" | paste -sd.)

# ---- 3. configure and build ----------------------------------------------
cmake_args=(
    -S "$lcpp" -B "$bdir"
    -DCMAKE_BUILD_TYPE=Release
    "${isa_args[@]}"
    -DLLAMA_CURL=OFF
    -DLLAMA_BUILD_TESTS=OFF
    -DLLAMA_BUILD_EXAMPLES=ON
    -DLLAMA_BUILD_SERVER=OFF
    -DBUILD_SHARED_LIBS=OFF
    -DCMAKE_EXPORT_COMPILE_COMMANDS=ON
)
kind="from scratch"
[ -f "$bdir/CMakeCache.txt" ] && kind="incremental (build dir existed)"
log "configuring: cmake ${cmake_args[*]}"
cmake "${cmake_args[@]}" >"$out/cmake-configure.log" 2>&1 ||
    { tail -40 "$out/cmake-configure.log" >&2; fail "cmake configure failed (log: $out/cmake-configure.log)"; }
log "building llama-bench llama-batched-bench with -j$JOBS (log: $out/cmake-build.log)"
cmake --build "$bdir" --config Release --target llama-bench llama-batched-bench -j"$JOBS" \
    >"$out/cmake-build.log" 2>&1 ||
    { tail -40 "$out/cmake-build.log" >&2; fail "cmake build failed (log: $out/cmake-build.log)"; }
for b in llama-bench llama-batched-bench; do
    [ -x "$bin/$b" ] || fail "$bin/$b was not produced"
done
# llama-lookup (examples/lookup) is optional: the benchmarks report its absence loudly.
lookup_status=built
[ $want_lookup = 1 ] || lookup_status="not built (LLAMA_ISA=$LLAMA_ISA: only the native build has it)"
[ $want_lookup = 0 ] || log "building llama-lookup with -j$JOBS (log: $out/cmake-build-lookup.log)"
if [ $want_lookup = 1 ] && { ! cmake --build "$bdir" --config Release --target llama-lookup -j"$JOBS" >"$out/cmake-build-lookup.log" 2>&1 ||
   [ ! -x "$bin/llama-lookup" ]; }; then
    tail -20 "$out/cmake-build-lookup.log" >&2
    lookup_status="NOT BUILT (see $out/cmake-build-lookup.log)"
    echo "==================================================================" >&2
    echo "llamacpp/build.sh: WARNING: llama-lookup was NOT built; the n-gram peer figures will be FAILED" >&2
    echo "==================================================================" >&2
fi
# llama-completion (tools/completion: the one-shot prompt -> n tokens program) is optional
# too: only the load-cost step of bench/remote/cpu_side_by_side.sh uses it.
completion_status=built
log "building llama-completion with -j$JOBS (log: $out/cmake-build-completion.log)"
if ! cmake --build "$bdir" --config Release --target llama-completion -j"$JOBS" >"$out/cmake-build-completion.log" 2>&1 ||
   [ ! -x "$bin/llama-completion" ]; then
    tail -20 "$out/cmake-build-completion.log" >&2
    completion_status="NOT BUILT (see $out/cmake-build-completion.log)"
    echo "==================================================================" >&2
    echo "llamacpp/build.sh: WARNING: llama-completion was NOT built; the load-cost figures will be FAILED" >&2
    echo "==================================================================" >&2
fi
"$bin/llama-bench" --help >/dev/null 2>&1 || fail "$bin/llama-bench does not run"

# ---- 4. record what was built --------------------------------------------
bench_version=$("$bin/llama-bench" --version 2>&1 | tr '\n' ' ' | sed 's/ *$//') || bench_version="?"
# The flags of the compile of ggml-cpu.c and llama.cpp (the CPU backend and the model code).
flags_of() {
    "$PYTHON" - "$bdir/compile_commands.json" "$1" <<'PY' 2>/dev/null || echo "?"
import json, sys, shlex
cc = json.load(open(sys.argv[1]))
for e in cc:
    if e["file"].endswith(sys.argv[2]):
        args = shlex.split(e["command"]) if "command" in e else e["arguments"]
        keep = [a for a in args[1:] if a.startswith(("-O", "-m", "-f", "-std", "-D_", "-DNDEBUG", "-DGGML_USE", "-pthread", "-g"))]
        print(args[0].rsplit("/", 1)[-1], " ".join(keep))
        break
else:
    print("?")
PY
}
cache() { sed -n "s/^$1:[A-Z]*=//p" "$bdir/CMakeCache.txt" | head -1; }
secs=$(( $(date +%s) - t0 ))
{
    echo "$stamp"
    echo "sdist sha256: $sdist_sha"
    echo "llama.cpp commit: $commit"
    echo "llama.cpp commit date: $commit_date"
    echo "llama.cpp commit subject: $commit_subject"
    echo "ggml version: $ggml_ver"
    echo "patches: $patches"
    echo "llama-bench --version: $bench_version"
    echo "C compiler: $(cache CMAKE_C_COMPILER) ($(cc --version 2>/dev/null | head -1))"
    echo "C++ compiler: $(cache CMAKE_CXX_COMPILER) ($(c++ --version 2>/dev/null | head -1))"
    echo "cmake: $(cmake --version | head -1)"
    echo "cmake args: ${cmake_args[*]:4}"
    echo "GGML_OPENMP: $(cache GGML_OPENMP)  GGML_NATIVE: $(cache GGML_NATIVE)  GGML_LLAMAFILE: $(cache GGML_LLAMAFILE)"
    echo "flags ggml-cpu.c: $(flags_of ggml-cpu/ggml-cpu.c)"
    echo "flags quants.c: $(flags_of ggml-cpu/arch/x86/quants.c)"
    echo "flags llama.cpp: $(flags_of src/llama.cpp)"
    echo "llama-lookup: $lookup_status"
    echo "llama-completion: $completion_status"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m) '$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)' in ${secs}s, $kind (-j$JOBS)"
} >"$vfile"
log "done in ${secs}s: $bin/llama-bench, $bin/llama-batched-bench, llama-lookup $lookup_status, llama-completion $completion_status"
cat "$vfile" >&2
