#!/usr/bin/env bash
# Packs what bench/remote/cpu_side_by_side.sh needs on a borrowed machine whose working
# tree arrives without build outputs, no network and no package registry, into ONE
# archive (default .gpu-carry/cpu8b/dc.tar.xz, git-ignored; xz -9):
#   bin/           lockstep, lockstep-bench, synth-gguf (stripped)
#   lib/           the shared libraries those and the llama.cpp binaries load (from ldd),
#                  less the C runtime every Linux host has: glibc's own libraries
#                  (libc, libm, libpthread, libdl, librt, libutil, libresolv, ld-linux),
#                  libgcc_s and libstdc++ (names matched exactly)
#   lib-cxx/       this host's libstdc++.so.6, used only when the borrowed host's is too
#                  old for the llama.cpp binaries (cpu_side_by_side.sh checks)
#   llama-native/  llama-bench, llama-batched-bench, llama-completion and VERSION of
#                  bench/llamacpp/build.sh's native build (-march=native of THIS host)
#   llama-avx2/    the same of its LLAMA_ISA=avx2 build
#   BUILD_INFO.txt the commit, this host's CPU and ISA flags, the compilers
# Build first: make cli bench-tools; bench/llamacpp/build.sh with LLAMA_ISA=native and avx2.
# Unpack on the device with: mkdir -p /tmp/dc && tar -xJf .gpu-carry/cpu8b/dc.tar.xz -C /tmp/dc
# Environment: PACK_OUT (the archive), MAX_MB (fail above this many MB, default 30).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${PACK_OUT:-.gpu-carry/cpu8b/dc.tar.xz}
max_mb=${MAX_MB:-30}
die() { echo "pack_cpu.sh: $*" >&2; exit 1; }
stage=$(mktemp -d /tmp/pack_cpu.XXXXXX)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/lib-cxx"

for b in lockstep lockstep-bench synth-gguf; do
    [ -x "build/$b" ] || die "no build/$b (make cli bench-tools)"
    cp "build/$b" "$stage/bin/$b"
done
for isa in native avx2; do
    d=build/llama.cpp; [ $isa = native ] || d=build/llama.cpp-$isa
    mkdir -p "$stage/llama-$isa"
    for b in llama-bench llama-batched-bench llama-completion; do
        [ -x "$d/build/bin/$b" ] || die "no $d/build/bin/$b (LLAMA_ISA=$isa bench/llamacpp/build.sh)"
        cp "$d/build/bin/$b" "$stage/llama-$isa/$b"
    done
    # A shared build (BUILD_SHARED_LIBS=ON) leaves libllama/libggml*.so beside the binaries.
    find "$d/build/bin" -maxdepth 1 -name '*.so*' -exec cp -L {} "$stage/llama-$isa/" \;
    cp "$d/VERSION" "$stage/llama-$isa/VERSION"
done
strip "$stage"/bin/* "$stage"/llama-*/llama-*

# Shared libraries: every ldd line "name => path" outside the C runtime.  A library found
# beside a llama binary stays there (their RPATH is $ORIGIN, or cpu_side_by_side.sh's
# LD_LIBRARY_PATH names lib/).
is_runtime() {
    case "$1" in
        linux-vdso.so.1|libc.so.6|libm.so.6|libpthread.so.0|libdl.so.2|librt.so.1|libutil.so.1|libresolv.so.2|\
        ld-linux-x86-64.so.2|libgcc_s.so.1|libstdc++.so.6) return 0 ;;
    esac
    return 1
}
for f in "$stage"/bin/* "$stage"/llama-*/llama-*; do
    LD_LIBRARY_PATH="$(dirname "$f")" ldd "$f" | while read -r name arrow path _; do
        [ "$arrow" = "=>" ] || continue
        [ "$path" != "not" ] || die "$f: $name not found"
        is_runtime "$name" && continue
        [ -e "$(dirname "$f")/$name" ] && continue
        [ -e "$stage/lib/$name" ] || cp -L "$path" "$stage/lib/$name"
    done
done
cxx=$(ldd "$stage/llama-native/llama-bench" | awk '$1 == "libstdc++.so.6" {print $3}')
[ -n "$cxx" ] && cp -L "$cxx" "$stage/lib-cxx/libstdc++.so.6"

# Every binary must resolve all of its libraries from the unpacked folders alone
# (plus the C runtime): check with LD_LIBRARY_PATH as cpu_side_by_side.sh sets it.
for f in "$stage"/bin/* "$stage"/llama-*/llama-*; do
    miss=$(LD_LIBRARY_PATH="$stage/lib:$(dirname "$f")" ldd "$f" | awk '/not found/ {print $1}')
    [ -z "$miss" ] || die "$f: unresolved: $miss"
    LD_LIBRARY_PATH="$stage/lib:$(dirname "$f")" ldd "$f" | awk '$2 == "=>" {print $1, $3}' | while read -r n p; do
        is_runtime "$n" || case "$p" in "$stage"/*) ;; *) die "$f: $n resolves outside the pack ($p)" ;; esac
    done
done

flags=$(grep -o 'avx512[a-z_0-9]*\|avx_vnni\|amx[a-z_0-9]*\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')
{
    echo "pack: $(date -u +%Y-%m-%dT%H:%M:%SZ), lockstep commit $(git rev-parse HEAD)$(git diff --quiet HEAD -- src include Makefile || echo ' + uncommitted changes')"
    echo "pack host: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), flags: $flags"
    echo "pack host note: llama-native is -march=native of the pack host (its flags above); a device without"
    echo "  one of them may die with SIGILL, and AMX kernels are in it only if the pack host has AMX"
    echo "pack host libc: $(ldd --version | head -1); cc: $(cc --version | head -1)"
    echo "libraries carried: $(ls "$stage/lib" | tr '\n' ' ')"
} > "$stage/BUILD_INFO.txt"

mkdir -p "$(dirname "$out")"
tar -C "$stage" -cf - . | xz -9 -T1 > "$out.part"
mv "$out.part" "$out"
bytes=$(stat -c %s "$out")
echo "pack_cpu.sh: $out: $bytes bytes ($(( bytes / 1024 / 1024 )) MiB), $(du -sh "$stage" | cut -f1) unpacked"
tar -tJf "$out" | sort | sed 's/^/  /'
[ "$bytes" -le $(( max_mb * 1000 * 1000 )) ] || die "$out is over ${max_mb} MB"
