"""What the compiler made of the AVX2 panel kernels: their accumulators stay in registers.

GCC's reassociation once turned each unit's chain of s16 adds into one tree over all its
vpmaddubsw products, which kept every product live: the Q4_K panel function stored 122 ymm
registers to the stack, Q8_0's 320, and the AVX2 Q4_K tile ran at 1.34x the time.  The
kernels keep each chain a chain (LS_Y_KEEP in src/kernels/cpu/matmul_avx2.c); the bits are
the same either way (test_kernels), so only the generated code shows the difference.  This
counts the ymm stores to the stack in each panel function of the build's object file.

Needs objdump (binutils, which the C compiler brings); without it the test is skipped and
says so.  The limits are the measured counts with room (GCC 12, -O2: 3-9 per function, 94
for Q8_0, whose 16 accumulators of a 4-row tile cannot all fit in 16 registers).
"""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("LOCKSTEP_BUILD", "build"))
OBJ = (BUILD if BUILD.is_absolute() else ROOT / BUILD) / "obj" / "src" / "kernels" / "cpu" / "matmul_avx2.o"

LIMITS = {"q4_0": 24, "q4_1": 24, "q4_k": 24, "q5_0": 24, "q5_1": 24, "q5_k": 24, "q6_k": 24, "q8_0": 160}
SPILL = re.compile(r"\bvmovdq[au]\s+%ymm\d+,(-?0x[0-9a-f]+)?\(%rsp\)")


def functions(text: str) -> dict:
    out, name = {}, None
    for line in text.splitlines():
        m = re.match(r"^[0-9a-f]+ <(\w+)>:$", line)
        if m:
            name = m.group(1)
            out[name] = []
        elif name and line.strip():
            out[name].append(line)
    return out


@pytest.fixture(scope="module")
def disasm() -> dict:
    objdump = shutil.which("objdump")
    if not objdump:
        pytest.skip("objdump not found: the AVX2 panel kernels' register use is NOT CHECKED")
    if not OBJ.exists():
        pytest.skip(f"{OBJ} not found (build with make first): NOT CHECKED")
    p = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(OBJ)], capture_output=True, text=True, check=True)
    return functions(p.stdout)


@pytest.mark.parametrize("t", sorted(LIMITS))
def test_panel_accumulators_stay_in_registers(disasm, t):
    name = f"ls_yp_mm_{t}"
    assert name in disasm, f"{name} not in {OBJ}: the panel kernels were renamed; update this test"
    body = disasm[name]
    assert sum("vpmaddubsw" in ln for ln in body) > 0, f"{name} has no vpmaddubsw: not the AVX2 panel kernel"
    spills = sum(bool(SPILL.search(ln)) for ln in body)
    assert spills <= LIMITS[t], (f"{name} stores {spills} ymm registers to the stack (limit {LIMITS[t]}): "
                                 "the accumulator chains were reassociated into trees (LS_Y_KEEP)")
