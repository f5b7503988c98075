#!/usr/bin/env bash
# device.sh - run on the GPU machine (bench/results/cuda/gemma-serve-h100/README.md).
#   device.sh recv N   copy the carried part folder .gpu-carry/cN into /tmp/parts (a later
#                      call's carry replaces the folder, so each part is copied out at once)
#   device.sh setup bins|smol|gemma...   unpack the binaries into /tmp/b, reassemble a model
#                      from its xz parts into /tmp/m and check its sha256
#   device.sh smol     lockstep run cuda|cpu, serve cuda|cpu with a chat request (SmolLM2)
#   device.sh gemma    test_engine_cuda --model, lockstep run cuda|cpu, serve cuda|cpu with a
#                      completion request (Gemma 3 270M)
# Logs go to $LOG (default /tmp/log; $OUT brings back 8 files at most: the command tars $LOG).
set -u
OUT=${LOG:-/tmp/log}; mkdir -p "$OUT"
B=${B:-/tmp/b}; M=${M:-/tmp/m}; P=${P:-/tmp/parts}; GPU=${GPU:-cuda} # GPU=cpu: a dry run without a GPU
export LD_LIBRARY_PATH=$B/lib
say() { echo "== $*"; }

http() { # METHOD URL [BODY]: prints the body, then the status on its own last line
    if command -v curl >/dev/null; then
        if [ $# -ge 3 ]; then curl -s -m 300 -w '\n%{http_code}\n' -H 'Content-Type: application/json' -X "$1" --data-binary "$3" "$2"
        else curl -s -m 30 -w '\n%{http_code}\n' "$2"; fi
    else
        python3 - "$@" <<'PY'
import sys, urllib.request, urllib.error
m, u = sys.argv[1], sys.argv[2]
d = sys.argv[3].encode() if len(sys.argv) > 3 else None
r = urllib.request.Request(u, data=d, method=m, headers={"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(r, timeout=300) as f: print(f.read().decode()); print(f.status)
except urllib.error.HTTPError as e: print(e.read().decode()); print(e.code)
except Exception as e: print(e); print(0)
PY
    fi
}

serve_pair() { # TAG MODEL PATH BODY FIELDS: both servers, the same request, the text fields compared
    local tag=$1 model=$2 path=$3 body=$4
    say "serve $tag: $model $path (http client: $(command -v curl || echo python3 urllib))"
    $B/bin/lockstep serve -m "$model" --device $GPU --port 18081 --no-progress >"$OUT/${tag}_serve_cuda.log" 2>&1 &
    local pc=$!
    $B/bin/lockstep serve -m "$model" --device cpu --port 18082 --no-progress >"$OUT/${tag}_serve_cpu.log" 2>&1 &
    local pp=$!
    for port in 18081 18082; do
        local t0=$SECONDS ok=0
        while [ $((SECONDS - t0)) -lt 240 ]; do
            if [ "$(http GET http://127.0.0.1:$port/health | tail -1)" = 200 ]; then ok=1; break; fi
            sleep 0.5
        done
        echo "port $port: /health 200 after $((SECONDS - t0)) s (ok=$ok)"
    done
    for port in 18081 18082; do
        local dev=cuda; [ $port = 18082 ] && dev=cpu
        http GET http://127.0.0.1:$port/health | head -n -1 >"$OUT/${tag}_health_$dev.json"
        http POST "http://127.0.0.1:$port$path" "$body" >"$OUT/${tag}_resp_$dev.raw"
        echo "$dev health: $(cat "$OUT/${tag}_health_$dev.json")"
        echo "$dev response (status $(tail -1 "$OUT/${tag}_resp_$dev.raw")): $(head -n -1 "$OUT/${tag}_resp_$dev.raw")"
    done
    kill -INT $pc $pp; wait $pc; echo "cuda server exit $?"; wait $pp; echo "cpu server exit $?"
    python3 - "$OUT/${tag}_resp_cuda.raw" "$OUT/${tag}_resp_cpu.raw" "$OUT/${tag}_health_cuda.json" <<'PY'
import sys, json
def load(p): return json.loads(open(p).read().rsplit("\n", 2)[0])
a, b = load(sys.argv[1]), load(sys.argv[2])
h = json.load(open(sys.argv[3]))
def texts(j):
    out = []
    for c in j.get("choices", []):
        msg = c.get("message") or {}
        out.append(("content" if msg else "text", msg.get("content") if msg else c.get("text")))
        out.append(("finish_reason", c.get("finish_reason")))
        out.append(("token_ids", json.dumps(c.get("token_ids"))))
    out.append(("usage", json.dumps(j.get("usage"), sort_keys=True)))
    return out
ta, tb = texts(a), texts(b)
n = sum(len(str(v).encode()) for _, v in ta)
d = sum(x != y for (_, x), (_, y) in zip(ta, tb)) + abs(len(ta) - len(tb))
for (k, x), (_, y) in zip(ta, tb): print(f"  {k}: cuda {x!r} | cpu {y!r}")
print(f"text fields: {len(ta)} compared ({n} bytes), {d} differ; cuda /health parity: {h.get('parity')}")
print("SERVE", "OK" if d == 0 and h.get("parity") == "verified" and a.get("choices") else "FAIL")
PY
}

case "$1" in
recv)
    mkdir -p $P && cp -v .gpu-carry/c$2/* $P/ && ls -la $P ;;
setup)
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/env.txt"; nproc | tee -a "$OUT/env.txt"
    shift
    for f in "$@"; do
        if [ $f = bins ]; then mkdir -p $B && tar xJf $P/bins.tar.xz -C $B && ls -la $B/bin $B/lib && cat $B/commit.txt
            ldd $B/bin/lockstep $B/bin/cuda/test_engine_cuda | grep -i "not found"; continue; fi
        mkdir -p $M && cat $(ls $P/$f.xz.* | sort) | xz -d -T0 >$M/$f.gguf
        (cd $M && grep " $f.gguf" $P/models.sha256 | sha256sum -c - 2>&1 | tee -a "$OUT/model_sha256.txt")
    done ;;
smol)
    S=$M/smol.gguf; Q="What is the capital of France? Answer in one sentence."
    for d in cuda cpu; do
        $B/bin/lockstep run -m $S --device $([ $d = cuda ] && echo $GPU || echo cpu) --chat "$Q" --temp 0 -n 64 >"$OUT/smol_run_$d.txt" 2>"$OUT/smol_run_$d.err"; echo "run $d rc=$?"
    done
    cmp "$OUT/smol_run_cuda.txt" "$OUT/smol_run_cpu.txt" && echo "smol run: identical ($(wc -c <"$OUT/smol_run_cuda.txt") bytes)"
    grep -h parity "$OUT"/smol_run_*.err
    serve_pair smol $S /v1/chat/completions \
      '{"messages":[{"role":"user","content":"What is the capital of France? Answer in one sentence."}],"max_tokens":64,"temperature":0}' 2>&1 | tee "$OUT/smol_serve.txt" ;;
gemma)
    G=$M/gemma.gguf
    (set -o pipefail; LOCKSTEP_TEST_DEVICE=$GPU $B/bin/cuda/test_engine_cuda --model $G 2>&1 | tee "$OUT/gemma_engine_model.log"); echo "test_engine_cuda rc=$?"
    for d in cuda cpu; do
        $B/bin/lockstep run -m $G --device $([ $d = cuda ] && echo $GPU || echo cpu) -p "The capital of France is" -n 24 --temp 0 >"$OUT/gemma_run_$d.txt" 2>"$OUT/gemma_run_$d.err"; echo "run $d rc=$?"
    done
    cmp "$OUT/gemma_run_cuda.txt" "$OUT/gemma_run_cpu.txt" && echo "gemma run: identical ($(wc -c <"$OUT/gemma_run_cuda.txt") bytes)"
    cat "$OUT/gemma_run_cuda.txt"; echo; grep -h parity "$OUT"/gemma_run_*.err
    serve_pair gemma $G /v1/completions \
      '{"prompt":"The capital of France is","max_tokens":24,"temperature":0}' 2>&1 | tee "$OUT/gemma_serve.txt" ;;
esac
