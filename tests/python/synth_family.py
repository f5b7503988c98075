"""Synthetic GGUF files of each model family: random weights in each family's real
block structure, scaled down to a few MB, written by the project's own GGUF writer
(src/gguf/gguf_write.c, called through liblockstep_test.so).  Weights are quantized
by the `gguf` package (Q8_0, Q5_0, Q4_0, F16, F32: the types real files of these
families hold, K-quants excepted, which the real Gemma file covers).  The vocabulary
is a small SentencePiece one (tokenizer.ggml.model = llama): <unk>, <s>, </s>, the
256 byte tokens and a few pieces; the tests feed token ids directly."""
import ctypes as C
import os
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

# name -> (general.architecture, hyperparameters, features)
FAMILIES = {
    # Llama 3.x: rope_freqs.weight (llama3 RoPE scaling), base 500000, GQA, untied head
    "llama3": dict(arch="llama", E=128, H=4, Hkv=2, D=32, F=256, L=2, base=500000.0, rope_freqs=True),
    # Llama 2 / Mistral: SentencePiece vocabulary, architecture "mistral" (mapped onto llama)
    "mistral": dict(arch="mistral", E=128, H=4, Hkv=2, D=32, F=256, L=2, base=10000.0),
    # Qwen 2.5: q/k/v biases, NeoX RoPE, tied head
    "qwen2": dict(arch="qwen2", E=128, H=4, Hkv=2, D=32, F=256, L=2, base=1000000.0, bias=True, tied=True,
                  template="qwen2.5.jinja"),
    # Qwen 2.5 with YaRN RoPE scaling (factor 4 over 256 original positions, attn_factor 0.9), as the
    # Qwen 2.5 long-context files ask for it
    "qwen2_yarn": dict(arch="qwen2", E=128, H=4, Hkv=2, D=32, F=256, L=2, base=1000000.0, bias=True, tied=True,
                       yarn=dict(factor=4.0, orig=256, attn_factor=0.9)),
    # Qwen 3: q/k RMSNorm, head_dim (key_length) 64 != n_embd / n_head
    "qwen3": dict(arch="qwen3", E=128, H=4, Hkv=2, D=64, F=256, L=2, base=1000000.0, qk_norm=True, key_length=True,
                  template="qwen3.jinja"),
    # Gemma 3: head_dim 256, GeGLU, post-norms, q/k norms, scaled embedding, 5 local : 1 global layers;
    # a sliding window of 11 positions (Gemma 3 270M: 512), shorter than the tests' prompts (the probe's
    # are 17..24 tokens) and not a multiple of the KV block, so windows start anywhere in a block
    "gemma3": dict(arch="gemma3", E=128, H=2, Hkv=1, D=256, F=512, L=6, base=1000000.0, qk_norm=True, post=True,
                   tied=True, key_length=True, swa=11, template="gemma3.jinja"),
}
T_F32, T_F16, T_Q4_0, T_Q5_0, T_Q8_0 = 0, 1, 2, 6, 8
V_U32, V_I32, V_F32, V_STR = 4, 5, 6, 8


def _lib():
    L = C.CDLL(str(ROOT / os.environ.get("LOCKSTEP_BUILD", "build") / "liblockstep_test.so"))
    L.gguf_writer_create.restype = C.c_void_p
    for n in ("add_u32", "add_f32", "add_str", "add_arr", "add_arr_str", "add_tensor", "write_file", "free"):
        getattr(L, "gguf_writer_" + n).argtypes = None
    return L


# Words of the prompts the C engine test tokenizes (its prompts must fit its buffers).
WORDS = ("a about across advance also and answers are assistant based became begins books briefly brown by century "
         "changed cheaper colours combined commas context copies could count daily decades emerged europe explain "
         "fifteenth followed fox from gutenberg haiku helped helpful history identical in ink inventions is it "
         "johannes life list literacy mattered metal most movable name of oil one pamphlets plus precisely press "
         "printing quick reformers rose say scholars science screw sentences separated share spellings spread "
         "standard system that the then think this three to two user what when which who why within wooden write "
         "you").split()


