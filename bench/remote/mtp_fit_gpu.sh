#!/usr/bin/env bash
# Fits an MTP module on a borrowed GPU host (16 CPU cores, one GPU, PyTorch): the data from
# NPROC `lockstep mtp-data` processes on the CPU cores at once, the fit on the GPU
# (tools/fit_mtp.py --device cuda).  The host's working tree arrives without build outputs or
# models, so the model and a CPU build of lockstep travel as ignored files (PARTS).
#   PARTS   folders holding m.NN (the model split in parts) and cpu.tar.xz (a stripped
#           build/lockstep and the shared libraries it needs, from `ldd`), e.g. .gpu-carry/p1
#   MODEL_NAME, SHA  the model's file name and sha256 (default: the default model's)
#   W       work folder on the host (default /tmp/w; kept while the host stays warm)
#   OUT     where the module, the fit's record and the logs go (default /tmp/out)
#   NPROC   data processes (default 16); ROUNDS: samples of every prompt (default 4, each
#           with its own seed); NPRED: tokens per answer (default 192)
#   SEED0   the first seed (default 1); another value gives another set of samples, and
#   SET     the data folders' prefix (default d): run `data` again with a new SEED0 and SET
#           to add samples; `fit` reads every W/<set>NN folder
#   FIT_ARGS  extra arguments of fit_mtp.py (steps, minutes, chain, batch rows, lr)
# Usage: bench/remote/mtp_fit_gpu.sh unpack   (copy PARTS' files into W; run once per part)
#        bench/remote/mtp_fit_gpu.sh data     (join the model, check its sha256, write the data)
#        bench/remote/mtp_fit_gpu.sh fit      (fit on the GPU; the module in OUT)
set -u
W=${W:-/tmp/w}
OUT=${OUT:-/tmp/out}
NPROC=${NPROC:-16}
ROUNDS=${ROUNDS:-4}
NPRED=${NPRED:-192}
SEED0=${SEED0:-1}
SET=${SET:-d}
# the joined model keeps its name: the module records it (lockstep.mtp.target_name)
M=$W/${MODEL_NAME:-SmolLM2-135M-Instruct.Q4_1.gguf}
SHA=${SHA:-b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53}
mkdir -p "$W" "$OUT"
export LD_LIBRARY_PATH="$W/cpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
LS=$W/cpu/lockstep
case "${1:-}" in
unpack)
    for d in ${PARTS:?}; do
        for f in "$d"/m.*; do [ -e "$f" ] && cp "$f" "$W/"; done
        if [ -e "$d/cpu.tar.xz" ]; then mkdir -p "$W/cpu" && tar xJf "$d/cpu.tar.xz" -C "$W/cpu"; fi
        for f in "$d"/lib*.so*; do [ -e "$f" ] && mkdir -p "$W/cpu/lib" && cp "$f" "$W/cpu/lib/"; done
    done
    ls -la "$W"
    { nvidia-smi -L; lscpu | grep -E "Model name|^CPU\(s\)|Flags" | cut -c1-300;
      python3 -c 'import torch, numpy; print("torch", torch.__version__, "cuda", torch.version.cuda, "numpy", numpy.__version__)'; } \
        > "$OUT/env.txt" 2>&1
    cat "$OUT/env.txt"
    ;;
data)
    cat "$W"/m.* > "$M" && echo "$SHA  $M" | sha256sum -c - || exit 1
    # shard j: prompt i of round r when (i + r) % NPROC == j; shard j's line k samples with
    # seed SEED0 + 100000 j + k, so every (prompt, round) pair is one distinct sample
    python3 - "$W" "$NPROC" "$ROUNDS" <<'EOF'
import sys
w, n, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ps = [l.rstrip("\n") for l in open("tools/mtp_prompts.txt") if l.strip()]
for j in range(n):
    with open("%s/shard%02d.txt" % (w, j), "w") as f:
        for r in range(rounds):
            for i, p in enumerate(ps):
                if (i + r) % n == j:
                    f.write(p + "\n")
EOF
    t0=$(date +%s)
    for j in $(seq 0 $((NPROC - 1))); do
        jj=$(printf %02d "$j")
        rm -rf "$W/$SET$jj"
        "$LS" mtp-data -m "$M" --prompts "$W/shard$jj.txt" --out "$W/$SET$jj" -n "$NPRED" --temp 0.8 \
            --seed $((SEED0 + 100000 * j)) -t 1 > "$W/data-$SET$jj.log" 2>&1 &
    done
    wait
    echo "data: $(( $(date +%s) - t0 )) s"
    tail -q -n 1 "$W"/data-$SET*.log | tee "$OUT/data-$SET.log"
    ;;
fit)
    dirs=()
    for d in "$W"/*/; do [ -e "$d/meta.json" ] && dirs+=(--data "${d%/}"); done
    t0=$(date +%s)
    python3 tools/fit_mtp.py -m "$M" -o "$OUT/module.mtp.gguf" "${dirs[@]}" --device cuda --threads 8 \
        --lockstep "$LS" --log "$OUT/fit.json" ${FIT_ARGS:-} > "$OUT/fit.log" 2>&1
    echo "fit: rc $?, $(( $(date +%s) - t0 )) s"
    grep -E "start:|val KL|final|wrote|check" "$OUT/fit.log" | tail -n 12
    ;;
*)
    echo "usage: $0 unpack|data|fit" >&2
    exit 2
    ;;
esac
