#!/usr/bin/env bash
# The CPU side-by-side figures taken on a borrowed quiet machine (the device host of
# docs/cuda.md), whose working tree arrives without build outputs or models:
#   DC  what was carried: bin/ (lockstep, lockstep-bench, synth-gguf, and lockstep-old for
#       the A/B of the probe's cost), lib/ (the shared libraries they need), llama-avx2/ and
#       llama-native/ (llama-bench, llama-batched-bench, llama-completion from
#       bench/llamacpp/build.sh), and the default model at models/ of the working tree;
#       bench/remote/pack_cpu.sh packs all but lockstep-old (and the model) into one archive
#   OUT where the raw results go
# Each figure runs on CORES (2 cores, as on the CI machine) at T threads, interleaved.
#   1. the probe's cost, before and after the scalar matmul change: 5 pairs
#   2. AVX2 (AVX-VNNI and AVX-512 hidden) vs llama.cpp built for AVX2: tg128, pp512
#   3. AVX-512 (the host's best) vs llama.cpp native: tg128, pp512
#   4. a synthetic Llama-3.2-1B-shaped Q4_1 file (bench/synth_gguf.c, 642 MiB): decode and
#      batched decode B = 1..16 vs llama-batched-bench, on BIG_CORES at BIG_T threads
#   5. (1bk) the same shapes in llama.cpp's Q4_K_M mix (Q4_K; attn_v, ffn_down, embedding
#      Q6_K): tg128 and pp512 on CORES at T threads, AVX-512 and AVX2 (issue 20)
#   6. (8b, not in the default STEPS) speed at 8B size (issue 31 item 5): synthetic
#      Llama-3-8B-shaped files (synth-gguf --shape SHAPE, default 8b; the vocabulary is M's,
#      49152 tokens, not Llama-3's 128256) in Q4_K_M and Q4_0, on CORES at T threads:
#        a) TESTS8 (default tg32,pp128: an 8B decodes at a few tok/s on 2 cores) in PAIRS8
#           (default 1) interleaved pairs, without the warm-up runs and, with JOINT8=1
#           (default), both figures from one process per engine (vs_llamacpp.py --joint):
#           a model load costs lockstep seconds at this size (the file is paged in by b);
#           lockstep AVX-512 vs llama.cpp native, then
#           (after both files) lockstep AVX2 (LOCKSTEP_CPU_HIDE=avxvnni: AVX-512 and
#           AVX-VNNI hidden) vs llama.cpp built for AVX2;
#        b) load cost (bench/remote/cpu8b.py load): wall time and peak RSS of a one-token
#           `lockstep run` vs `llama-completion` (llama-native/), 2 runs each, cache warm.
#      Raw files go to RAW8 (default /tmp/cpu_side_by_side.SHAPE); after every part the
#      step writes OUT/summary_SHAPE.md and packs RAW8 into OUT/cpu_SHAPE-raw.tar.xz, so a
#      run cut short still leaves what it measured.  A part is skipped (and listed) when
#      fewer seconds are left of BUDGET8 (default 420) than the last comparison took.
#      The files go to SYNTH_DIR (default /dev/shm when it has room for both, else /tmp) and
#      are removed at the end unless KEEP8=1.
set -u
DC=${DC:-/tmp/dc}
OUT=${OUT:-/tmp/out}
CORES=${CORES:-0,1}
T=${T:-2}
BIG_CORES=${BIG_CORES:-0-7}
BIG_T=${BIG_T:-8}
PAIRS=${PAIRS:-5}
STEPS=${STEPS:-probe,avx2,avx512,1b}
M=${M:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
export LD_LIBRARY_PATH="$DC/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# bench/remote/pack_cpu.sh carries the pack host's libstdc++ in lib-cxx/: used only when
# this host's is too old for the llama.cpp binaries.
if [ -d "$DC/lib-cxx" ] && "$DC/llama-native/llama-bench" --help 2>&1 | grep -q 'GLIBCXX\|CXXABI\|libstdc++'; then
    export LD_LIBRARY_PATH="$DC/lib-cxx:$LD_LIBRARY_PATH"
    echo "note: this host's libstdc++ is too old for the llama.cpp binaries: using $DC/lib-cxx"
fi
mkdir -p "$OUT"
lscpu > "$OUT/lscpu.txt" 2>&1
grep -o 'avx512[a-z_0-9]*\|avx_vnni\|amx[a-z_0-9]*\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ' > "$OUT/cpuflags.txt"
has() { case ",$STEPS," in *",$1,"*) return 0 ;; esac; return 1; }
vs() { # name, llama dir, cores, env..., then -- and vs_llamacpp args (results in VS_OUT, default OUT)
    local name=$1 ldir=$2 cores=$3 o=${VS_OUT:-$OUT}; shift 3
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    echo "== $name"
    env "${envs[@]}" taskset -c "$cores" python3 bench/vs_llamacpp.py --lockstep "$DC/bin/lockstep" --bench-tool "$DC/bin/lockstep-bench" \
        --llama-bin "$DC/$ldir" --json-out "$o/$name.json" "$@" > "$o/$name.md" 2> "$o/$name.log"
    echo "rc $?" >> "$o/$name.log"
    tail -n 25 "$o/$name.md"
}
if has probe; then
    echo "== probe cost (old = before the scalar matmul change)"
    for i in $(seq "$PAIRS"); do
        for b in old new; do
            exe="$DC/bin/lockstep"; [ $b = old ] && exe="$DC/bin/lockstep-old"
            taskset -c "$CORES" "$exe" probe --json --no-memo -t "$T" -m "$M" > "$OUT/probe_$b.$i.json" 2>&1
            printf '%s %s ' "$b" "$(grep -o '"ms": *[0-9.]*' "$OUT/probe_$b.$i.json" | head -1)"
        done
        echo
    done
