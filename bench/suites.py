#!/usr/bin/env python3
"""`make bench`: every lockstep benchmark suite in one run, with llama.cpp beside it.

Suites (each writes <out>/<suite>.json with every raw sample, <suite>.md, and where a
curve says more than a table <suite>.png; then <out>/summary.md):

  decode   decode at batch 1 (tg128) vs llama-bench tg128, and both as a percentage of
           the measured DRAM roofline (bandwidth / weight bytes read per token)
  prefill  prefill of 128, 512 and 2048 tokens vs llama-bench ppN
  batch    batched decode at B = 1..32 and the narrow-pin tax at B = 2, 4, 8
           (`lockstep bench batch --kernels both`); B = 1..16 vs llama-batched-bench S_TG
  mixed    one speculative stream amid N = 1, 3, 7 classic streams (`lockstep bench mixed`)
  spec     speedup and mean accepted length per drafter on input-grounded and prose
           prompts (`lockstep bench spec`); n-gram speculation vs llama-lookup
  cache    time to first token on a prefix-cache hit vs a miss, by suffix length
           (`lockstep bench cache`)
  probe    the exactness probe's cost (`lockstep probe --json --no-memo`)

Side-by-side figures run as interleaved A/B pairs (lockstep, llama.cpp, lockstep, ...)
with the machinery of bench/vs_llamacpp.py (engine priority, per-sample load record);
medians and the lockstep / llama.cpp ratio are reported.  llama.cpp is built first by
bench/llamacpp/build.sh when missing; if it cannot be built the run says so in a
banner, every peer figure is a FAILED row, and the exit status is 1.  See bench/README.md.
"""

from __future__ import annotations

import argparse
import atexit
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vs_llamacpp as vs  # noqa: E402

ROOT = vs.ROOT
SUITES = ("decode", "prefill", "batch", "mixed", "spec", "cache", "probe")

# Settings: FULL for `make bench` (the committed results), QUICK for development.
FULL = {
    "pairs": 5, "reps": 3, "prefill": [128, 512, 2048], "batches": "1,2,4,8,16,32", "batch_prompts": "both",
    "batch_gen": 32, "batch_plen": 64, "peer_batches": [1, 2, 4, 8, 16], "mixed_classic": "1,3,7",
    "mixed_gen": 64, "spec_n": 128, "cache_prefix": 512, "cache_suffixes": "1,2,4,8,16,32,64",
    "probe_reps": 5, "bw_reps": 7, "bw_runs": 3,
}
QUICK = {
    "pairs": 2, "reps": 1, "prefill": [128, 512], "batches": "1,2,4,8", "batch_prompts": "unshared",
    "batch_gen": 16, "batch_plen": 64, "peer_batches": [1, 4], "mixed_classic": "1,3",
    "mixed_gen": 32, "spec_n": 64, "cache_prefix": 512, "cache_suffixes": "1,8,64",
    "probe_reps": 1, "bw_reps": 3, "bw_runs": 1,
}

# The n-gram peer prompt: bench spec's first input-grounded prompt, in ChatML with
# SmolLM2's default system message, given as raw text to both engines (both parse the
# special tokens), so both see the same token ids.
LOOKUP_MSG = (
    "Here is a paragraph:\n\"The printing press, developed by Johannes Gutenberg around 1440, combined movable metal "
    "type, oil-based ink and a wooden screw press. Within decades printing spread across Europe, books became cheaper, "
    "and literacy rose.\"\nRepeat the paragraph exactly, but replace \"Johannes Gutenberg\" with \"a German goldsmith\".")
LOOKUP_PROMPT = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
                 f"<|im_start|>user\n{LOOKUP_MSG}<|im_end|>\n<|im_start|>assistant\n")
DRAFT_MAX = 8

T0 = time.time()


def log(s: str) -> None:
    print(f"[{time.time() - T0:6.1f}s] {s}", file=sys.stderr, flush=True)


def banner(lines: list[str]) -> str:
    bar = "#" * 78
    return "\n".join([bar, *[f"##  {x}" for x in lines], bar])


class SuiteError(Exception):
    pass


def why(e: BaseException) -> str:
    """One line for a table cell from a failed command (vs.sh's multi-line message):
    the exit status and the last line of its stderr."""
    msg = str(e)
    m = re.search(r"command failed \(exit (-?\d+)\): (\S+).*?--- stderr ---\n(.*?)\n--- stdout ---", msg, re.S)
    if m:
        err = [x.strip() for x in m.group(3).splitlines() if x.strip()]
        msg = f"{Path(m.group(2)).name} exited {m.group(1)}" + (f": {err[-1]}" if err else "")
    return " ".join(msg.split())[:240].replace("|", "/")


def run_json(cmd: list[str], timeout: float) -> tuple[dict, dict]:
    """A lockstep subcommand that prints one JSON object; returns it and the load record."""
    try:
        p, load = vs.measured(lambda: vs.sh(cmd, timeout))
    except SystemExit as e:  # vs.sh exits with the command's stderr on a failure
        raise SuiteError(why(e)) from None
    return vs.last_json_obj(p.stdout), load


# ---------------------------------------------------------------------------- llama.cpp
class LlamaLookup:
    """llama-lookup: greedy generation with prompt-lookup (n-gram) drafts of up to
    --spec-draft-n-max tokens; 0 drafts gives the same loop decoding plainly."""

    def __init__(self, bindir: Path, model: Path, threads: int):
        self.exe = bindir / "llama-lookup"
        self.model, self.threads = model, threads

    def cmd(self, prompt: str, n: int, draft_max: int) -> list[str]:
        return [str(self.exe), "-m", str(self.model), "-p", prompt, "-n", str(n), "--temp", "0", "-t",
                str(self.threads), "-c", "2048", "--spec-draft-n-max", str(draft_max)]

    def run(self, prompt: str, n: int, draft_max: int, timeout: float) -> dict:
        p = vs.sh(self.cmd(prompt, n, draft_max), timeout)
        out = p.stdout + p.stderr
        m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s", out)
        e = re.search(r"encoded\s+(\d+) tokens", out)
        if not m or not e:
            sys.exit(f"llama-lookup printed no 'encoded/decoded N tokens' lines:\n{out[-2000:]}")
        r = {"tok_s": float(m.group(3)), "n_gen": int(m.group(1)), "decode_s": float(m.group(2)),
             "n_prompt": int(e.group(1))}
        for k in ("n_drafted", "n_accept"):
            x = re.search(rf"{k}\s*=\s*(\d+)", out)
            r[k] = int(x.group(1)) if x else None
        return r


class Peer:
    """What of llama.cpp is usable, and why not when it is not."""

    def __init__(self, bindir: Path, build_error: str | None):
        self.bindir, self.build_error = bindir, build_error
        self.broken: dict[str, str] = {}  # tool -> why it cannot be used (it failed to run)

    def missing(self, tool: str) -> str | None:
        if tool in self.broken:
            return self.broken[tool]
        if (self.bindir / tool).exists():
            return None
        return f"{tool} not built" + (f" ({self.build_error})" if self.build_error else
                                      f" ({self.bindir / tool} is missing)")


