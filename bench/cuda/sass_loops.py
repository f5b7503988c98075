#!/usr/bin/env python3
"""sass_loops.py - the hot loops of a cubin's kernels, counted from `cuobjdump -sass` text.

For each kernel (optionally only those whose mangled name contains --match), finds the
backward branches (loops), and prints the innermost loop holding the most tensor-core
instructions (IMMA/HMMA), or with --all every loop of at least --min instructions, with its
instruction mix.  For the exact GEMM (k_mma2) it also splits that loop into the copies
(up to the last LDGDEPBAR before the first IMMA), the compute (to the first branch after the
last IMMA) and the rest (the tree's push), and prints instructions per IMMA.  Static
counts: a branch's two sides both count (bench/cuda/sass.sh makes the input).
Usage: sass_loops.py FILE.sass [--match SUBSTR] [--all] [--min N]  (--match, --all, --min also via sass.sh)
"""
import argparse
import collections
import re


def kernels(text):
    for f in re.split(r"\n\s+Function : ", text)[1:]:
        name = f.split("\n", 1)[0].strip()
        ops = [(int(a, 16), b.strip()) for a, b in re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", f)]
        yield name, ops


def loops(ops):
    out = []
    for a, b in ops:
        m = re.search(r"BRA\s+0x([0-9a-f]+)", b)
        if m and int(m.group(1), 16) < a:
            lo = int(m.group(1), 16)
            out.append([x for x in ops if lo <= x[0] <= a])
    return out


def opcode(ins):
    return re.split(r"[ .]", re.sub(r"^@!?U?P\w+\s+", "", ins))[0]


def is_mma(ins):
    return "IMMA" in ins or "HMMA" in ins


def mix(body, n=12):
    c = collections.Counter(opcode(x[1]) for x in body)
    return ", ".join("%s %d" % kv for kv in c.most_common(n))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sass")
    ap.add_argument("--match", default="")
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--min", type=int, default=40)
    a = ap.parse_args()
    def mma(body):
        return sum(1 for x in body if is_mma(x[1]))

    for name, ops in kernels(open(a.sass).read()):
        if a.match not in name:
            continue
        print("%s: %d instructions, %d mma" % (name, len(ops), mma(ops)))
        ls = loops(ops)
        if a.all:
            for body in ls:
                if len(body) >= a.min:
                    print("  loop 0x%x-0x%x: %d instr: %s" % (body[0][0], body[-1][0], len(body), mix(body)))
            continue
        ls = [b for b in ls if mma(b)]
        if not ls:
            continue
        body = min(ls, key=lambda b: (-mma(b), len(b)))
        nm = mma(body)
        first = next(i for i, x in enumerate(body) if is_mma(x[1]))
        last = max(i for i, x in enumerate(body) if is_mma(x[1]))
        dep = [i for i, x in enumerate(body[:first]) if "LDGDEPBAR" in x[1]]
        c0 = dep[-1] + 1 if dep else 0
        c1 = next((i for i in range(last, len(body)) if re.search(r"@!?P\d BRA", body[i][1])), len(body))
        print("  main loop: %d instr, %d mma, %.1f per mma; copies %d, compute %d (%.1f per mma), rest %d"
              % (len(body), nm, len(body) / nm, c0, c1 - c0, (c1 - c0) / nm, len(body) - c1))
        print("  mix: %s" % mix(body))


if __name__ == "__main__":
    main()
