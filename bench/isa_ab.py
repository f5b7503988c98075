#!/usr/bin/env python3
"""Interleaved A/B of two lockstep binaries at a forced ISA: decode (tg128) and prefill (pp512).

For comparing a kernel change on a shared host: the two binaries (A, e.g. built from main in
another worktree, and B) run alternately, A B A B ..., --pairs pairs per figure and ISA, and
the report gives each side's median and the ratio of medians B/A (and the median of the
per-pair ratios, which cancels load that changes slowly).  The figures are vs_llamacpp.py's:

  tg128  lockstep run -p STORY -n 128 --temp 0 --json --no-probe -t T  -> (n_gen-1)/decode_ms
  pp512  lockstep run -p TEXT512 -n 0 --json --no-probe -t T           -> 512 / prefill_s

The ISA is forced per run through the environment:
  avx512   LOCKSTEP_ISA=avx512
  avxvnni  LOCKSTEP_ISA=avxvnni
  avx2     LOCKSTEP_CPU_HIDE=avxvnni (AVX2 only, as an AVX2-only CPU runs: Zen 3)
Every sample records the ISA lockstep reports it ran ("isa" in its JSON).

  python3 bench/isa_ab.py --a ../wt-base/build/lockstep --b build/lockstep --isas avx2,avxvnni \\
      --pairs 5 --json-out bench/results/avx2/ab.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vs_llamacpp as vs  # noqa: E402

ISA_ENV = {
    "avx512": {"LOCKSTEP_ISA": "avx512"},
    "avxvnni": {"LOCKSTEP_ISA": "avxvnni"},
    "avx2": {"LOCKSTEP_CPU_HIDE": "avxvnni"},
    "scalar": {"LOCKSTEP_ISA": "scalar"},
}


def run_one(exe: str, model: str, prompt: str, n: int, threads: int, isa: str, timeout: float) -> dict:
    env = dict(os.environ)
    env.pop("LOCKSTEP_ISA", None)
    env.pop("LOCKSTEP_CPU_HIDE", None)
    env.update(ISA_ENV[isa])
    cmd = [exe, "run", "-m", model, "-p", prompt, "-n", str(n), "--temp", "0", "--json", "--no-probe",
           "-t", str(threads)]
    p = subprocess.run(["nice", "-n", "5", *cmd], capture_output=True, text=True, timeout=timeout, env=env)
    if p.returncode != 0:
        sys.exit(f"isa_ab: {exe} failed (exit {p.returncode}) at {isa}:\n{p.stderr[-2000:]}")
    j = vs.last_json_obj(p.stdout)
    if j.get("isa") and j["isa"] != isa:
        sys.exit(f"isa_ab: asked for {isa}, lockstep ran {j['isa']}")
    return j


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="the A binary (baseline)")
    ap.add_argument("--b", required=True, help="the B binary (candidate)")
    ap.add_argument("-m", "--model", default=str(vs.DEFAULT_MODEL))
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--isas", default="avx2,avxvnni")
    ap.add_argument("--figures", default="tg128,pp512")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json-out")
    args = ap.parse_args()

    ls = vs.Lockstep(Path(args.b), Path(args.model), args.threads)
    pp512 = vs.make_pp_prompt(ls, 512)
    out = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "a": args.a, "b": args.b,
           "model": args.model, "threads": args.threads, "pairs": args.pairs,
           "loadavg_start": os.getloadavg(), "figures": {}}
    print(f"A = {args.a}\nB = {args.b}\nmodel {args.model}, -t {args.threads}, {args.pairs} interleaved pairs\n")
    print("| ISA | figure | A median tok/s | B median tok/s | B/A (medians) | B/A (median of pair ratios) |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for isa in args.isas.split(","):
        for fig in args.figures.split(","):
            samples = []
            for i in range(args.pairs):
                pair = {}
                for side, exe in (("a", args.a), ("b", args.b)):
                    if fig == "tg128":
                        j = run_one(exe, args.model, vs.STORY_PROMPT, 128, args.threads, isa, args.timeout)
                        if j["n_gen"] != 128:
                            sys.exit(f"isa_ab: {exe} generated {j['n_gen']} tokens, not 128")
                        v = (j["n_gen"] - 1) / (j["decode_ms"] / 1e3)
                    else:
                        j = run_one(exe, args.model, pp512, 0, args.threads, isa, args.timeout)
                        v = j["n_prompt"] / (j["prefill_ms"] / 1e3)
                    pair[side] = {"tok_s": v, "isa": j.get("isa"), "loadavg": os.getloadavg()[0]}
                samples.append(pair)
            a = statistics.median(s["a"]["tok_s"] for s in samples)
            b = statistics.median(s["b"]["tok_s"] for s in samples)
            pr = statistics.median(s["b"]["tok_s"] / s["a"]["tok_s"] for s in samples)
            out["figures"][f"{isa}/{fig}"] = {"samples": samples, "a_median": a, "b_median": b, "ratio": b / a,
                                             "pair_ratio_median": pr}
            print(f"| {isa} | {fig} | {a:.1f} | {b:.1f} | {b / a:.2f}x | {pr:.2f}x |", flush=True)
    out["loadavg_end"] = os.getloadavg()
    if args.json_out:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
