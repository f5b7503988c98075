#!/usr/bin/env python3
"""mtp_bench.py - what an MTP module buys: acceptance per draft position, mean accepted
tokens per verify, and the decode speed of `--spec mtp` against plain decoding, on
held-out chat prompts (tools/mtp_prompts_heldout.txt: prompts the fit never saw).

  python3 bench/mtp_bench.py --module mtp/SmolLM2-135M-Instruct.Q4_1.mtp.gguf --out bench/results/mtp-cpu
  python3 bench/mtp_bench.py --model models/gemma-3-270m-q4_k_m.gguf --module mtp/gemma-3-270m-q4_k_m.mtp.gguf \
      --raw --prompts tools/mtp_prompts_raw_heldout.txt --out bench/results/mtp-cpu-gemma

1. acceptance: each prompt at temperature 0 and at 0.8 (seeded), plain and with --spec mtp;
   the two answers must be the same tokens (else it stops: parity broken);
2. speed: plain and mtp runs interleaved (A B B A ...) per ISA (LOCKSTEP_ISA=avx2 forces
   AVX2 on an AVX-512 CPU), decode tok/s per run, medians and the median of the per-pair
   ratios.

--lookups 0,2 runs every mtp measurement once per value of `--draft-lookup` (0, the default
here: the module alone; N: prompt lookup first where the last N tokens occurred before, the
module elsewhere; `lockstep run --spec mtp` takes 2 unless told).

Each run is one `lockstep run --json` process (--no-probe: the bench compares the tokens
itself).  Writes OUT/runs.jsonl (every run) and OUT/summary.json, and prints a markdown
table."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(a, prompt, temp, spec, isa, draft_max, fixed=False, costs="measured", lookup=0):
    cmd = [str(a.lockstep), "run", "-m", a.model, "-p" if a.raw else "--chat", prompt, "-n", str(a.n), "--temp", str(temp),
           "--seed", str(a.seed), "-t", str(a.threads), "--json", "--no-probe", "--device", a.device]
    if spec:
        cmd += ["--spec", "mtp", "--draft-model", a.module, "--draft-max", str(draft_max),
                "--draft-p-min", str(a.p_min), "--draft-costs", costs] + (["--draft-fixed"] if fixed else []) + \
               ["--draft-lookup", str(lookup)]
    env = dict(os.environ)
    env.pop("LOCKSTEP_ISA", None)
    if isa != "auto":
        env["LOCKSTEP_ISA"] = isa
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    if r.returncode != 0:
        sys.exit("mtp_bench: %s failed: %s" % (" ".join(cmd), r.stderr[-2000:]))
    j = json.loads(r.stdout)
    j.update({"prompt": prompt, "temp": temp, "spec": "mtp" if spec else "off", "isa_req": isa, "costs": costs,
              "draft_max": draft_max if spec else 0, "p_min": a.p_min if spec else None, "fixed": fixed,
              "lookup": lookup if spec else None,
              "time": time.time()})
    return j


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--module", default="mtp/SmolLM2-135M-Instruct.Q4_1.mtp.gguf")
    ap.add_argument("--lockstep", default=str(ROOT / "build/lockstep"))
    ap.add_argument("--prompts", default=str(ROOT / "tools/mtp_prompts_heldout.txt"))
    ap.add_argument("--raw", action="store_true",
                    help="the prompts are raw text (-p), not chat messages (--chat): a pretrained model such as "
                         "Gemma 3 270M with tools/mtp_prompts_raw_heldout.txt")
    ap.add_argument("--n-prompts", type=int, default=8, help="prompts for the acceptance part")
    ap.add_argument("--speed-prompts", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--draft-max", type=int, default=3)
    ap.add_argument("--p-min", type=float, default=0.5)
    ap.add_argument("--isas", default="auto,avx2", help="the speed part's ISAs ('': none)")
    ap.add_argument("--no-acceptance", action="store_true", help="the speed part only")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (lockstep run --device)")
    ap.add_argument("--costs", default="measured",
                    help="the speed part's --draft-costs modes, each beside plain decoding (e.g. measured,static)")
    ap.add_argument("--lookups", default="0", help="--draft-lookup values of the mtp runs (0: none)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    prompts = [l.strip() for l in open(a.prompts) if l.strip()]
    log = open(out / "runs.jsonl", "w")
    summary = {"model": a.model, "module": a.module, "raw": a.raw, "n": a.n, "threads": a.threads, "draft_max": a.draft_max,
               "p_min": a.p_min, "seed": a.seed, "acceptance": {}, "speed": {}}

    # 1. acceptance (and parity) per temperature: the module's own, with a fixed chain of
    # --draft-max (every position measured), and what the adaptive length does with it
    lookups = [int(x) for x in a.lookups.split(",") if x]
    cases = [(t, f, lk) for t, f in ((0.0, True), (0.8, True), (0.0, False), (0.8, False)) for lk in lookups]
    for temp, fixed, lk in () if a.no_acceptance else cases:
        drafted, accepted = [0] * 16, [0] * 16
        props = lk_props = lk_drafted = lk_accepted = 0
        per_step = []
        n_drafted = n_accepted = n_gen = n_steps = 0
        for p in prompts[:a.n_prompts]:
            base = run(a, p, temp, False, "auto", 0)
            m = run(a, p, temp, True, "auto", a.draft_max, fixed, lookup=lk)
            for j in (base, m):
                log.write(json.dumps(j) + "\n")
            if base["tokens"] != m["tokens"]:
                sys.exit("mtp_bench: PARITY BROKEN: %r at temperature %g answers differently with --spec mtp" % (p, temp))
            for i, (d, c) in enumerate(zip(m.get("draft_pos_drafted", []), m.get("draft_pos_accepted", []))):
                drafted[i] += d
                accepted[i] += c
            props += m.get("draft_proposals", 0)
            lk_props += m.get("lookup_proposals", 0)
            lk_drafted += m.get("lookup_drafted", 0)
            lk_accepted += m.get("lookup_accepted", 0)
            per_step.append(m["mean_accepted_len"])
            n_gen += m["step_tokens"]
            n_steps += m["target_steps"]
            n_drafted += m["draft_n"]
            n_accepted += m["draft_accepted"]
        k = max([i + 1 for i in range(16) if drafted[i]] or [0])
        summary["acceptance"]["%g %s%s" % (temp, "fixed" if fixed else "adaptive", ", lookup %d" % lk if lk else "")] = {
            "lookup": lk, "lookup_proposals": lk_props, "lookup_drafted": lk_drafted, "lookup_accepted": lk_accepted,
            "tokens_per_target_step_all": n_gen / n_steps if n_steps else None,
            "prompts": a.n_prompts, "proposals": props, "drafted": n_drafted, "accepted": n_accepted,
            "per_position": [{"pos": i + 1, "drafted": drafted[i], "accepted": accepted[i],
                              "rate": accepted[i] / drafted[i]} for i in range(k)],
            # a verify with a proposal accepts `accepted` drafts and adds the target's own token
            "mean_accepted_per_verify": (n_accepted + props) / props if props else None,
            # every target step, with or without a proposal (the adaptive length declines some)
            "tokens_per_target_step_mean": statistics.mean(per_step),
        }

    # 2. speed, interleaved, per ISA: plain and one mtp run per cost mode, the order rotated
    modes = [x for x in a.costs.split(",") if x]
    for isa in [x for x in a.isas.split(",") if x]:
        mvs = [(mode, lk) for mode in modes for lk in lookups]
        for mode, lk in mvs:
            summary["speed"]["%s %s%s" % (isa, mode, " lookup%d" % lk if lk else "")] = {
                "plain": [], "mtp": [], "ratios": [], "drafted": 0, "accepted": 0, "draft_cost": [], "row_cost": []}
        for rep in range(a.reps):
            for i, p in enumerate(prompts[:a.speed_prompts]):
                variants = [None] + mvs
                r = (rep + i) % len(variants)
                res = {}
                for v in variants[r:] + variants[:r]:
                    res[v] = run(a, p, 0.0, v is not None, isa, a.draft_max, costs=v[0] if v else "measured",
                                 lookup=v[1] if v else 0)
                    log.write(json.dumps(res[v]) + "\n")
                for mode, lk in mvs:
                    if res[None]["tokens"] != res[(mode, lk)]["tokens"]:
                        sys.exit("mtp_bench: PARITY BROKEN under %s (%s, lookup %d) for %r" % (isa, mode, lk, p))
                    mode_ = mode
                    mode = (mode, lk)
                    s_ = summary["speed"]["%s %s%s" % (isa, mode_, " lookup%d" % lk if lk else "")]
                    s_["isa"] = res[None]["isa"]
                    s_["plain"].append(res[None]["decode_tok_s"])
                    s_["mtp"].append(res[mode]["decode_tok_s"])
                    s_["ratios"].append(res[mode]["decode_tok_s"] / res[None]["decode_tok_s"])
                    s_["drafted"] += res[mode]["draft_n"]
                    s_["accepted"] += res[mode]["draft_accepted"]
                    s_["draft_cost"].append(res[mode].get("draft_cost"))
                    s_["row_cost"].append(res[mode].get("draft_row_cost"))
    for k, s_ in summary["speed"].items():
        s_.update({"runs": len(s_["ratios"]), "plain_tok_s_median": statistics.median(s_["plain"]),
                   "mtp_tok_s_median": statistics.median(s_["mtp"]),
                   "speedup_median_of_pairs": statistics.median(s_["ratios"]),
                   "speedup_min": min(s_["ratios"]), "speedup_max": max(s_["ratios"]),
                   "draft_cost_median": statistics.median(s_["draft_cost"]),
                   "row_cost_median": statistics.median(s_["row_cost"])})
    log.close()
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")

    print("| temperature, draft length | proposals (by lookup) | acceptance by draft position | mean accepted tokens "
          "per verify | tokens per target step |")
    print("| --- | --- | --- | --- | --- |")
    for t, s in summary["acceptance"].items():
        pos = ", ".join("%d: %.0f %% (%d)" % (x["pos"], 100 * x["rate"], x["drafted"]) for x in s["per_position"])
        mv, ts = s["mean_accepted_per_verify"], s["tokens_per_target_step_all"]
        print("| %s | %d (%d) | %s | %s | %s |" % (t, s["proposals"], s["lookup_proposals"], pos,
                                                 "%.2f" % mv if mv else "-", "%.2f" % ts if ts else "-"))
    print()
    print("| ISA, costs | plain tok/s (median) | --spec mtp tok/s (median) | speed-up (median of pairs, min-max) "
          "| drafts accepted | draft / row cost (median) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for k, s in summary["speed"].items():
        print("| %s (%s) | %.1f | %.1f | %.2fx (%.2f-%.2f) | %d of %d | %.3f / %.3f |" % (
            s["isa"], " ".join(k.split()[1:]), s["plain_tok_s_median"], s["mtp_tok_s_median"], s["speedup_median_of_pairs"],
            s["speedup_min"], s["speedup_max"], s["accepted"], s["drafted"], s["draft_cost_median"],
            s["row_cost_median"]))


if __name__ == "__main__":
    main()