def _vocab():
    """<unk>, <s>, </s>, the ChatML markers as control tokens, the 256 byte tokens, then
    pieces: single letters, letter pairs and WORDS, each with and without the space mark."""
    ctl = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    toks = ctl + [f"<0x{i:02X}>" for i in range(256)] + ["\u2581"]
    letters = "abcdefghijklmnopqrstuvwxyz"
    pieces = list(letters) + [a + b for a in letters for b in letters]
    pieces += [w for w in WORDS if w not in pieces] + [w.capitalize() for w in WORDS]
    for p in pieces:
        toks += ["\u2581" + p, p]
    n_fixed = len(ctl) + 256
    types = [2, 3, 3, 3, 3] + [6] * 256 + [1] * (len(toks) - n_fixed)
    scores = [0.0] * n_fixed + [float(len(t)) for t in toks[n_fixed:]]  # longer pieces preferred
    return toks, types, scores


def _quant(w, t):
    import gguf

    if t == T_F32:
        return w.astype(np.float32)
    if t == T_F16:
        return w.astype(np.float16)
    return gguf.quants.quantize(w.astype(np.float32), gguf.GGMLQuantizationType(t))


def write(path, family, seed=0, arch=None, drop=(), extra=None):
    """Writes the family's synthetic file to path (returns path).  arch overrides
    general.architecture; tensors whose name ends with one of `drop` are left out
    (for the refusal tests); extra: more {arch}.KEY metadata, str or float values."""
    c = dict(FAMILIES[family])
    if arch:
        c["arch"] = arch
    rng = np.random.default_rng(seed)
    L = _lib()
    w = C.c_void_p(L.gguf_writer_create())
    a = c["arch"].encode()
    key = lambda s: (a.decode() + "." + s).encode()
    L.gguf_writer_add_str(w, b"general.architecture", a)
    L.gguf_writer_add_str(w, b"general.name", f"synthetic {family}".encode())
    E, H, Hkv, D, F, NL = c["E"], c["H"], c["Hkv"], c["D"], c["F"], c["L"]
    for k, v in (("context_length", 1024), ("embedding_length", E), ("block_count", NL), ("feed_forward_length", F),
                 ("attention.head_count", H), ("attention.head_count_kv", Hkv)):
        L.gguf_writer_add_u32(w, key(k), C.c_uint32(v))
    if c.get("key_length"):
        L.gguf_writer_add_u32(w, key("attention.key_length"), C.c_uint32(D))
        L.gguf_writer_add_u32(w, key("attention.value_length"), C.c_uint32(D))
    if c.get("swa"):
        L.gguf_writer_add_u32(w, key("attention.sliding_window"), C.c_uint32(c["swa"]))
    L.gguf_writer_add_f32(w, key("attention.layer_norm_rms_epsilon"), C.c_float(1e-6))
    L.gguf_writer_add_f32(w, key("rope.freq_base"), C.c_float(c["base"]))
    if c.get("yarn"):
        y = c["yarn"]
        L.gguf_writer_add_str(w, key("rope.scaling.type"), b"yarn")
        L.gguf_writer_add_f32(w, key("rope.scaling.factor"), C.c_float(y["factor"]))
        L.gguf_writer_add_u32(w, key("rope.scaling.original_context_length"), C.c_uint32(y["orig"]))
        L.gguf_writer_add_f32(w, key("rope.scaling.attn_factor"), C.c_float(y["attn_factor"]))
    for k, v in (extra or {}).items():
        if isinstance(v, str):
            L.gguf_writer_add_str(w, key(k), v.encode())
        else:
            L.gguf_writer_add_f32(w, key(k), C.c_float(v))
    if c.get("template"):  # the family's published chat template (tests/python/data)
        L.gguf_writer_add_str(w, b"tokenizer.chat_template", (Path(__file__).parent / "data" / c["template"]).read_bytes())
    toks, types, scores = _vocab()
    L.gguf_writer_add_str(w, b"tokenizer.ggml.model", b"llama")
    arr = (C.c_char_p * len(toks))(*[t.encode() for t in toks])
    L.gguf_writer_add_arr_str(w, b"tokenizer.ggml.tokens", arr, C.c_uint64(len(toks)))
    sc = np.array(scores, np.float32)
    L.gguf_writer_add_arr(w, b"tokenizer.ggml.scores", V_F32, sc.ctypes.data_as(C.c_void_p), C.c_uint64(len(toks)))
    ty = np.array(types, np.int32)
    L.gguf_writer_add_arr(w, b"tokenizer.ggml.token_type", V_I32, ty.ctypes.data_as(C.c_void_p), C.c_uint64(len(toks)))
    for k, v in (("bos_token_id", 1), ("eos_token_id", 2), ("unknown_token_id", 0)):
        L.gguf_writer_add_u32(w, f"tokenizer.ggml.{k}".encode(), C.c_uint32(v))
    keep = []

    def tensor(name, arr, t):
        if name.endswith(tuple(drop)):
            return
        q = np.ascontiguousarray(_quant(arr, t))
        keep.append(q)
        shape = arr.shape[::-1]  # ggml: ne0 innermost
        ne = (C.c_uint64 * len(shape))(*shape)
        L.gguf_writer_add_tensor(w, name.encode(), t, len(shape), ne, q.ctypes.data_as(C.c_void_p), C.c_uint64(q.nbytes))

    nv = len(toks)
    mat = lambda n, k: rng.standard_normal((n, k)) / np.sqrt(k)
    norm = lambda n: 1.0 + 0.1 * rng.standard_normal(n)
    tensor("token_embd.weight", rng.standard_normal((nv, E)) * (0.1 if c.get("post") else 1.0), T_Q8_0)
    tensor("output_norm.weight", norm(E), T_F32)
    if not c.get("tied"):
        tensor("output.weight", mat(nv, E), T_F16)
    if c.get("rope_freqs"):
        tensor("rope_freqs.weight", np.linspace(1.0, 8.0, D // 2), T_F32)
    for l in range(NL):
        p = f"blk.{l}."
        tensor(p + "attn_norm.weight", norm(E), T_F32)
        tensor(p + "attn_q.weight", mat(H * D, E), T_Q8_0)
        tensor(p + "attn_k.weight", mat(Hkv * D, E), T_Q8_0)
        tensor(p + "attn_v.weight", mat(Hkv * D, E), T_Q5_0)
        if c.get("bias"):
            for n, d in (("q", H * D), ("k", Hkv * D), ("v", Hkv * D)):
                tensor(p + f"attn_{n}.bias", 0.5 * rng.standard_normal(d), T_F32)
        if c.get("qk_norm"):
            tensor(p + "attn_q_norm.weight", norm(D), T_F32)
            tensor(p + "attn_k_norm.weight", norm(D), T_F32)
        tensor(p + "attn_output.weight", mat(E, H * D), T_F16)
        if c.get("post"):
            tensor(p + "post_attention_norm.weight", norm(E), T_F32)
            tensor(p + "post_ffw_norm.weight", norm(E), T_F32)
        tensor(p + "ffn_norm.weight", norm(E), T_F32)
        tensor(p + "ffn_gate.weight", mat(F, E), T_Q5_0)
        tensor(p + "ffn_up.weight", mat(F, E), T_Q8_0)
        tensor(p + "ffn_down.weight", mat(E, F), T_Q4_0)

    class Err(C.Structure):
        _fields_ = [("code", C.c_int), ("offset", C.c_uint64), ("msg", C.c_char * 512)]

    err = Err()
    rc = L.gguf_writer_write_file(w, str(path).encode(), C.byref(err))
    L.gguf_writer_free(w)
    if rc:
        raise RuntimeError(f"gguf writer: {err.msg.decode()}")
    return path


if __name__ == "__main__":
    import sys

    out = Path(sys.argv[1] if len(sys.argv) > 1 else "build/synth")
    out.mkdir(parents=True, exist_ok=True)
    for fam in FAMILIES:
        print(write(out / f"{fam}.gguf", fam))
