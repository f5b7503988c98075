#!/usr/bin/env bash
# Speculative decoding on the GPU with a real model (issue 29 item 4, issue 30's GPU figure),
# run on the device host: plain decoding, `--spec ngram` on an input-grounded prompt (bench
# spec's first, as bench/suites.py has it) and `--spec mtp` with a fitted module on chat
# prompts, interleaved (plain, spec, spec, plain, ...), each pair checked for the same text.
#   LS    the CUDA build's lockstep (make CUDA=1 BUILD=build-cuda)
#   M     the model file;  MTP  its module (mtp/*.mtp.gguf);  MTP_B  a second module, labelled
#         mtp-b (e.g. the same one without lockstep.mtp.head_vocab), run beside it
#   OUT   where runs.jsonl and the log go;  PAIRS  pairs per prompt (default 3)
#   COSTS_AB=1  also the n-gram drafter with --draft-costs static (the fixed cost prior)
# Every run: lockstep run --device cuda --json --no-probe --temp 0 -n N (one process each,
# so each includes its own load; the figures are the run's decode tok/s and drafts).
set -u
LS=${LS:?}; M=${M:?}; # DEVICE: cuda (default) or cpu
 MTP=${MTP:-}; OUT=${OUT:-/tmp/out}; PAIRS=${PAIRS:-3}; N=${N:-128}
mkdir -p "$OUT"
J=$OUT/runs.jsonl
: > "$J"
GROUNDED='Here is a paragraph:
"The printing press, developed by Johannes Gutenberg around 1440, combined movable metal type, oil-based ink and a wooden screw press. Within decades printing spread across Europe, books became cheaper, and literacy rose."
Repeat the paragraph exactly, but replace "Johannes Gutenberg" with "a German goldsmith".'
CHATS=("Why is the sky blue? Explain in a few sentences."
       "Write a short poem about the sea."
       "What are three tips for learning a new language?")
one() { # label spec-args... ; prompt in $P
    local label=$1; shift
    local r
    r=$("$LS" run -m "$M" --device "${DEVICE:-cuda}" --json --no-probe --temp 0 -n "$N" --chat "$P" "$@" 2>/dev/null)
    printf '%s\n' "$r" | python3 -c '
import json, sys
label, prompt = sys.argv[1], sys.argv[2]
raw = sys.stdin.read()
try:
    o = json.loads(raw)
except Exception:
    print(json.dumps({"label": label, "prompt": prompt[:40], "error": raw[-300:]})); sys.exit()
keep = {k: o.get(k) for k in ("n_prompt", "n_gen", "decode_tok_s", "prefill_ms", "draft_n", "draft_accepted",
                               "draft_pos_drafted", "draft_pos_accepted", "draft_cost", "draft_row_cost", "device", "text")}
keep.update(label=label, prompt=prompt[:40])
print(json.dumps(keep))' "$label" "$P" >> "$J"
}
pairs() { # label spec-args...
    local label=$1; shift
    for i in $(seq 1 "$PAIRS"); do
        if [ $((i % 2)) = 1 ]; then one plain; one "$label" "$@"; else one "$label" "$@"; one plain; fi
    done
}
P=$GROUNDED; pairs ngram --spec ngram --draft-max 8
# COSTS_AB=1: the n-gram drafter again with the fixed cost prior (--draft-costs static)
if [ -n "${COSTS_AB:-}" ]; then pairs ngram-static --spec ngram --draft-max 8 --draft-costs static; fi
if [ -n "$MTP" ]; then
    for P in "${CHATS[@]}"; do pairs mtp --spec mtp --draft-model "$MTP" --draft-max 3; done
fi
if [ -n "${MTP_B:-}" ]; then
    for P in "${CHATS[@]}"; do pairs mtp-b --spec mtp --draft-model "$MTP_B" --draft-max 3; done
fi
python3 - "$J" <<'PY' | tee "$OUT/summary.txt"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
bad = [r for r in rows if "error" in r]
for r in bad: print("ERROR", r)
by = {}
for r in rows:
    if "error" not in r: by.setdefault((r["prompt"], r["label"]), []).append(r)
for (p, lab), rs in sorted(by.items()):
    if lab == "plain": continue
    base = by.get((p, "plain"), [])
    same = all(x["text"] == base[0]["text"] for x in rs + base) if base else False
    sp = statistics.median(x["decode_tok_s"] for x in rs); pl = statistics.median(x["decode_tok_s"] for x in base)
    d = sum(x["draft_n"] or 0 for x in rs); a = sum(x["draft_accepted"] or 0 for x in rs)
    print(f"{lab:6s} {p!r:44s} plain {pl:7.1f} tok/s, {lab} {sp:7.1f} tok/s: {sp / pl:.2f}x; "
          f"drafts {a}/{d} accepted; text identical to plain: {same}")
PY