fi
has avx2 && vs avx2 llama-avx2 "$CORES" LOCKSTEP_CPU_HIDE=avxvnni -- -m "$M" -t "$T" --tests tg128,pp512 --pairs "$PAIRS" --no-bw
has avx512 && vs avx512 llama-native "$CORES" LOCKSTEP_NOTHING=1 -- -m "$M" -t "$T" --tests tg128,pp512 --pairs "$PAIRS" --no-bw
if has 1b; then
    "$DC/bin/synth-gguf" --shape 1b --type q4_1 --vocab-from "$M" -o /tmp/synth1b.gguf
    vs 1b_native llama-native "$BIG_CORES" LOCKSTEP_NOTHING=1 -- -m /tmp/synth1b.gguf -t "$BIG_T" --tests tg128,tgb1,tgb2,tgb4,tgb8,tgb16 \
        --pairs 3
fi
if has 1bk; then
    "$DC/bin/synth-gguf" --shape 1b --type q4_k_m --vocab-from "$M" -o /tmp/synth1bk.gguf
    vs 1bk_avx512 llama-native "$CORES" LOCKSTEP_NOTHING=1 -- -m /tmp/synth1bk.gguf -t "$T" --tests tg128,pp512 --pairs 3 --no-bw
    vs 1bk_avx2 llama-avx2 "$CORES" LOCKSTEP_CPU_HIDE=avxvnni -- -m /tmp/synth1bk.gguf -t "$T" --tests tg128,pp512 --pairs 3 --no-bw