def build_llamacpp(skip: bool, isa: str = "native") -> str | None:
    """Runs bench/llamacpp/build.sh (a no-op when up to date); the error, if any.  isa avx2 or
    avxvnni builds the llama.cpp of that level (LLAMA_ISA, into build/llama.cpp-<isa>/)."""
    if skip:
        return None
    lisa = isa if isa in ("avx2", "avxvnni") else "native"
    log(f"llama.cpp: LLAMA_ISA={lisa} bench/llamacpp/build.sh (builds once, ~20 min on 2 cores; a no-op when up to date)")
    r = subprocess.run(["nice", "-n", "19", "bash", str(ROOT / "bench" / "llamacpp" / "build.sh")], cwd=ROOT,
                       env={**os.environ, "LLAMA_ISA": lisa})
    return None if r.returncode == 0 else f"LLAMA_ISA={lisa} bench/llamacpp/build.sh failed with exit {r.returncode}"


# --isa LEVEL: the environment that makes every lockstep process of the run take that level
# (inherited by the children).  avx2 hides AVX-VNNI and AVX-512 (an AVX2-only CPU: Zen 2/3),
# avxvnni hides AVX-512 (Alder Lake-like); the run checks the ISA lockstep reports.
ISA_ENV = {"native": {}, "avx512": {"LOCKSTEP_ISA": "avx512"}, "avxvnni": {"LOCKSTEP_CPU_HIDE": "avx512"},
           "avx2": {"LOCKSTEP_CPU_HIDE": "avxvnni"}}


# ---------------------------------------------------------------------------- A/B pairs
def run_pairs(figures: list[tuple[str, dict]], pairs: int, peer_fail: dict[str, str]) -> dict:
    """Interleaved pairs: for each pair, for each figure, lockstep then llama.cpp.  figures:
    [(name, {"lockstep": fn, "llama.cpp": fn})], each fn returning a dict with "tok_s".
    peer_fail[name] (in/out): why the llama.cpp side of a figure has no samples."""
    raw = {name: {"lockstep": [], "llama.cpp": []} for name, _ in figures}
    for i in range(pairs):
        for name, fns in figures:
            for eng in ("lockstep", "llama.cpp"):
                if eng == "llama.cpp" and name in peer_fail:
                    continue
                try:
                    r, load = vs.measured(fns[eng])
                except SystemExit as e:
                    if eng == "lockstep":
                        raise SuiteError(f"{name}: {why(e)}") from None
                    peer_fail[name] = f"llama.cpp run failed: {why(e)}"
                    log(f"FAILED {name} llama.cpp: {e}")
                    continue
                r.update(load)
                raw[name][eng].append(r)
                log(f"pair {i + 1}/{pairs} {name:10s} {eng:9s} {r['tok_s']:8.2f} tok/s  "
                    f"(other load {100 * r['interference']:4.1f} %)")
    out = {}
    for name, _ in figures:
        a = [x["tok_s"] for x in raw[name]["lockstep"]]
        b = [x["tok_s"] for x in raw[name]["llama.cpp"]]
        s = {"lockstep_median": vs.med(a), "lockstep_samples": a, "llamacpp_samples": b}
        if name in peer_fail:
            s["llamacpp_FAILED"] = peer_fail[name]
        else:
            s["llamacpp_median"] = vs.med(b)
            s["ratio"] = vs.med(a) / vs.med(b)
        out[name] = s
    return {"summary": out, "raw": raw}


def peer_rows(summary: dict, label) -> list[list[str]]:
    rows = []
    for name, s in summary.items():
        if "llamacpp_FAILED" in s:
            rows.append([label(name), f"{s['lockstep_median']:.2f}", "**FAILED**", f"**FAILED**: {s['llamacpp_FAILED']}"])
        else:
            rows.append([label(name), f"{s['lockstep_median']:.2f}", f"{s['llamacpp_median']:.2f}",
                         f"{s['ratio']:.2f}x"])
    return rows


