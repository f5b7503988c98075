#!/usr/bin/env bash
# The AMX level (LOCKSTEP_ISA=amx) on a borrowed AMX host (the device machine's Xeon):
# its parity with the scalar definition and its speed against lockstep's AVX-512 level
# and llama.cpp's own AMX path.  Two modes:
#
#   bench/remote/cpu_amx.sh pack     here: packs into PACK_OUT (default .gpu-carry/p5/amx.tar.xz)
#                                    bin/ (lockstep, synth-gguf), tests/ (test_kernels,
#                                    test_model_parity), lib/ (their shared libraries but
#                                    the C runtime), hdr.gguf (the default model's first
#                                    bytes: its vocabulary, for synth-gguf; the weights'
#                                    place is left to a sparse extension);
#                                    build first: make cli tests bench-tools; tests/ also gets
#                                    test_kernels_mut1..N, each built with one of the AMX
#                                    mutants of scripts/mutants.py (its NEEDS), which must
#                                    fail there (test_kernels_mutN.id names it)
#   bench/remote/cpu_amx.sh run      there: DC (unpacked pack), LL (llama.cpp AMX build:
#                                    LLAMA_ISA=amx bench/llamacpp/build.sh, its llama-bench
#                                    and libraries) and OUT (results)
#
# run, in order (each part appends to OUT/summary.md as it ends, so a run cut short keeps
# what it measured):
#   1. the CPU's flags; test_kernels (every kernel of every level against the scalar
#      definition, memcmp; the summary must not say "NOT CHECKED: the amx kernels")
#   2. synthetic files (synth-gguf, the vocabulary of hdr.gguf): 1B-shaped Q4_K_M, 8B-shaped
#      Q4_0 and Q4_K_M; `lockstep probe` on the 1B file at the AMX level (LOCKSTEP_ISA=amx); test_model_parity
#      on it (logits of every level, threads and chunking, memcmp; LOCKSTEP_TEST_QUICK=1;
#      the test that the next token is plausible is left out: the weights are random)
#   3. prefill, interleaved triples (lockstep amx, lockstep avx512, llama-bench) of PP
#      tokens, PAIRS rounds, on CORES with T threads, then on BIG_CORES with BIG_T:
#      lockstep `run -p TEXT -n 0 --json --no-probe` (TEXT: PP tokens exactly, from
#      bench/vs_llamacpp.py), llama-bench -p PP -n 0; medians of tok/s (NO_BENCH=1: not run)
set -u
mode=${1:-}
root=$(cd "$(dirname "$0")/../.." && pwd)
die() { echo "cpu_amx.sh: $*" >&2; exit 1; }

