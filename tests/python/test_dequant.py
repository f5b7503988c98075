"""ls_dequant_row against the gguf package's dequantizer (gguf.quants.dequantize).

Both follow ggml's dequantize_row_* float operation order (the package computes the same
float32 products and sums in the same order), so the result must be bit-identical: every
element, NaN bits included; no ulp is tolerated (a reordered product, or an fma where
ggml rounds twice, is a 1-ulp difference and a failure here).  The number of elements
that differ, and their largest ulp distance, are reported per type (terminal summary,
record_property, and the assertion message).
"""
import ctypes

import numpy as np
import pytest

import gguf
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES

DEQUANT_TYPES = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0,
                 T.Q4_K, T.Q5_K, T.Q6_K, T.MXFP4]

# byte offsets of the fp16 scale fields inside one block
F16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}
N_BLOCKS = 4096        # per quantized type
N_PLAIN = 4096 * 32    # elements per plain type (F32, F16, BF16)


class TypeInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("block_elems", ctypes.c_uint32),
                ("block_bytes", ctypes.c_uint32), ("can_dequant", ctypes.c_bool)]


@pytest.fixture(scope="module")
def ls(lib):
    lib.ls_dequant_row.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    lib.ls_dequant_row.restype = None
    lib.ls_type_get.argtypes = [ctypes.c_uint32]
    lib.ls_type_get.restype = ctypes.POINTER(TypeInfo)
    return lib


def ours(ls, qtype: int, raw: np.ndarray, n: int, misalign: int = 0) -> np.ndarray:
    """Dequantize n elements from raw (bytes); misalign > 0 places src at an odd address."""
    raw = np.ascontiguousarray(raw).view(np.uint8).reshape(-1)
    if misalign:
        buf = np.empty(raw.size + misalign, dtype=np.uint8)
        buf[misalign:] = raw
        src = buf.ctypes.data + misalign
    else:
        buf = raw
        src = raw.ctypes.data
    out = np.empty(n, dtype=np.float32)
    ls.ls_dequant_row(int(qtype), src, out.ctypes.data, n)
    return out


def compare(a: np.ndarray, b: np.ndarray):
    """(not bit-identical count, max ulp distance, count beyond 1 ulp or NaN mismatch);
    the tests require the first to be 0, the others say how far off a failure is."""
    a = a.reshape(-1)
    b = b.reshape(-1)
    assert a.dtype == np.float32 and b.dtype == np.float32 and a.size == b.size
    ai = a.view(np.int32)
    bi = b.view(np.int32)
    diff = ai != bi
    n_diff = int(np.count_nonzero(diff))
    if n_diff == 0:
        return 0, 0, 0
    ai = ai[diff].astype(np.int64)
    bi = bi[diff].astype(np.int64)
    # map float bits to a monotone integer line (+0 and -0 both map to 0)
    oa = np.where(ai < 0, -(ai & 0x7FFFFFFF), ai)
    ob = np.where(bi < 0, -(bi & 0x7FFFFFFF), bi)
    ulp = np.abs(oa - ob)
    nan_a = np.isnan(a[diff])
    nan_b = np.isnan(b[diff])
    bad = (ulp > 1) | nan_a | nan_b   # differing NaN bits count as bad too
    return n_diff, int(ulp[~(nan_a | nan_b)].max(initial=0)), int(np.count_nonzero(bad))


def random_f16(rng, n: int) -> np.ndarray:
    """Finite fp16 bit patterns: half of moderate magnitude (2^-14 .. 2^4, either sign),
    half arbitrary finite halves (subnormals, zeros and up to 65504 included)."""
    mag = np.exp2(rng.uniform(-14.0, 4.0, n)) * rng.choice([-1.0, 1.0], n)
    moderate = mag.astype(np.float16).view(np.uint16)
    arbitrary = rng.integers(0, 1 << 16, n, dtype=np.uint16)
    arbitrary = np.where((arbitrary & 0x7C00) == 0x7C00, arbitrary & 0xFBFF, arbitrary).astype(np.uint16)
    return np.where(rng.random(n) < 0.5, moderate, arbitrary).astype(np.uint16)