def md_table(head: list[str], rows: list[list], right: set[int] | None = None) -> str:
    """A markdown table; columns in `right` (default: all but the first) are right-aligned."""
    right = right if right is not None else set(range(1, len(head)))
    lines = ["| " + " | ".join(head) + " |",
             "| " + " | ".join("---:" if i in right else "---" for i in range(len(head))) + " |"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


PEER_HEAD = ["figure", "lockstep (median tok/s)", "llama.cpp (median tok/s)", "lockstep / llama.cpp"]


# ---------------------------------------------------------------------------- suites
class Ctx:
    """What every suite needs."""

    def __init__(self, args, cfg: dict, ls_exe: Path, bench_exe: Path, peer: Peer):
        self.args, self.cfg, self.peer = args, cfg, peer
        self.model, self.threads, self.timeout = args.model, args.threads, args.timeout
        self.exe, self.bexe = ls_exe, bench_exe
        self.ls = vs.Lockstep(ls_exe, self.model, self.threads, bench_exe)
        self.lb = vs.LlamaBench(peer.bindir, self.model, self.threads)
        self.lbb = vs.LlamaBatched(peer.bindir, self.model, self.threads)
        self.lk = LlamaLookup(peer.bindir, self.model, self.threads)
        self.shown = str(args.lockstep)  # the binary as the commands show it (runs use a snapshot)
        self.bshown = str(args.bench_tool)

    def lcmd(self, *a) -> list[str]:
        return [str(self.exe), *a, "-m", str(self.model), "-t", str(self.threads)]

    def bcmd(self, suite: str, *a) -> list[str]:
        """`lockstep-bench <suite> ...`: the benchmark tool (`lockstep bench` only points to it)."""
        return [str(self.bexe), suite, *a, "-m", str(self.model), "-t", str(self.threads)]

    def show(self, cmd: list[str]) -> str:
        return vs.short([self.shown if c == str(self.exe) else self.bshown if c == str(self.bexe) else c
                         for c in cmd])


def suite_decode(c: Ctx) -> dict:
    fail = {} if not c.peer.missing("llama-bench") else {"tg128": c.peer.missing("llama-bench")}
    pr = run_pairs([("tg128", {"lockstep": lambda: vs.one_sample("tg128", "lockstep", c.ls, c.lb, c.lbb, {}, c.timeout),
                               "llama.cpp": lambda: vs.one_sample("tg128", "llama.cpp", c.ls, c.lb, c.lbb, {},
                                                                  c.timeout)})],
                   c.cfg["pairs"], fail)
    weight_mib = c.ls.info_weight_mib()
    log("DRAM read bandwidth")
    with tempfile.TemporaryDirectory() as td:
        def best_bw(nbytes: int) -> dict:
            runs = []
            for _ in range(c.cfg["bw_runs"]):
                r, load = vs.measured(lambda: vs.measure_bandwidth(c.threads, nbytes, c.cfg["bw_reps"], Path(td)))
                r["interference"] = load["interference"]
                runs.append(r)
            best = max(runs, key=lambda x: x["best_GBps"])  # other load can only lower a reading
            return {**best, "runs": [{"best_GBps": x["best_GBps"], "samples_GBps": x["samples_GBps"],
                                      "interference": x["interference"]} for x in runs]}
        bw = best_bw(1 << 30)
        bw_w = best_bw((int(weight_mib * 2**20) + 4095) // 4096 * 4096)
    wbytes = weight_mib * 2**20
    roof = {"weight_MiB_per_token": weight_mib, "dram_GBps": bw["best_GBps"],
            "dram_roofline_tok_s": bw["best_GBps"] * 1e9 / wbytes,
            "weights_sized_buffer_GBps": bw_w["best_GBps"],
            "weights_sized_roofline_tok_s": bw_w["best_GBps"] * 1e9 / wbytes}
    s = pr["summary"]["tg128"]
    for eng, key in (("lockstep", "lockstep_median"), ("llamacpp", "llamacpp_median")):
        if key in s:
            roof[f"{eng}_pct_of_dram_roofline"] = 100 * s[key] / roof["dram_roofline_tok_s"]
            roof[f"{eng}_pct_of_weights_sized_roofline"] = 100 * s[key] / roof["weights_sized_roofline_tok_s"]
    md = [md_table(PEER_HEAD, peer_rows(pr["summary"], lambda n: "decode, batch 1 (tg128)")), "",
          md_table(["roofline", "value"], [
              ["weights read per token (`lockstep info`)", f"{weight_mib:.1f} MiB"],
              [f"DRAM read bandwidth ({bw['method']})", f"{bw['best_GBps']:.2f} GB/s"],
              ["DRAM roofline for decode (bandwidth / weight bytes)", f"{roof['dram_roofline_tok_s']:.1f} tok/s"],
              ["**lockstep decode, % of the DRAM roofline**", f"**{roof['lockstep_pct_of_dram_roofline']:.1f} %**"],
              ["llama.cpp decode, % of the DRAM roofline",
               f"{roof['llamacpp_pct_of_dram_roofline']:.1f} %" if "llamacpp_pct_of_dram_roofline" in roof
               else "**FAILED**"],
              [f"read bandwidth over a weights-sized buffer ({bw_w['bytes'] / 2**20:.0f} MiB; may be cache-resident)",
               f"{bw_w['best_GBps']:.2f} GB/s"],
              ["roofline at that bandwidth", f"{roof['weights_sized_roofline_tok_s']:.1f} tok/s"],
              ["lockstep decode, % of that roofline", f"{roof['lockstep_pct_of_weights_sized_roofline']:.1f} %"],
              ["llama.cpp decode, % of that roofline",
               f"{roof['llamacpp_pct_of_weights_sized_roofline']:.1f} %"
               if "llamacpp_pct_of_weights_sized_roofline" in roof else "**FAILED**"]]), "",
          "The DRAM roofline uses the bandwidth over a 1 GiB buffer. The weights read per token are small "
          "enough to stay in a large last-level cache between tokens, so decode can exceed it; the second "
          "roofline uses the bandwidth measured over a buffer the size of the weights.", "",
          "lockstep's figure is its forward-pass rate (n_gen - 1) / decode_ms over 128 generated tokens "
          "(the quantity llama-bench's tg counts); the prompt is a 27-token story opening."]
    headline = [["decode tok/s, batch 1", f"{s['lockstep_median']:.1f}"],
                ["decode, % of DRAM roofline (1 GiB buffer)", f"{roof['lockstep_pct_of_dram_roofline']:.1f} %"],
                ["decode, % of the weights-sized-buffer roofline",
                 f"{roof['lockstep_pct_of_weights_sized_roofline']:.1f} %"]]
    return {"data": {**pr, "roofline": roof, "bandwidth": {"dram": bw, "weights_sized": bw_w},
                     "commands": {"lockstep": c.show(c.ls.run_cmd(vs.STORY_PROMPT, 128)),
                                  "llama.cpp": vs.short(c.lb.cmd(0, 128))}},
            "md": "\n".join(md), "headline": headline,
            "peer": peer_rows(pr["summary"], lambda n: "decode, batch 1 (tg128)")}


def suite_prefill(c: Ctx) -> dict:
    sizes = c.cfg["prefill"]
    prompts = {n: vs.make_pp_prompt(c.ls, n) for n in sizes}
    fail = {} if not c.peer.missing("llama-bench") else {f"pp{n}": c.peer.missing("llama-bench") for n in sizes}
    figs = [(f"pp{n}", {"lockstep": (lambda n=n: vs.one_sample(f"pp{n}", "lockstep", c.ls, c.lb, c.lbb, prompts,
                                                                 c.timeout)),
                        "llama.cpp": (lambda n=n: vs.one_sample(f"pp{n}", "llama.cpp", c.ls, c.lb, c.lbb, prompts,
                                                                  c.timeout))}) for n in sizes]
    pr = run_pairs(figs, c.cfg["pairs"], fail)
    label = lambda n: f"prefill, {n[2:]} tokens"  # noqa: E731
    rows = peer_rows(pr["summary"], label)
    md = [md_table(PEER_HEAD, rows), "",
          "lockstep: `lockstep run -p TEXT -n 0` (a text that tokenizes to exactly N tokens), N / prefill_ms; "
          "llama.cpp: `llama-bench -p N -n 0`, avg_ts.", "", "![prefill](prefill.png)"]
    plot_lines("prefill.png", c, "prefill tokens", "prefill tok/s", sizes,
               {"lockstep": [pr["summary"][f"pp{n}"]["lockstep_median"] for n in sizes],
                "llama.cpp": [pr["summary"][f"pp{n}"].get("llamacpp_median") for n in sizes]},
               "Prefill throughput by prompt length")
    return {"data": {**pr, "prompts": prompts,
                     "commands": {f"pp{n}": {"lockstep": c.show(c.ls.run_cmd(prompts[n], 0)),
                                             "llama.cpp": vs.short(c.lb.cmd(n, 0))} for n in sizes}},
            "md": "\n".join(md), "png": "prefill.png",
            "headline": [[f"prefill tok/s, {n} tokens", f"{pr['summary'][f'pp{n}']['lockstep_median']:.1f}"]
                         for n in sizes],
            "peer": rows}


def suite_batch(c: Ctx) -> dict:
    cfg = c.cfg
    cmd = c.bcmd("batch", "--batches", cfg["batches"], "--kernels", "both", "--prompts",
                 cfg["batch_prompts"], "--reps", str(cfg["reps"]), "--gen", str(cfg["batch_gen"]), "--prompt-len",
                 str(cfg["batch_plen"]), "--no-ttft", "--json")
    log("lockstep bench batch --kernels both")
    j, load = run_json(cmd, c.timeout * 4)
    # The side-by-side pairs use the sweep's shapes (vs_llamacpp's module settings).
    vs.BATCH_TG, vs.BATCH_PP = cfg["batch_gen"], cfg["batch_plen"]
    bs = cfg["peer_batches"]
    fail = {} if not c.peer.missing("llama-batched-bench") else {
        f"tgb{b}": c.peer.missing("llama-batched-bench") for b in bs}
    figs = [(f"tgb{b}", {"lockstep": (lambda b=b: vs.one_sample(f"tgb{b}", "lockstep", c.ls, c.lb, c.lbb, {},
                                                                 c.timeout)),
                         "llama.cpp": (lambda b=b: vs.one_sample(f"tgb{b}", "llama.cpp", c.ls, c.lb, c.lbb, {},
                                                                   c.timeout))}) for b in bs]
    pr = run_pairs(figs, cfg["pairs"], fail)
    rows = []
    for r in j["batch"]:
        tax = next((t["auto_over_narrow"] for t in j.get("narrow_tax", [])
                    if t["B"] == r["B"] and t["shared"] == r["shared"]), None)
        if r["kernels"] == "auto":
            narrow = next((x for x in j["batch"] if x["B"] == r["B"] and x["shared"] == r["shared"]
                           and x["kernels"] == "narrow"), None)
            rows.append([r["B"], "shared" if r["shared"] else "unshared", f"{r['decode_tok_s']:.1f}",
                         f"{r['step_ms']:.2f}", f"{r['vs_b1']:.2f}x",
                         f"{narrow['decode_tok_s']:.1f}" if narrow else "",
                         f"{tax:.2f}x" if tax else ""])
    label = lambda n: f"batched decode, B = {n[3:]} (S_TG)"  # noqa: E731
    prow = peer_rows(pr["summary"], label)
    md = [f"`lockstep bench batch --kernels both` ({cfg['batch_plen']}-token prompts, {cfg['batch_gen']} decode tokens "
          f"per sequence, median of {cfg['reps']}; \"shared\": the first 3/4 of every prompt the same). "
          "Narrow-pin tax = auto tok/s / narrow tok/s at the same B (every row through the single-row kernel).", "",
          md_table(["B", "prompts", "decode tok/s (auto)", "step ms", "vs B=1", "narrow tok/s",
                    "narrow-pin tax"], rows, right={0, 2, 3, 4, 5, 6}), "",
          "Side by side, interleaved pairs, unshared prompts (`lockstep bench batch --batches B --prompts unshared` "
          "vs `llama-batched-bench -npp {0} -ntg {1} -npl B`, its S_TG):".format(cfg["batch_plen"], cfg["batch_gen"]),
          "", md_table(PEER_HEAD, prow), "", "![batch](batch.png)"]
    series = {}
    for sh in (False, True):
        for k in ("auto", "narrow"):
            pts = sorted((r["B"], r["decode_tok_s"]) for r in j["batch"] if r["shared"] == sh and r["kernels"] == k)
            if pts:
                series[f"lockstep {k}, {'shared' if sh else 'unshared'} prompts"] = pts
    series["llama.cpp S_TG (side-by-side pairs)"] = [(b, pr["summary"][f"tgb{b}"].get("llamacpp_median")) for b in bs]
    series["lockstep (side-by-side pairs)"] = [(b, pr["summary"][f"tgb{b}"]["lockstep_median"]) for b in bs]
    plot_xy("batch.png", c, "batch size B (sequences)", "aggregate decode tok/s", series,
            "Batched decode throughput", logx=True)
    b8 = next((r for r in j["batch"] if r["B"] == 8 and not r["shared"] and r["kernels"] == "auto"), None)
    headline = []
    if b8:
        headline.append(["batched decode tok/s, B = 8 (unshared)", f"{b8['decode_tok_s']:.1f} ({b8['vs_b1']:.2f}x B=1)"])
    for t in j.get("narrow_tax", []):
        if not t["shared"]:
            headline.append([f"narrow-pin tax, B = {t['B']}", f"{t['auto_over_narrow']:.2f}x"])
    return {"data": {"lockstep_bench_batch": j, "lockstep_bench_batch_load": load, **pr,
                     "commands": {"sweep": c.show(cmd),
                                  **{f"tgb{b}": {"lockstep": c.show(c.ls.batch_cmd(b)),
                                                 "llama.cpp": vs.short(c.lbb.cmd(b))} for b in bs}}},
            "md": "\n".join(md), "png": "batch.png", "headline": headline, "peer": prow}


def suite_mixed(c: Ctx) -> dict:
    cfg = c.cfg
    cmd = c.bcmd("mixed", "--classic", cfg["mixed_classic"], "--gen", str(cfg["mixed_gen"]), "--reps",
                 str(cfg["reps"]), "--json")
    log("lockstep bench mixed")
    j, load = run_json(cmd, c.timeout * 4)
    rows = [[r["N"], f"{r['classic_absent_tok_s']:.1f}", f"{r['classic_with_spec_tok_s']:.1f}",
             f"{r['classic_with_spec_over_absent']:.2f}x", f"{r['classic_with_plain_tok_s']:.1f}",
             f"{r['spec_stream_tok_s']:.1f}", f"{r['spec_stream_plain_tok_s']:.1f}",
             f"**{r['spec_stream_speedup']:.2f}x**", f"{r['spec_tokens_per_step']:.2f}",
             f"{100 * r['spec_accept_rate']:.0f} %"] for r in j["mixed"]]
    md = [f"`lockstep bench mixed`: one {j['drafter']}-speculative stream (an input-grounded rewrite, "
          f"{j['gen_spec']} tokens, draft-max {j['draft_max']}) amid N classic streams (prose chats, {j['gen_classic']} "
          f"tokens each), greedy; median of {j['reps']}. Rates over the full-mix window (the steps that begin with "
          "every stream decoding). \"+ plain\": the same stream decoded without its drafter in the same mix.", "",
          md_table(["N classic", "classic tok/s, spec absent", "classic tok/s, spec present", "present / absent",
                    "classic tok/s, + plain", "spec stream tok/s", "same stream plain tok/s", "spec speedup",
                    "spec tokens/step", "accept rate"], rows), "",
          f"Parity: {j['parity_streams_checked']} stream runs, every one byte-identical (memcmp of tokens) to "
          f"the stream's solo run; failures: {j['parity_failures']}.", "", "![mixed](mixed.png)"]
    plot_mixed("mixed.png", c, j)
    headline = [[f"mixed N={r['N']}: classic present/absent, spec speedup",
                 f"{r['classic_with_spec_over_absent']:.2f}x, {r['spec_stream_speedup']:.2f}x"] for r in j["mixed"]]
    headline.append(["mixed: parity", f"{j['parity_streams_checked']} streams identical to solo"])
    return {"data": {"lockstep_bench_mixed": j, "load": load, "command": c.show(cmd)}, "md": "\n".join(md),
            "png": "mixed.png", "headline": headline, "peer": []}


def suite_spec(c: Ctx) -> dict:
    cfg = c.cfg
    cmd = c.bcmd("spec", "-n", str(cfg["spec_n"]), "--draft-max", str(DRAFT_MAX), "--reps",
                 str(cfg["reps"]), "--json")
    log("lockstep bench spec")
    j, load = run_json(cmd, c.timeout * 6)
    rows = [[r["prompts"], r["drafter"], f"{r['tok_s']:.1f}", f"{r['speedup']:.2f}x", f"{r['mean_accepted_len']:.2f}",
             f"{100 * r['accept_rate']:.0f} %"] for r in j["spec"]]
    # n-gram speculation side by side: lockstep run --spec ngram vs llama-lookup, and both plain.
    n = cfg["spec_n"]
    spec_args = ("--spec", "ngram", "--draft-max", str(DRAFT_MAX))
    fail = {} if not c.peer.missing("llama-lookup") else {k: c.peer.missing("llama-lookup")
                                                            for k in ("ngram", "plain")}

    def ls_run(extra):
        r = c.ls.run(LOOKUP_PROMPT, n, c.timeout, extra)
        return {"tok_s": r["decode_tok_s"], "n_gen": r["n_gen"], "n_prompt": r["n_prompt"],
                "decode_ms": r["decode_ms"], "finish_reason": r["finish_reason"],
                "mean_accepted_len": r.get("mean_accepted_len"), "draft_n": r.get("draft_n"),
                "draft_accepted": r.get("draft_accepted")}
    figs = [("ngram", {"lockstep": lambda: ls_run(spec_args),
                       "llama.cpp": lambda: c.lk.run(LOOKUP_PROMPT, n, DRAFT_MAX, c.timeout)}),
            ("plain", {"lockstep": lambda: ls_run(()),
                       "llama.cpp": lambda: c.lk.run(LOOKUP_PROMPT, n, 0, c.timeout)})]
    pr = run_pairs(figs, cfg["pairs"], fail)
    label = {"ngram": "n-gram speculation, grounded prompt (decode tok/s)",
             "plain": "same prompt, no drafts (decode tok/s)"}
    prow = peer_rows(pr["summary"], lambda k: label[k])
    sp = {}
    for eng, key in (("lockstep", "lockstep_median"), ("llama.cpp", "llamacpp_median")):
        a, b = pr["summary"]["ngram"].get(key), pr["summary"]["plain"].get(key)
        sp[eng] = a / b if a and b else None
    raw = pr["raw"]
    lk_acc = [x["n_accept"] / x["n_drafted"] for x in raw["ngram"]["llama.cpp"] if x.get("n_drafted")]
    ls_len = [x["mean_accepted_len"] for x in raw["ngram"]["lockstep"] if x.get("mean_accepted_len")]
    ls_acc = [x["draft_accepted"] / x["draft_n"] for x in raw["ngram"]["lockstep"] if x.get("draft_n")]
    md = [f"`lockstep bench spec` (greedy, {j['n_gen']} tokens, draft-max {j['draft_max']}; medians over 3 prompts "
          f"x {j['reps']} reps; every drafter's tokens are checked equal to plain decoding). \"accepted len\": "
          "tokens per target decode step (1 + accepted drafts). `draft(self)` is the adaptive drafter with the "
          "target as its own draft (its cost model declines to draft); `draft(self,k)` forces draft-max drafts "
          "to show the acceptance.", "",
          md_table(["prompts", "drafter", "tok/s", "speedup", "accepted len", "accept rate"], rows,
                   right={2, 3, 4, 5}), "",
          "The price of verifying drafts: `lockstep bench spec` also runs the first input-grounded prompt with a "
          "drafter whose k drafts are always rejected, so every decode step is one block of k + 1 rows that yields "
          f"one token (medians of {j.get('verify_reps', '?')} runs per k, interleaved). \"per extra row\" is "
          "(step / one-row step - 1) / k, the quantity the adaptive draft length weighs "
          "(`LS_SPEC_ROW_COST` in src/spec/spec.c).", "",
          md_table(["drafts", "rows per step", "step ms", "x one-row step", "per extra row"],
                   [[str(v["drafts"]), str(v["rows"]), f"{v['step_ms']:.3f}", f"{v['x_one_row']:.2f}x",
                     f"{v['per_extra_row']:.2f}" if v["drafts"] else "—"] for v in j.get("verify_cost", [])],
                   right={0, 1, 2, 3, 4}), "",
          f"N-gram speculation side by side, one input-grounded prompt (a paragraph to repeat with one change, "
          f"{pr['raw']['ngram']['lockstep'][0]['n_prompt'] if raw['ngram']['lockstep'] else '?'} prompt tokens, up "
          f"to {n} tokens, greedy, draft-max {DRAFT_MAX}): `lockstep run --spec ngram` vs `llama-lookup`, each also "
          "without drafts (`lockstep run`, `llama-lookup --spec-draft-n-max 0`). Both count decode tok/s as tokens "
          "generated / decode time.", "", md_table(PEER_HEAD, prow), "",
          md_table(["", "lockstep", "llama.cpp"], [
              ["speedup of n-gram drafts over no drafts",
               f"{sp['lockstep']:.2f}x" if sp["lockstep"] else "—",
               f"{sp['llama.cpp']:.2f}x" if sp["llama.cpp"] else "**FAILED**"],
              ["drafts accepted", f"{100 * vs.med(ls_acc):.0f} %" if ls_acc else "—",
               f"{100 * vs.med(lk_acc):.0f} %" if lk_acc else "**FAILED**"],
              ["tokens per step (lockstep: 1 + accepted)", f"{vs.med(ls_len):.2f}" if ls_len else "—", ""]])]
    g = {r["drafter"]: r for r in j["spec"] if r["prompts"] == "input-grounded"}
    p = {r["drafter"]: r for r in j["spec"] if r["prompts"] == "prose"}
    headline = [["ngram speedup, grounded / prose", f"{g['ngram']['speedup']:.2f}x / {p['ngram']['speedup']:.2f}x"],
                ["ngram mean accepted length, grounded", f"{g['ngram']['mean_accepted_len']:.2f}"]]
    return {"data": {"lockstep_bench_spec": j, "load": load, **pr, "speedup_ngram_over_plain": sp,
                     "lookup_prompt": LOOKUP_PROMPT,
                     "commands": {"spec": c.show(cmd),
                                  "ngram": {"lockstep": c.show(c.ls.run_cmd(LOOKUP_PROMPT, n, spec_args)),
                                            "llama.cpp": vs.short(c.lk.cmd(LOOKUP_PROMPT, n, DRAFT_MAX))},
                                  "plain": {"lockstep": c.show(c.ls.run_cmd(LOOKUP_PROMPT, n)),
                                            "llama.cpp": vs.short(c.lk.cmd(LOOKUP_PROMPT, n, 0))}}},
            "md": "\n".join(md), "headline": headline, "peer": prow}


def suite_cache(c: Ctx) -> dict:
    cfg = c.cfg
    cmd = c.bcmd("cache", "--prefix", str(cfg["cache_prefix"]), "--suffixes", cfg["cache_suffixes"],
                 "--reps", str(cfg["reps"]), "--json")
    log("lockstep bench cache")
    j, load = run_json(cmd, c.timeout * 4)
    rows = [[r["suffix"], f"{r['miss_ms']:.1f}", f"{r['hit_ms']:.2f}", f"{r['speedup']:.1f}x",
             r["hit_cached_positions"]] for r in j["cache"]]
    md = [f"`lockstep bench cache`: time to first token of a prompt = a {j['prefix']}-token prefix + a new suffix, "
          f"with the prefix already in the engine's prefix cache (hit) or a cold engine (miss); serving defaults "
          f"(512-token step budget), greedy, median of {j['reps']}.", "",
          md_table(["suffix tokens", "miss ms", "hit ms", "miss / hit", "positions reused (hit)"], rows), "",
          "![cache](cache.png)"]
    sfx = [r["suffix"] for r in j["cache"]]
    plot_xy("cache.png", c, "suffix tokens after the cached prefix", "time to first token, ms",
            {"miss (cold engine)": list(zip(sfx, [r["miss_ms"] for r in j["cache"]])),
             "hit (prefix cached)": list(zip(sfx, [r["hit_ms"] for r in j["cache"]]))},
            f"TTFT, {j['prefix']}-token prefix: prefix-cache hit vs miss", logx=True, logy=True)
    headline = [[f"TTFT hit / miss, suffix {r['suffix']}", f"{r['hit_ms']:.1f} / {r['miss_ms']:.0f} ms "
                 f"({r['speedup']:.0f}x)"] for r in j["cache"] if r["suffix"] in (1, 64)]
    return {"data": {"lockstep_bench_cache": j, "load": load, "command": c.show(cmd)}, "md": "\n".join(md),
            "png": "cache.png", "headline": headline, "peer": []}


def suite_probe(c: Ctx) -> dict:
    cmd = c.lcmd("probe", "--json", "--no-memo")
    samples = []
    for i in range(c.cfg["probe_reps"]):
        j, load = run_json(cmd, c.timeout)
        samples.append({**j, **load})
        log(f"probe {i + 1}/{c.cfg['probe_reps']}: {j['verdict']}, {j['ms']:.0f} ms")
    ms = [x["ms"] for x in samples]
    verdicts = sorted({x["verdict"] for x in samples})
    s0 = samples[0]
    axes = s0.get("axes", {})
    passed = [k for k, v in axes.items() if v.get("state") == "passed"]
    unchecked = [f"{k} ({v.get('why', '?')})" for k, v in axes.items() if v.get("state") == "not checked"]
    rows = [["verdict", ", ".join(verdicts)],
            ["axes passed", ", ".join(passed) or "—"],
            ["axes not checked", ", ".join(unchecked) or "none"],
            ["random draws; logits rows compared", f"{s0.get('draws', '?')}; {s0.get('logits_rows', '?')}"],
            ["probe ms (median)", f"{vs.med(ms):.0f}"],
            ["probe ms (min–max)", f"{min(ms):.0f}–{max(ms):.0f}"]]
    phases = list(s0.get("phase_ms", {}))
    for ph in phases:
        rows.append([f"  of which {ph} (median ms)", f"{vs.med([x['phase_ms'][ph] for x in samples]):.0f}"])
    md = [f"`lockstep probe --json --no-memo` ({s0.get('spec')} drafter, draft-max {s0.get('draft_max')}, "
          f"{s0.get('threads')} threads, {s0.get('isa')}), {len(ms)} runs: the cost of certifying the serving "
          "configuration through the engine, byte for byte (batch mix, chunked prefill, prefix cache, block vs "
          "chain, threads, the live ISA against the scalar reference; docs/engine.md). It runs once per model, "
          "binary and configuration; later starts read the memo.", "", md_table(["", "value"], rows)]
    return {"data": {"samples": samples, "median_ms": vs.med(ms), "command": c.show(cmd)}, "md": "\n".join(md),
            "headline": [["probe cost", f"{vs.med(ms):.0f} ms ({', '.join(verdicts)})"]], "peer": []}


# ---------------------------------------------------------------------------- plots
def _plt():
    import matplotlib  # noqa: PLC0415
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    return plt


def _save(plt, fig, name: str, c: Ctx, title: str) -> None:
    fig.suptitle(title, fontsize=11)
    fig.text(0.99, 0.01, c.args.footer, ha="right", va="bottom", fontsize=6, color="0.4")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(c.args.out / name, dpi=110)
    plt.close(fig)


def plot_xy(name: str, c: Ctx, xl: str, yl: str, series: dict, title: str, logx=False, logy=False) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, pts in series.items():
        pts = [(x, y) for x, y in pts if y is not None]
        if pts:  # the peer dashed in black, so it stands apart from lockstep's series
            style = {"linestyle": "--", "color": "k"} if label.startswith("llama.cpp") else {}
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label, **style)
    if logx:
        ax.set_xscale("log", base=2)
        xs = sorted({p[0] for pts in series.values() for p in pts})
        ax.set_xticks(xs)
        ax.set_xticklabels([str(x) for x in xs])
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xl)
    ax.set_ylabel(yl)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    _save(plt, fig, name, c, title)