if [ "$mode" = pack ]; then
    cd "$root"
    out=${PACK_OUT:-.gpu-carry/p5/amx.tar.xz}
    stage=$(mktemp -d /tmp/pack_amx.XXXXXX)
    trap 'rm -rf "$stage"' EXIT
    mkdir -p "$stage/bin" "$stage/tests" "$stage/lib"
    for b in lockstep synth-gguf; do cp "build/$b" "$stage/bin/"; done
    for t in test_kernels test_model_parity; do cp "build/tests/$t" "$stage/tests/"; done
    # planted AMX bugs, each a test_kernels built from a scratch copy of the tree that must fail there
    mut=$(mktemp -d /tmp/amx_mut.XXXXXX)
    git ls-files -co --exclude-standard | tar -cf - -T - | tar -xf - -C "$mut"
    cp -a build "$mut/"
    # the AMX mutants of scripts/mutants.py (NEEDS: amx), the same texts and replacements
    n=0
    for id in $(python3 -c "import sys; sys.path.insert(0, 'scripts'); import mutants as M
print(' '.join(k for k, v in M.NEEDS.items() if v == 'amx'))"); do
        n=$((n + 1))
        python3 - "$id" "$mut" <<'EOF2' || die "mutant $id does not apply (stale)"
import sys
sys.path.insert(0, "scripts")
import mutants as M
mid, mut = sys.argv[1], sys.argv[2]
for m in M.MUTANTS:
    if m[0] == mid:
        t = open(m[1]).read()
        assert t.count(m[2]) == 1, mid
        open(f"{mut}/{m[1]}", "w").write(t.replace(m[2], m[3]))
EOF2
        make -C "$mut" -j2 build/tests/test_kernels > "$mut/make.log" 2>&1 || { tail -20 "$mut/make.log"; die "mutant $id does not build"; }
        cp "$mut/build/tests/test_kernels" "$stage/tests/test_kernels_mut$n"
        echo "$id" > "$stage/tests/test_kernels_mut$n.id"
    done
    rm -rf "$mut"
    strip "$stage"/bin/* "$stage"/tests/test_*[!d]
    for f in "$stage"/bin/* "$stage"/tests/*; do
        ldd "$f" | while read -r name arrow path _; do
            [ "$arrow" = "=>" ] || continue
            case "$name" in
                linux-vdso.so.1|libc.so.6|libm.so.6|libpthread.so.0|libdl.so.2|librt.so.1|ld-linux-x86-64.so.2|libgcc_s.so.1) continue ;;
            esac
            [ -e "$stage/lib/$name" ] || cp -L "$path" "$stage/lib/$name"
        done
    done
    m=models/SmolLM2-135M-Instruct.Q4_1.gguf
    off=$(python3 -c "import gguf; print(gguf.GGUFReader('$m').data_offset)") || die "gguf (PyPI) is needed to find $m's data offset"
    head -c "$off" "$m" > "$stage/hdr.gguf"
    stat -c %s "$m" > "$stage/hdr.size"
    echo "pack: $(date -u +%FT%TZ), commit $(git rev-parse HEAD)$(git diff --quiet HEAD -- src include Makefile || echo ' + uncommitted changes')" > "$stage/BUILD_INFO.txt"
    mkdir -p "$(dirname "$out")"
    tar -C "$stage" -cf - . | xz -6 -T2 > "$out"
    echo "cpu_amx.sh: $out: $(stat -c %s "$out") bytes"; tar -tJf "$out" | sed 's/^/  /'
    exit 0
fi
[ "$mode" = run ] || die "usage: cpu_amx.sh pack|run"

DC=${DC:-/tmp/dc}
LL=${LL:-/tmp/ll}
OUT=${OUT:-/tmp/out}
CORES=${CORES:-0,1}
T=${T:-2}
BIG_CORES=${BIG_CORES:-0-15}
BIG_T=${BIG_T:-16}
PAIRS=${PAIRS:-3}
PP=${PP:-128}
BIG_PP=${BIG_PP:-512}
SY=${SY:-/dev/shm}
SHAPE=${SHAPE:-8b}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$DC/lib:$LL/lib:$LL${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
S=$OUT/summary.md
L=$DC/bin/lockstep

{
    echo "# AMX level: $(date -u +%FT%TZ)"
    echo "- CPU: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) CPUs"
    echo "- flags: $(grep -o 'amx[a-z_0-9]*\|avx512_vnni\|avx512_bf16\|avx_vnni' /proc/cpuinfo | sort -u | tr '\n' ' ')"
    echo "- lockstep: $(cat "$DC/BUILD_INFO.txt"); levels here: $("$L" info --isa)"
    echo "- llama.cpp: $(head -3 "$LL/VERSION" 2>/dev/null | tr '\n' ' ')"
} > "$S"

# 1. kernels
"$DC/tests/test_kernels" > "$OUT/test_kernels.txt" 2>&1
echo "- test_kernels: exit $?; $(grep -c 'NOT CHECKED' "$OUT/test_kernels.txt") NOT CHECKED lines; $(grep 'parity:\|PASSED\|FAILED' "$OUT/test_kernels.txt" | tr '\n' ' ')" >> "$S"
grep 'NOT CHECKED' "$OUT/test_kernels.txt" | sed 's/^/  - /' >> "$S"
for t in "$DC"/tests/test_kernels_mut*; do
    [ -x "$t" ] && [ "${t%.id}" = "$t" ] || continue
    "$t" > "$OUT/$(basename "$t").txt" 2>&1
    rc=$?
    echo "- planted bug $(cat "$t.id" 2>/dev/null || basename "$t") (must fail): exit $rc; $(grep -o '[0-9]* FAILED TEST' "$OUT/$(basename "$t").txt" || echo '0 FAILED TEST')(S); first: $(grep -m1 'isa=amx' "$OUT/$(basename "$t").txt" | cut -c1-160)" >> "$S"
done

# 2. files, probe, model parity
clean_files() { rm -f "$SY/s1b_q4_k_m.gguf" "$SY/s8b_q4_0.gguf" "$SY/s8b_q4_k_m.gguf" "$SY/vocab.gguf"; } # this run's files only
cp "$DC/hdr.gguf" "$SY/vocab.gguf" && truncate -s "$(cat "$DC/hdr.size")" "$SY/vocab.gguf"
"$DC/bin/synth-gguf" --shape 1b --type q4_k_m --vocab-from "$SY/vocab.gguf" -o "$SY/s1b_q4_k_m.gguf" > /dev/null
for ty in q4_0 q4_k_m; do
    "$DC/bin/synth-gguf" --shape "$SHAPE" --type $ty --vocab-from "$SY/vocab.gguf" -o "$SY/s8b_$ty.gguf" > /dev/null
done
ls -la "$SY"/*.gguf >> "$OUT/files.txt"
LOCKSTEP_ISA=amx "$L" probe -m "$SY/s1b_q4_k_m.gguf" --no-memo -t 4 > "$OUT/probe_1b_amx.txt" 2>&1
echo "- probe, 1B-shaped Q4_K_M, LOCKSTEP_ISA=amx, 4 threads: exit $?; $(grep -i 'parity\|isa' "$OUT/probe_1b_amx.txt" | head -3 | tr '\n' ' ')" >> "$S"
MODEL="$SY/s1b_q4_k_m.gguf" LOCKSTEP_TEST_QUICK=1 timeout 300 "$DC/tests/test_model_parity" 'test_logits*' > "$OUT/test_model_parity.txt" 2>&1
echo "- test_model_parity (1B-shaped Q4_K_M, quick): exit $?; $(grep 'PASSED\|FAILED\|SKIPPED\|NOT CHECKED' "$OUT/test_model_parity.txt" | tr '\n' ' ')" >> "$S"

# 3. prefill triples
one_ls() { # isa cores threads model text -> tok/s
    local j
    j=$(LOCKSTEP_ISA=$1 taskset -c "$2" "$L" run -m "$4" -p "$5" -n 0 --json --no-probe -t "$3" 2>/dev/null | tail -1)
    python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(round(d['n_prompt']/(d['prefill_ms']/1000),2), d['n_prompt'])" "$j" 2>/dev/null || echo "nan 0"
}
one_ll() { # cores threads model pp -> tok/s
    taskset -c "$1" "$LL/llama-bench" -m "$3" -p "$4" -n 0 -t "$2" -r 1 -o json 2>/dev/null |
        python3 -c "import json,sys; print(round(json.load(sys.stdin)[0]['avg_ts'],2))" 2>/dev/null || echo nan
}
triples() { # label cores threads pp model
    local label=$1 cores=$2 th=$3 pp=$4 m=$5 text i a z l
    text=$(python3 -c "import sys; sys.path.insert(0, sys.argv[1]); import vs_llamacpp as v; from pathlib import Path
print(v.make_pp_prompt(v.Lockstep(Path(sys.argv[2]), Path(sys.argv[3]), 1), int(sys.argv[4])))" "$root/bench" "$L" "$m" "$pp")
    : > "$OUT/raw_$label.txt"
    for i in $(seq "$PAIRS"); do
        a=$(one_ls amx "$cores" "$th" "$m" "$text"); z=$(one_ls avx512 "$cores" "$th" "$m" "$text"); l=$(one_ll "$cores" "$th" "$m" "$pp")
        echo "$i amx $a avx512 $z llama $l" >> "$OUT/raw_$label.txt"
    done
    python3 - "$OUT/raw_$label.txt" "$label" >> "$S" <<'EOF'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
def med(k):
    v = [float(r[r.index(k) + 1]) for r in rows]
    v = [x for x in v if x == x]
    return st.median(v) if v else float("nan")
a, z, l = med("amx"), med("avx512"), med("llama")
print(f"- {sys.argv[2]}: tok/s medians of {len(rows)}: amx {a:.2f}, avx512 {z:.2f}, llama.cpp {l:.2f}; "
      f"amx/avx512 {a/z:.2f}x, amx/llama {a/l:.2f}x, avx512/llama {z/l:.2f}x  (prompt tokens: {rows[0][rows[0].index("avx512") + 2]})")
EOF
}
[ -n "${NO_BENCH:-}" ] && { echo "- NO_BENCH: no prefill rounds" >> "$S"; clean_files; exit 0; }
for ty in q4_0 q4_k_m; do
    triples "8b_${ty}_pp${PP}_t$T" "$CORES" "$T" "$PP" "$SY/s8b_$ty.gguf"
done
for ty in q4_0 q4_k_m; do
    triples "8b_${ty}_pp${BIG_PP}_t$BIG_T" "$BIG_CORES" "$BIG_T" "$BIG_PP" "$SY/s8b_$ty.gguf"
done
echo "- done $(date -u +%FT%TZ)" >> "$S"
clean_files