def random_blocks(qtype, rng) -> tuple[np.ndarray, int]:
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
    if block_elems == 1:
        n = N_PLAIN
        return rng.integers(0, 256, n * block_bytes, dtype=np.uint8), n
    blocks = rng.integers(0, 256, (N_BLOCKS, block_bytes), dtype=np.uint8)
    for off in F16_FIELDS.get(qtype, []):
        blocks[:, off:off + 2] = random_f16(rng, N_BLOCKS).view(np.uint8).reshape(N_BLOCKS, 2)
    if qtype == T.MXFP4:
        # E8M0 exponent: mostly near 1.0, some tiny (0, 1: the subnormal path), never
        # so large that 12 * 2^(e-128) overflows
        e = rng.integers(127 - 24, 127 + 24, N_BLOCKS)
        e[::64] = rng.integers(0, 200, e[::64].size)
        e[0], e[1], e[2] = 0, 1, 2
        blocks[:, 0] = e.astype(np.uint8)
    return blocks.reshape(-1), N_BLOCKS * block_elems


def test_type_table_matches_gguf(ls):
    known = {int(t) for t in GGML_QUANT_SIZES}
    for tid in range(0, 64):
        info = ls.ls_type_get(tid)
        if tid in known and tid < 40:
            t = T(tid)
            assert info, f"type {t.name} ({tid}) missing"
            assert info.contents.name.decode() == t.name
            assert (info.contents.block_elems, info.contents.block_bytes) == GGML_QUANT_SIZES[t], t.name
            assert info.contents.can_dequant == (t in DEQUANT_TYPES), t.name
        else:
            assert not info, f"id {tid} should be unknown"


@pytest.mark.parametrize("qtype", DEQUANT_TYPES, ids=lambda t: t.name)
def test_random_blocks(ls, qtype, record_property, report):
    rng = np.random.default_rng(0x5EED + int(qtype))
    raw, n = random_blocks(qtype, rng)
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
    row_bytes = block_bytes * (32 if block_elems == 1 else 1)
    ref = gguf.quants.dequantize(raw.reshape(-1, row_bytes), qtype).astype(np.float32, copy=False).reshape(-1)
    got = ours(ls, qtype, raw, n)
    n_diff, max_ulp, n_bad = compare(got, ref)
    record_property("non_bit_identical", n_diff)
    line = f"{qtype.name}: {n_diff} of {n} elements not bit-identical (max {max_ulp} ulp)"
    print(line)
    report(line)
    assert n_diff == 0, f"{line}; {n_bad} beyond 1 ulp or NaN mismatch"
    # any alignment of src gives the same bits
    got_odd = ours(ls, qtype, raw, n, misalign=1)
    assert np.array_equal(got.view(np.uint32), got_odd.view(np.uint32)), f"{qtype.name}: misaligned src differs"


def test_model_tensors(ls, model_path, record_property, report):
    reader = gguf.GGUFReader(str(model_path))
    stats: dict[str, list[int]] = {}   # type -> [tensors, elements, non-identical, beyond 1 ulp, max ulp]
    worst = []
    for t in reader.tensors:
        qtype = T(t.tensor_type)
        n = int(t.n_elements)
        raw = np.ascontiguousarray(t.data).view(np.uint8).reshape(-1)
        assert raw.size * GGML_QUANT_SIZES[qtype][0] == n * GGML_QUANT_SIZES[qtype][1], t.name
        ref = gguf.quants.dequantize(t.data, qtype).astype(np.float32, copy=False).reshape(-1)
        got = ours(ls, qtype, raw, n)
        n_diff, max_ulp, n_bad = compare(got, ref)
        s = stats.setdefault(qtype.name, [0, 0, 0, 0, 0])
        s[0] += 1
        s[1] += n
        s[2] += n_diff
        s[3] += n_bad
        s[4] = max(s[4], max_ulp)
        if n_diff:
            worst.append(f"{t.name} ({qtype.name}): {n_diff} elements not bit-identical, {n_bad} beyond 1 ulp")
    summary = "; ".join(f"{k}: {v[2]} of {v[1]} elements in {v[0]} tensors not bit-identical (max {v[4]} ulp)"
                        for k, v in sorted(stats.items()))
    print(summary)
    report(summary)
    for k, v in stats.items():
        record_property(f"non_bit_identical_{k}", v[2])
    assert sum(v[0] for v in stats.values()) == len(reader.tensors)
    assert not worst, summary + "\n" + "\n".join(worst[:20])