def plot_lines(name: str, c: Ctx, xl: str, yl: str, xs: list, ys: dict, title: str) -> None:
    plot_xy(name, c, xl, yl, {k: list(zip(xs, v)) for k, v in ys.items()}, title, logx=True)


def plot_mixed(name: str, c: Ctx, j: dict) -> None:
    plt = _plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 4))
    ns = [r["N"] for r in j["mixed"]]
    w = 0.27
    xs = range(len(ns))
    for k, (key, lab) in enumerate((("classic_absent_tok_s", "spec stream absent"),
                                    ("classic_with_spec_tok_s", "spec stream present"),
                                    ("classic_with_plain_tok_s", "same stream, plain"))):
        a1.bar([x + (k - 1) * w for x in xs], [r[key] for r in j["mixed"]], w, label=lab)
    a1.set_xticks(list(xs))
    a1.set_xticklabels([str(n) for n in ns])
    a1.set_xlabel("classic streams N")
    a1.set_ylabel("classic streams' aggregate tok/s")
    a1.legend(fontsize=8)
    a1.grid(True, axis="y", alpha=0.3)
    for k, (key, lab) in enumerate((("spec_stream_plain_tok_s", "decoded plainly"),
                                    ("spec_stream_tok_s", f"with {j['drafter']} drafts"))):
        a2.bar([x + (k - 0.5) * w for x in xs], [r[key] for r in j["mixed"]], w, label=lab)
    a2.set_xticks(list(xs))
    a2.set_xticklabels([str(n) for n in ns])
    a2.set_xlabel("classic streams N beside it")
    a2.set_ylabel("speculative stream's tok/s")
    a2.legend(fontsize=8)
    a2.grid(True, axis="y", alpha=0.3)
    _save(plt, fig, name, c, "One speculative stream amid N classic streams")