fi
if has 8b; then
    SHAPE=${SHAPE:-8b}
    PAIRS8=${PAIRS8:-1}
    TESTS8=${TESTS8:-tg32,pp128}
    BUDGET8=${BUDGET8:-420}
    if [ -z "${SYNTH_DIR:-}" ]; then  # tmpfs when it has room for both files: no disk writeback
        SYNTH_DIR=/tmp
        shm_free=$(df -k --output=avail /dev/shm 2>/dev/null | tail -1) need_gib=3
        [ "$SHAPE" = 8b ] && need_gib=12
        [ "${shm_free:-0}" -gt $(( need_gib * 1024 * 1024 )) ] 2>/dev/null && SYNTH_DIR=/dev/shm
    fi
    R=${RAW8:-/tmp/cpu_side_by_side.$SHAPE}
    rm -rf "$R"; mkdir -p "$R"
    t8=$(date +%s)
    last8=0  # seconds the last comparison took: the estimate for the next one
    {
        echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo "host: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) CPUs online"
        echo "host flags: $(cat "$OUT/cpuflags.txt")"
        echo "working tree: $(git rev-parse HEAD 2>/dev/null || echo '? (no git)')"
        echo "shape $SHAPE, tests $TESTS8 (joint ${JOINT8:-1}), pairs $PAIRS8, cores $CORES, threads $T, budget ${BUDGET8}s, files in $SYNTH_DIR"
        [ -f "$DC/BUILD_INFO.txt" ] && cat "$DC/BUILD_INFO.txt"
        for d in llama-native llama-avx2; do
            [ -f "$DC/$d/VERSION" ] && sed -n "s/^\(sdist\|llama.cpp commit\|flags ggml-cpu.c\|built\): */$d \1: /p" "$DC/$d/VERSION"
        done
    } > "$R/meta.txt"
    pack8() {
        python3 bench/remote/cpu8b.py summary --raw "$R" --out "$OUT/summary_$SHAPE.md"
        cp "$OUT/summary_$SHAPE.md" "$OUT/lscpu.txt" "$OUT/cpuflags.txt" "$R/" 2>/dev/null
        tar -cJf "$OUT/cpu_$SHAPE-raw.tar.xz.part" -C "$(dirname "$R")" "$(basename "$R")" &&
            mv "$OUT/cpu_$SHAPE-raw.tar.xz.part" "$OUT/cpu_$SHAPE-raw.tar.xz"
    }
    fits8() { # what; true when the time left of BUDGET8 covers the last comparison's duration
        local left=$(( BUDGET8 - ($(date +%s) - t8) ))
        [ "$left" -ge "$last8" ] && return 0
        echo "- $1: ${left}s of the ${BUDGET8}s budget left, the last comparison took ${last8}s" | tee -a "$R/skipped.txt"
        return 1
    }
    vs8() { # name, llama dir, env, file
        local t0; t0=$(date +%s)
        local joint=(); [ "${JOINT8:-1}" = 1 ] && joint=(--joint)
        VS_OUT=$R vs "$1" "$2" "$CORES" "$3" -- -m "$4" -t "$T" --tests "$TESTS8" --pairs "$PAIRS8" --no-bw --no-warmup \
            "${joint[@]}" --max-wait 30
        last8=$(( $(date +%s) - t0 ))
        pack8
    }
    for ty in q4_k_m q4_0; do
        tag=${SHAPE}_$ty f=$SYNTH_DIR/synth_${SHAPE}_$ty.gguf
        fits8 "$tag: the file and everything on it" || continue
        echo "== synth $tag"
        s0=$(date +%s%N)
        "$DC/bin/synth-gguf" --shape "$SHAPE" --type "$ty" --vocab-from "$M" -o "$f" > "$R/synth_$tag.log" 2>&1
        rc=$?
        echo "rc $rc, $(( ($(date +%s%N) - s0) / 1000000 )) ms, $(stat -c %s "$f" 2>/dev/null || echo '?') bytes ($f)" > "$R/synth_$tag.txt"
        cat "$R/synth_$tag.txt"
        [ $rc = 0 ] || { pack8; continue; }
        echo "== load $tag"
        python3 bench/remote/cpu8b.py load --file "$f" --tag "$tag" --lockstep "$DC/bin/lockstep" \
            --llama-completion "$DC/llama-native/llama-completion" --cores "$CORES" -t "$T" --reps 2 --raw "$R" \
            --json-out "$R/load_$tag.json" > "$R/load_$tag.log" 2>&1
        echo "rc $?" >> "$R/load_$tag.log"
        cat "$R/load_$tag.log"
        pack8
        fits8 "${tag}_avx512" && vs8 "${tag}_avx512" llama-native LOCKSTEP_NOTHING=1 "$f"
    done
    for ty in q4_k_m q4_0; do
        tag=${SHAPE}_$ty f=$SYNTH_DIR/synth_${SHAPE}_$ty.gguf
        [ -f "$f" ] || continue
        fits8 "${tag}_avx2" && vs8 "${tag}_avx2" llama-avx2 LOCKSTEP_CPU_HIDE=avxvnni "$f"
    done
    echo "total $(( $(date +%s) - t8 )) s" >> "$R/meta.txt"
    pack8
    [ "${KEEP8:-0}" = 1 ] || rm -f "$SYNTH_DIR/synth_${SHAPE}_q4_k_m.gguf" "$SYNTH_DIR/synth_${SHAPE}_q4_0.gguf"
    cat "$OUT/summary_$SHAPE.md"
fi
echo "== done"
