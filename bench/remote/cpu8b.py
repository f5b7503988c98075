#!/usr/bin/env python3
"""Helpers of the `8b` step of bench/remote/cpu_side_by_side.sh (issue 31 item 5).

  cpu8b.py load --file F --lockstep EXE --llama-completion EXE --cores C -t T --reps R --raw DIR --json-out J
      Load cost: the wall time of a one-token run and the process's peak RSS.
        lockstep:  lockstep run -m F -p Hello -n 1 --no-probe -t T
        llama.cpp: llama-completion -m F -p Hello -n 1 -t T -c 4096 --no-warmup -no-cnv
                   (-c 4096 is lockstep's default context, min(trained, 4096); --no-warmup
                   leaves out llama.cpp's extra empty decode, which only lowers its time)
      Both under `taskset -c C`, interleaved (lockstep, llama.cpp) R times, after a
      `cat F > /dev/null`, so the page cache is warm.  Wall time: from the spawn to the
      exit (load + prefill of the prompt + one token = time to the first token and exit).
      Peak RSS: ru_maxrss of that one child (os.wait4), also as a multiple of F's size.
      Each engine's own report (lockstep's prefill ms, llama.cpp's load time) is kept.

  cpu8b.py summary --raw DIR --out MD
      The markdown summary of what the step left in DIR (vs_llamacpp JSON files named
      <tag>_<isa>.json, load-cost JSON files load_<tag>.json, synth_<tag>.txt).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path


def run_one(argv: list[str], out: Path, err: Path, timeout: float) -> dict:
    t0 = time.monotonic()
    with open(out, "wb") as fo, open(err, "wb") as fe:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fo, stderr=fe)
        deadline = t0 + timeout
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid == p.pid:
                break
            if time.monotonic() > deadline:
                p.kill()
                pid, status, ru = os.wait4(p.pid, 0)
                break
            time.sleep(0.005)
    wall = time.monotonic() - t0
    # (os.waitstatus_to_exitcode is Python 3.9+)
    p.returncode = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)  # no second wait
    return {"wall_s": round(wall, 3), "rc": p.returncode, "peak_rss_kib": ru.ru_maxrss,
            "user_s": round(ru.ru_utime, 3), "sys_s": round(ru.ru_stime, 3),
            "minor_faults": ru.ru_minflt, "major_faults": ru.ru_majflt}


def parse_lockstep(err: str) -> dict:
    m = re.search(r"prefill ([\d.]+) ms", err)
    return {"prefill_ms": float(m.group(1))} if m else {}


def parse_llama(err: str) -> dict:
    d = {}
    for key, pat in (("load_ms", r"load time =\s*([\d.]+) ms"), ("prompt_eval_ms", r"prompt eval time =\s*([\d.]+) ms"),
                     ("total_ms", r"total time =\s*([\d.]+) ms")):
        m = re.search(pat, err)
        if m:
            d[key] = float(m.group(1))
    return d


def cmd_load(a) -> int:
    f = Path(a.file).resolve()
    size = f.stat().st_size
    raw = Path(a.raw)
    raw.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(f, "rb") as fh:  # cat F > /dev/null: the page cache is warm for both engines
        while fh.read(1 << 24):
            pass
    cat_s = time.monotonic() - t0
    ts = ["taskset", "-c", a.cores]
    cmds = {
        "lockstep": [a.lockstep, "run", "-m", str(f), "-p", "Hello", "-n", "1", "--no-probe", "-t", str(a.threads)],
        "llama.cpp": [a.llama_completion, "-m", str(f), "-p", "Hello", "-n", "1", "-t", str(a.threads),
                      "-c", "4096", "--no-warmup", "-no-cnv"],
    }
    runs = {k: [] for k in cmds}
    for i in range(a.reps):
        for eng, argv in cmds.items():
            stem = raw / f"{a.tag}_load_{'ls' if eng == 'lockstep' else 'llama'}.{i + 1}"
            r = run_one(ts + argv, stem.with_suffix(stem.suffix + ".out"), stem.with_suffix(stem.suffix + ".err"),
                        a.timeout)
            err = stem.with_suffix(stem.suffix + ".err").read_text(errors="replace")
            r.update(parse_lockstep(err) if eng == "lockstep" else parse_llama(err))
            r["peak_rss_mib"] = round(r["peak_rss_kib"] / 1024, 1)
            r["peak_rss_over_file"] = round(r["peak_rss_kib"] * 1024 / size, 3)
            runs[eng].append(r)
            print(f"load {a.tag} {eng:9s} run {i + 1}: {r['wall_s']:.2f} s, peak RSS {r['peak_rss_mib']:.0f} MiB "
                  f"({r['peak_rss_over_file']:.2f}x file), rc {r['rc']}", flush=True)
    res = {"file": str(f), "file_bytes": size, "cat_s": round(cat_s, 2), "cores": a.cores, "threads": a.threads,
           "commands": {k: " ".join(ts + v) for k, v in cmds.items()}, "runs": runs}
    Path(a.json_out).write_text(json.dumps(res, indent=2) + "\n")
    return 0 if all(r["rc"] == 0 for v in runs.values() for r in v) else 1


def fmt(x, spec=".2f"):
    return "—" if x is None else format(x, spec)


def cmd_summary(a) -> int:
    raw = Path(a.raw)
    L = ["# lockstep vs llama.cpp at Llama-3-8B shapes (issue 31 item 5)", ""]
    meta = raw / "meta.txt"
    if meta.exists():
        L += ["```", meta.read_text().rstrip(), "```", ""]
    shape8 = not meta.exists() or "shape 8b" in meta.read_text()
    L += [("Synthetic files of bench/synth_gguf.c: Llama-3-8B's layer shapes (4096 embd, 32 layers, 32 heads, "
          "8 KV heads, 14336 FFN) with random weights and SmolLM2's vocabulary (49152 tokens, not Llama-3's "
          "128256: the embedding and output matrices are smaller than a real Llama-3-8B's)." if shape8 else
           "NOT the 8B shape (see `shape` above): a test of the flow, not the 8B figures."), ""]
    L += ["## Speed (vs_llamacpp.py, interleaved pairs, medians tok/s)", "",
          "| file | lockstep ISA / llama.cpp build | figure | lockstep | llama.cpp | lockstep / llama.cpp | pairs |",
          "| --- | --- | --- | ---: | ---: | ---: | ---: |"]
    notes = []
    for j in sorted(raw.glob("*_avx*.json")):
        tag, _, isa = j.stem.rpartition("_")
        try:
            r = json.loads(j.read_text())
        except (OSError, json.JSONDecodeError) as e:
            notes.append(f"- {j.name}: unreadable ({e})")
            continue
        lc = r.get("llama.cpp", {})
        build = lc.get("sdist", "?").split("isa ")[-1] if "sdist" in lc else "?"
        for t, s in r["summary"].items():
            L.append(f"| {tag} | lockstep {r['lockstep'].get('isa', '?')} / llama.cpp {build} | {t} | "
                     f"{fmt(s['lockstep_median_tok_s'])} | {fmt(s['llamacpp_median_tok_s'])} | "
                     f"{fmt(s['ratio_lockstep_over_llamacpp'], '.3f')} | {r['pairs']} |")
    joint = [j.stem for j in raw.glob("*_avx*.json") if json.loads(j.read_text()).get("joint")]
    L += ["", "tgN: lockstep's forward-pass rate (n_gen-1)/decode_ms vs llama-bench's avg_ts; ppN: prompt tokens / "
          "prefill time vs llama-bench's avg_ts (llama-bench also runs an unrecorded warm-up of each test)."]
    if joint:
        L.append("Joint runs (" + ", ".join(sorted(joint)) + "): both figures of an engine came from one process "
                 "(lockstep decodes right after the ppN prompt; llama-bench runs its tg test from an empty context).")
    for log in sorted(raw.glob("*_avx*.log")):
        if not (raw / (log.stem + ".json")).exists():
            tail = log.read_text(errors="replace").strip().splitlines()[-3:]
            notes.append(f"- {log.stem}: NO RESULT; log tail: `{' / '.join(tail)}`")
    L.append("")
    L += ["## Load cost (one-token run, page cache warm; wall = spawn to exit)", "",
          "lockstep at its default ISA; llama.cpp is llama-completion of the native build. Peak RSS is the "
          "process's ru_maxrss: it counts the file pages a process maps and touches (llama.cpp maps the file; "
          "such pages are the page cache's, shared) as well as its private memory.", "",
          "| file | engine | run | wall s | peak RSS MiB | RSS / file size | engine's own figure | rc |",
          "| --- | --- | ---: | ---: | ---: | ---: | --- | ---: |"]
    for j in sorted(raw.glob("load_*.json")):
        r = json.loads(j.read_text())
        tag = j.stem[len("load_"):]
        for eng, runs in r["runs"].items():
            for i, x in enumerate(runs):
                own = (f"prefill {x['prefill_ms']:.0f} ms" if "prefill_ms" in x else
                       f"load {x['load_ms']:.0f} ms" if "load_ms" in x else "—")
                L.append(f"| {tag} ({r['file_bytes'] / 2**30:.2f} GiB) | {eng} | {i + 1} | {x['wall_s']:.2f} | "
                         f"{x['peak_rss_mib']:.0f} | {x['peak_rss_over_file']:.2f}x | {own} | {x['rc']} |")
        L.append("")
        for eng, c in r["commands"].items():
            L.append(f"- {tag} {eng}: `{c}`")
        L.append("")
    synth = sorted(raw.glob("synth_*.txt"))
    if synth:
        L += ["## Synthetic files", ""]
        for s in synth:
            L.append(f"- {s.stem[len('synth_'):]}: {s.read_text().strip()}")
        L.append("")
    if notes:
        L += ["## Problems", ""] + notes + [""]
    skipped = raw / "skipped.txt"
    if skipped.exists():
        L += ["## Skipped (time budget)", "", skipped.read_text().rstrip(), ""]
    Path(a.out).write_text("\n".join(L) + "\n")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("load")
    p.add_argument("--file", required=True)
    p.add_argument("--tag", required=True)
    p.add_argument("--lockstep", required=True)
    p.add_argument("--llama-completion", required=True)
    p.add_argument("--cores", default="0,1")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--raw", required=True)
    p.add_argument("--json-out", required=True)
    s = sub.add_parser("summary")
    s.add_argument("--raw", required=True)
    s.add_argument("--out", required=True)
    a = ap.parse_args()
    return cmd_load(a) if a.cmd == "load" else cmd_summary(a)


if __name__ == "__main__":
    sys.exit(main())