def ensure_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401, PLC0415
        return
    except ImportError:
        pass
    log("matplotlib is missing: pip install matplotlib (PyPI)")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "matplotlib"])
    try:
        import matplotlib  # noqa: F401, PLC0415
    except ImportError:
        sys.exit(banner([f"FAILED: matplotlib is not installed and `pip install matplotlib` failed (exit "
                         f"{r.returncode})", "the plots need it: install it and rerun"]))


# ---------------------------------------------------------------------------- main
RUNNERS = {"decode": suite_decode, "prefill": suite_prefill, "batch": suite_batch, "mixed": suite_mixed,
           "spec": suite_spec, "cache": suite_cache, "probe": suite_probe}
TITLES = {"decode": "Decode at batch 1 and the DRAM roofline", "prefill": "Prefill",
          "batch": "Batched decode and the narrow-pin tax", "mixed": "A speculative stream amid classic streams",
          "spec": "Speculative decoding per drafter", "cache": "Prefix cache: time to first token",
          "probe": "Probe cost"}


def commands_md(data: dict) -> str:
    """The exact command lines a suite ran (long prompts elided; see the JSON), as a code block."""
    lines = []

    def walk(x, label=""):
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, f"{label} {k}".strip())
        elif isinstance(x, str):
            lines.append(f"# {label}\n{x}" if label else x)
    walk(data.get("commands", data.get("command", "")))
    return "```sh\n" + "\n".join(lines) + "\n```" if lines else ""


def header(meta: dict) -> list[str]:
    m, ls, lc = meta["machine"], meta["lockstep"], meta["llama.cpp"]
    return [f"- date: {meta['date_utc']}; {meta['threads']} threads; model `{meta['model']}`; settings: "
            f"{meta['settings_name']}",
            f"- machine: {m.get('Model name', '?')}, {m.get('CPU(s)', '?')} CPUs, "
            f"{m.get('Thread(s) per core', '?')} thread(s) per core, {m.get('MemTotal', '?')}; "
            f"{', '.join(m.get('flags_of_note', []))}",
            f"- lockstep: commit {ls['commit']}{' + uncommitted changes in src/' if ls['uncommitted_changes_in_src'] else ''}"
            f", binary sha256 {ls['binary_sha256']}…, ISA {ls.get('isa', '?')}, {ls['cc']}, `{ls['cflags']}` (ISA files add "
            f"`{ls['cflags_avx512_files']}`)",
            f"- llama.cpp: " + (f"commit {lc.get('llama.cpp commit', '?')[:10]} ({lc.get('llama.cpp commit date', '?')}), "
                                f"{lc.get('sdist', '?')}, ggml {lc.get('ggml version', '?')}, "
                                f"`{lc.get('flags ggml-cpu.c', '?')}`" if lc.get("llama.cpp commit") else "**not built**"),
            f"- engines ran at {meta['engine_priority']}; load average before the run "
            f"{meta['loadavg_before'][0]:.2f}"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suites", default=",".join(SUITES), help=f"comma list of {', '.join(SUITES)} (default: all)")
    ap.add_argument("--quick", action="store_true",
                    help="reduced settings for development (2 pairs, 1 rep, fewer sizes); writes to "
                         "build/bench/results-quick unless --out is given")
    ap.add_argument("--out", type=Path, help="results folder (default bench/results)")
    ap.add_argument("-m", "--model", type=Path, default=vs.DEFAULT_MODEL)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--pairs", type=int, help="A/B pairs per side-by-side figure (default 5; --quick 2)")
    ap.add_argument("--reps", type=int, help="repetitions inside each lockstep bench (default 3; --quick 1)")
    ap.add_argument("--lockstep", type=Path, default=vs.DEFAULT_LOCKSTEP)
    ap.add_argument("--bench-tool", type=Path, default=vs.DEFAULT_BENCH_TOOL,
                    help="the benchmark tool, lockstep-bench (default build/lockstep-bench)")
    ap.add_argument("--llama-bin", type=Path, default=None,
                    help="llama.cpp's bin folder (default build/llama.cpp/build/bin; with --isa avx2 or "
                         "avxvnni, build/llama.cpp-<isa>/build/bin)")
    ap.add_argument("--isa", choices=sorted(ISA_ENV), default="native",
                    help="run lockstep at this kernel level (avx2: LOCKSTEP_CPU_HIDE=avxvnni, avxvnni: "
                         "LOCKSTEP_CPU_HIDE=avx512, avx512: LOCKSTEP_ISA=avx512) against the llama.cpp built "
                         "for it (LLAMA_ISA); default native: the host's best, the native llama.cpp")
    ap.add_argument("--no-build", action="store_true", help="do not run bench/llamacpp/build.sh")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per engine run (default 300)")
    ap.add_argument("--nice", type=int, default=None, metavar="N",
                    help="run the engines at niceness N, each in its own session and autogroup (default: -20 "
                         "as root, else unchanged; see bench/README.md)")
    ap.add_argument("--docs", type=Path, metavar="MD",
                    help="also replace the generated section of this markdown file (between the "
                         "'<!-- make bench: begin -->' and '<!-- make bench: end -->' lines) with the summary")
    args = ap.parse_args()
    suites = [s.strip() for s in args.suites.split(",") if s.strip()]
    bad = [s for s in suites if s not in SUITES]
    if bad or not suites:
        ap.error(f"unknown suite(s) {', '.join(bad) or '(none given)'}; choose from {', '.join(SUITES)}")
    cfg = dict(QUICK if args.quick else FULL)
    for k in ("pairs", "reps"):
        v = getattr(args, k)
        if v is not None:
            if v < 1:
                ap.error(f"--{k} must be at least 1")
            cfg[k] = v
    if args.threads < 1:
        ap.error("--threads must be at least 1")
    isa_dir = "" if args.isa == "native" else f"/isa-{args.isa}"
    args.out = args.out or Path(str(ROOT / "build" / "bench" / "results-quick" if args.quick else ROOT / "bench" / "results")
                                + isa_dir)
    if args.llama_bin is None:
        args.llama_bin = (ROOT / "build" / f"llama.cpp-{args.isa}" / "build" / "bin" if args.isa in ("avx2", "avxvnni")
                          else vs.DEFAULT_LLAMA_BIN)
    if args.isa != "native":
        os.environ.pop("LOCKSTEP_ISA", None)
        os.environ.pop("LOCKSTEP_CPU_HIDE", None)
        os.environ.update(ISA_ENV[args.isa])
        if args.docs:
            ap.error("--docs takes the native run only (a forced-ISA run writes its own folder)")
    args.model = args.model.resolve()
    if not args.model.exists():
        sys.exit(f"suites: no model at {args.model} (run `make model`)")
    if not args.lockstep.exists():
        sys.exit(f"suites: no {args.lockstep} (run `make cli`)")
    if not args.bench_tool.exists():
        sys.exit(f"suites: no {args.bench_tool} (run `make bench-tools`)")
    if args.docs and not args.docs.exists():
        sys.exit(f"suites: --docs {args.docs} does not exist")
    if args.nice is None and os.geteuid() == 0:
        args.nice = -20
    vs.set_child_nice(args.nice)
    ensure_matplotlib()
    args.out.mkdir(parents=True, exist_ok=True)

    build_error = build_llamacpp(args.no_build, args.isa)
    peer = Peer(args.llama_bin.resolve(), build_error)
    missing = [m for m in (peer.missing(t) for t in ("llama-bench", "llama-batched-bench", "llama-lookup")) if m]
    if missing:
        print(banner(["PEER COMPARISON INCOMPLETE: llama.cpp is not (fully) built", *missing,
                      "the lockstep suites still run; every affected llama.cpp figure is a FAILED row",
                      "and this run exits with status 1"]), file=sys.stderr)

    # Snapshot the lockstep binary: others may rebuild build/lockstep during the run.
    snap = Path(tempfile.mkdtemp(prefix="lockstep-bench."))
    atexit.register(shutil.rmtree, snap, True)
    exe = snap / "lockstep"
    shutil.copy2(args.lockstep, exe)
    bexe = snap / "lockstep-bench"
    shutil.copy2(args.bench_tool, bexe)
    lsinfo = vs.lockstep_info(args.lockstep.resolve())
    meta = {
        "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "model": str(args.model.relative_to(ROOT)) if args.model.is_relative_to(ROOT) else str(args.model),
        "threads": args.threads, "settings_name": "quick (development)" if args.quick else "full",
        "settings": cfg, "machine": {**vs.machine_info(), "flags": cpu_flags()},
        "lockstep": lsinfo, "llama.cpp": vs.llama_info(peer.bindir),
        "engine_priority": vs.child_priority_desc(), "loadavg_before": os.getloadavg(),
    }
    c = Ctx(args, cfg, exe, bexe, peer)
    args.footer = (f"lockstep {lsinfo['commit']}, {meta['machine'].get('Model name', '?')}, {args.threads} threads, "
                   f"{meta['date_utc'][:16]}")
    log("warm-up (not recorded)")
    try:
        lsinfo["isa"] = c.ls.run(vs.STORY_PROMPT, 8, args.timeout)["isa"]
    except SystemExit as e:
        print(banner([f"FAILED: lockstep does not run: {why(e)}"]), file=sys.stderr)
        return 1
    lsinfo["isa_forced"] = args.isa
    if args.isa != "native" and lsinfo["isa"] != args.isa:
        print(banner([f"FAILED: --isa {args.isa} ({ISA_ENV[args.isa]}) but lockstep ran {lsinfo['isa']}",
                      "(this CPU lacks that level?)"]), file=sys.stderr)
        return 1
    if not peer.missing("llama-bench"):
        try:
            c.lb.run(0, 16, args.timeout)
        except SystemExit as e:
            peer.broken["llama-bench"] = f"llama-bench failed its warm-up run: {why(e)}"
            missing.append(peer.broken["llama-bench"])
            print(banner(["PEER COMPARISON INCOMPLETE", peer.broken["llama-bench"][:200],
                          "its figures will be FAILED rows; this run exits with status 1"]), file=sys.stderr)

    results, failed = {}, []
    for s in suites:
        log(f"=== suite {s}")
        t = time.time()
        try:
            r = RUNNERS[s](c)
        except SuiteError as e:
            failed.append(s)
            r = {"error": str(e), "md": f"**FAILED**: {e}", "headline": [], "peer": []}
            print(banner([f"SUITE {s} FAILED", str(e)[:300]]), file=sys.stderr)
        r["seconds"] = round(time.time() - t, 1)
        results[s] = r
        log(f"=== suite {s}: {r['seconds']:.0f} s")
        data = {"suite": s, **meta, "seconds": r["seconds"], **({"error": r["error"]} if "error" in r else {}),
                **r.get("data", {})}
        (args.out / f"{s}.json").write_text(json.dumps(data, indent=1) + "\n")
        r["cmd_md"] = commands_md(r.get("data", {}))
        md = [f"## {TITLES[s]}", "", *header(meta), f"- suite time: {r['seconds']:.0f} s; raw samples: `{s}.json`",
              "", r["md"], "", "Commands (as run, in the repository root; long prompts elided, in full in the JSON):",
              "", r["cmd_md"], ""]
        (args.out / f"{s}.md").write_text("\n".join(md))
    total = time.time() - T0
    peer_failed = any("FAILED" in str(row) for r in results.values() for row in r["peer"])

    summary = summary_md(meta, results, suites, total, missing, failed)
    (args.out / "summary.md").write_text(summary)
    log(f"wrote {args.out}/{{{','.join(suites)}}}.{{json,md,png}} and summary.md in {total:.0f} s")
    if args.docs and args.quick:
        log(f"--quick: {args.docs} is left as it is (only full runs go into the docs)")
    elif args.docs:
        update_docs(args.docs, summary, args.out)
    if failed or peer_failed or missing:
        print(banner([f"FAILED: {'suites ' + ', '.join(failed) if failed else ''}"
                      f"{'; ' if failed and (peer_failed or missing) else ''}"
                      f"{'llama.cpp figures (see the FAILED rows in summary.md)' if peer_failed or missing else ''}"]),
              file=sys.stderr)
        return 1
    return 0


def cpu_flags() -> list[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line.split(":", 1)[1].split()
    except OSError:
        pass
    return []


def summary_md(meta: dict, results: dict, suites: list[str], total: float, missing: list[str],
               failed: list[str]) -> str:
    L = ["# lockstep benchmarks (`make bench`)", ""]
    if missing or failed:
        L += ["> **FAILED**: " + "; ".join([*missing, *(f"suite {s} failed" for s in failed)]), ""]
    L += header(meta)
    times = ", ".join(f"{s} {results[s]['seconds']:.0f} s" for s in suites)
    L += [f"- total time: {total:.0f} s ({times})", ""]
    L += ["## Headline figures (lockstep)", "",
          md_table(["suite", "figure", "value"],
                   [[f"[{s}]({s}.md)", h[0], h[1]] for s in suites for h in results[s]["headline"]] +
                   [[f"[{s}]({s}.md)", "**FAILED**", results[s]["error"][:200]] for s in failed], right={2}), ""]
    rows = [[f"[{s}]({s}.md)", *row] for s in suites for row in results[s]["peer"]]
    if rows:
        L += ["## lockstep vs llama.cpp (interleaved pairs, medians)", "",
              md_table(["suite", *PEER_HEAD], rows, right={2, 3, 4}), ""]
    for s in suites:
        L += [f"## {TITLES[s]}", "", results[s]["md"], "", "<details><summary>commands</summary>", "",
              results[s]["cmd_md"], "", "</details>", ""]
    return "\n".join(L)


BEGIN, END = "<!-- make bench: begin -->", "<!-- make bench: end -->"


def update_docs(path: Path, summary: str, out: Path) -> None:
    text = path.read_text()
    if BEGIN not in text or END not in text:
        sys.exit(f"suites: {path} has no '{BEGIN}' ... '{END}' section to replace")
    rel = os.path.relpath(out, path.parent)
    body = re.sub(r"\]\((\w+)\.(md|png)\)", lambda m: f"]({rel}/{m.group(1)}.{m.group(2)})", summary)
    body = body.replace("# lockstep benchmarks (`make bench`)", "## Latest `make bench` results", 1)
    body = re.sub(r"^## ", "### ", body, flags=re.M).replace("### Latest", "## Latest", 1)
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    path.write_text(f"{head}{BEGIN}\n{body}\n{END}{tail}")
    log(f"updated {path}")


if __name__ == "__main__":
    sys.exit(main())
