#!/usr/bin/python3
"""fit_mtp.py - fits a multi-token-prediction (MTP) module to a GGUF model by
self-distillation, and writes it as a small GGUF file that `lockstep run/serve --spec mtp
--draft-model FILE` loads (docs/mtp.md).

  1. data: `lockstep mtp-data` lets the model answer varied prompts itself (seeded,
     temperature 0.8) and keeps every position's last hidden state h_i (before the final
     norm) beside the tokens;
  2. the module, DeepSeek-V3's form as lockstep's MTP forward computes it
     (src/backend/cpu/forward.c):
         x_i = eh_proj [enorm(embed(t_{i+1})) ; hnorm(h_i)]        (2d -> d)
         x_i = one decoder block of the model's own family (RoPE at position i,
               causal attention over the module's own rows 0..i)
         p_i = softmax(head(shared_head_norm(x_i)))               predicts t_{i+2}
     with the model's embedding, final norm and head shared and frozen; the block starts
     from the model's last block, eh_proj from [I/2 I/2];
  3. the loss: KL(target || module), the target's distribution for the token after next
     being head(final_norm(h_{i+1})), computed from the stored hidden states;
  4. the output: blk.{n_layer}.nextn.* and the block's tensors (llama.cpp's names), the
     matrices in Q8_0 (or F16), naming the model's sha256 (lockstep.mtp.target_sha256).

Runs on PyTorch (Debian's python3-torch, CPU) under /usr/bin/python3.  Families: llama
(and mistral) and gemma3; others are refused.  gemma3's block as lockstep computes it: the
embedding times sqrt(n_embd), RMSNorms that multiply by the stored weight (the GGUF file
holds Gemma's 1 + w), per-head q/k RMSNorm before RoPE, NeoX RoPE, post-attention and
post-FFN RMSNorms on each branch's output, GeGLU with tanh GELU, attention scale
1/sqrt(head_dim), and for the module's block (index n_layer) the global layers' settings:
the file's RoPE base (not the local layers' 10000) and no sliding window; the head is the
tied embedding.  The head's 262,144-token vocabulary makes the loss the costly part: it
runs in chunks of rows (--loss-rows), the target's distribution recomputed from the stored
hidden states each time.
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
DEV = torch.device("cpu")  # --device: where the module trains
ROOT = os.path.dirname(HERE)

# ---- GGUF writing (the format: docs/gguf.md; version 3, little-endian) ------------------
GGUF_U32, GGUF_I32, GGUF_F32, GGUF_STR, GGUF_ARR, GGUF_U64 = 4, 5, 6, 8, 9, 10
HEAD_VOCAB_KEY = "lockstep.mtp.head_vocab"
T_F32, T_F16, T_Q8_0 = 0, 1, 8
ALIGN = 32


def _gstr(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def q8_0_bytes(w):
    """Q8_0 blocks of 32 along each row: an f16 scale d = amax/127 and 32 int8 q = round(x/d)."""
    w = np.ascontiguousarray(w, dtype=np.float32)
    assert w.shape[-1] % 32 == 0
    b = w.reshape(-1, 32)
    amax = np.abs(b).max(axis=1)
    d = (amax / 127.0).astype(np.float32)
    d16 = d.astype(np.float16)
    inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1.0), 0.0).astype(np.float32)
    q = np.clip(np.rint(b * inv[:, None]), -127, 127).astype(np.int8)
    out = np.empty((b.shape[0], 34), dtype=np.uint8)
    out[:, 0:2] = d16.view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def q8_0_roundtrip(w):
    """What the Q8_0 file holds, as floats (the fit's validation uses it)."""
    b = np.ascontiguousarray(w, dtype=np.float32).reshape(-1, 32)
    d = (np.abs(b).max(axis=1) / 127.0).astype(np.float32)
    inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1.0), 0.0).astype(np.float32)
    q = np.clip(np.rint(b * inv[:, None]), -127, 127)
    return (q * d.astype(np.float16).astype(np.float32)[:, None]).reshape(w.shape)


def write_gguf(path, kvs, tensors):
    """kvs: [(key, type, value)]; tensors: [(name, np.ndarray (rows, cols) or (n,), ggml type)]."""
    infos, blobs, off = [], [], 0
    for name, a, t in tensors:
        a = np.ascontiguousarray(a, dtype=np.float32)
        ne = [a.shape[-1]] + ([a.shape[0]] if a.ndim == 2 else [])
        data = a.tobytes() if t == T_F32 else a.astype(np.float16).tobytes() if t == T_F16 else q8_0_bytes(a)
        infos.append(_gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne) +
                     struct.pack("<IQ", t, off))
        pad = (-len(data)) % ALIGN
        blobs.append(data + b"\0" * pad)
        off += len(data) + pad
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for k, t, v in kvs:
        head += _gstr(k) + struct.pack("<I", t)
        if t == GGUF_ARR:  # of INT32 (token ids)
            head += struct.pack("<IQ", GGUF_I32, len(v)) + np.asarray(v, dtype="<i4").tobytes()
        else:
            head += _gstr(v) if t == GGUF_STR else struct.pack({GGUF_U32: "<I", GGUF_F32: "<f", GGUF_U64: "<Q"}[t], v)
    head += b"".join(infos)
    head += b"\0" * ((-len(head)) % ALIGN)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(head)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def read_module(path):
    """The tensors of a module this tool wrote (F32, F16, Q8_0), as float32 arrays by name."""
    with open(path, "rb") as f:
        b = f.read()
    if b[:4] != b"GGUF":
        sys.exit("fit_mtp: %s is not a GGUF file" % path)
    _, nt, nkv = struct.unpack_from("<IQQ", b, 4)
    o = 24

    def rstr(o):
        n, = struct.unpack_from("<Q", b, o)
        return b[o + 8:o + 8 + n].decode("utf-8"), o + 8 + n
    sizes = {GGUF_U32: 4, GGUF_F32: 4, GGUF_U64: 8}
    align, sha = ALIGN, None
    for _ in range(nkv):
        k, o = rstr(o)
        t, = struct.unpack_from("<I", b, o)
        o += 4
        if t == GGUF_STR:
            v, o = rstr(o)
            sha = v if k == "lockstep.mtp.target_sha256" else sha
        elif t in sizes:
            v = struct.unpack_from({4: "<I", 6: "<f", 10: "<Q"}[t], b, o)[0]
            o += sizes[t]
            align = v if k == "general.alignment" else align
        elif t == GGUF_ARR and struct.unpack_from("<I", b, o)[0] == GGUF_I32:
            n, = struct.unpack_from("<Q", b, o + 4)
            o += 12 + 4 * n
        else:
            sys.exit("fit_mtp: %s: metadata type %d is not one this tool writes" % (path, t))
    infos = []
    for _ in range(nt):
        name, o = rstr(o)
        nd, = struct.unpack_from("<I", b, o)
        ne = struct.unpack_from("<%dQ" % nd, b, o + 4)
        t, off = struct.unpack_from("<IQ", b, o + 4 + 8 * nd)
        o += 4 + 8 * nd + 12
        infos.append((name, ne, t, off))
    base = o + (-o) % align
    out = {}
    for name, ne, t, off in infos:
        n = int(np.prod(ne))
        shape = tuple(reversed(ne))
        p = base + off
        if t == T_F32:
            a = np.frombuffer(b, dtype="<f4", count=n, offset=p)
        elif t == T_F16:
            a = np.frombuffer(b, dtype="<f2", count=n, offset=p).astype(np.float32)
        elif t == T_Q8_0:
            blk = np.frombuffer(b, dtype=np.uint8, count=n // 32 * 34, offset=p).reshape(-1, 34)
            d = blk[:, :2].copy().view("<f2").astype(np.float32)
            a = (blk[:, 2:].copy().view(np.int8).astype(np.float32) * d).reshape(-1)
        else:
            sys.exit("fit_mtp: %s: tensor type %d is not one this tool writes" % (path, t))
        out[name] = a.reshape(shape).astype(np.float32)
    return out, sha


# ---- a head over part of the vocabulary (lockstep.mtp.head_vocab) ----------------------
def head_vocab(tokens, n, n_vocab):
    """The n tokens the model writes most often in `tokens` (ties: the lower id), ascending.
    The module's head then covers only these: a draft costs less (the head is most of a small
    module's bytes), and a token outside them is never drafted (verification is unchanged)."""
    counts = np.bincount(np.asarray(tokens, dtype=np.int64), minlength=n_vocab)[:n_vocab]
    order = np.lexsort((np.arange(n_vocab), -counts))  # by count, descending; then by id
    return np.sort(order[:min(n, n_vocab)]).astype(np.int64)


def coverage(ids, tokens):
    """The share of `tokens` that `ids` holds."""
    tokens = np.asarray(tokens, dtype=np.int64)
    return float(np.isin(tokens, ids).mean()) if len(tokens) else 0.0


def set_head_vocab(src, dst, ids):
    """Copies the GGUF file src to dst with lockstep.mtp.head_vocab set to ids (replaced
    where src has it): the tensors' bytes and every other key unchanged."""
    with open(src, "rb") as f:
        b = f.read()
    if b[:4] != b"GGUF":
        sys.exit("fit_mtp: %s is not a GGUF file" % src)
    ver, nt, nkv = struct.unpack_from("<IQQ", b, 4)
    o, kept, align = 24, [], ALIGN

    def skip_value(t, o):
        if t == GGUF_STR:
            n, = struct.unpack_from("<Q", b, o)
            return o + 8 + n
        if t == GGUF_ARR:
            et, n = struct.unpack_from("<IQ", b, o)
            o += 12
            for _ in range(n):
                o = skip_value(et, o)
            return o
        return o + {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}[t]
    for _ in range(nkv):
        k0 = o
        n, = struct.unpack_from("<Q", b, o)
        k = b[o + 8:o + 8 + n].decode("utf-8")
        o += 8 + n
        t, = struct.unpack_from("<I", b, o)
        o = skip_value(t, o + 4)
        if k == "general.alignment":
            align, = struct.unpack_from("<I", b, o - 4)
        if k != HEAD_VOCAB_KEY:
            kept.append(b[k0:o])
    t0 = o
    for _ in range(nt):
        n, = struct.unpack_from("<Q", b, o)
        o += 8 + n
        nd, = struct.unpack_from("<I", b, o)
        o += 4 + 8 * nd + 12
    infos, data = b[t0:o], b[o + (-o) % align:]
    ids = np.asarray(ids, dtype="<i4")
    kv = _gstr(HEAD_VOCAB_KEY) + struct.pack("<IIQ", GGUF_ARR, GGUF_I32, len(ids)) + ids.tobytes()
    head = b"GGUF" + struct.pack("<IQQ", ver, nt, len(kept) + 1) + b"".join(kept) + kv + infos
    head += b"\0" * ((-len(head)) % align)
    tmp = dst + ".tmp"
    with open(tmp, "wb") as f:
        f.write(head + data)
    os.replace(tmp, dst)


# ---- the data of `lockstep mtp-data` ---------------------------------------------------
class Data:
    """One folder of `lockstep mtp-data` output, or several for the same model joined (their
    hidden states then held in memory)."""

    def __init__(self, dirs):
        dirs = [dirs] if isinstance(dirs, str) else list(dirs)
        self.dir = d = dirs[0]
        with open(os.path.join(d, "meta.json")) as f:
            self.meta = json.load(f)
        m = self.meta
        self.E = int(m["n_embd"])
        toks, lens, hid = [], [], []
        for e in dirs:
            with open(os.path.join(e, "meta.json")) as f:
                me = json.load(f)
            if me["model_sha256"] != m["model_sha256"]:
                sys.exit("fit_mtp: %s holds data of another model than %s" % (e, d))
            toks.append(np.fromfile(os.path.join(e, "tokens.i32"), dtype="<i4"))
            lens.append(np.fromfile(os.path.join(e, "seqs.i32"), dtype="<i4"))
            hid.append(np.memmap(os.path.join(e, "hidden.f32"), dtype="<f4", mode="r", shape=(len(toks[-1]), self.E)))
        self.tokens, self.lens = np.concatenate(toks), np.concatenate(lens)
        self.hidden = hid[0] if len(hid) == 1 else np.concatenate(hid)
        if len(dirs) > 1:
            m = self.meta = dict(m, n_tokens=int(len(self.tokens)), n_seqs=int(len(self.lens)),
                                 n_generated=int(sum(json.load(open(os.path.join(e, "meta.json")))["n_generated"]
                                                     for e in dirs)))
        self.starts = np.concatenate([[0], np.cumsum(self.lens)[:-1]]).astype(np.int64)
        if int(self.lens.sum()) != len(self.tokens):
            sys.exit("fit_mtp: %s: seqs.i32 does not add up to tokens.i32" % d)

    def weight(self, name):
        shape = self.meta["tensors"].get(name)
        if shape is None:
            return None
        a = np.fromfile(os.path.join(self.dir, "weights", name + ".f32"), dtype="<f4")
        return a.reshape(shape)  # (rows, cols); a vector is one row


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def int8_act(x):
    """x as lockstep's matmuls see it: quantized to int8 per block of 32 (scale amax/127,
    rounded to nearest), back to floats; the check's second forward uses it."""
    b = x.reshape(-1, 32)
    d = b.abs().amax(1, keepdim=True) / 127
    q = torch.round(b / torch.where(d > 0, d, torch.ones_like(d)))
    return (q * d).reshape(x.shape)


FAMILIES = ("llama", "mistral", "gemma3")


class MTP(torch.nn.Module):
    """The module as lockstep's MTP forward computes it (llama/mistral, gemma3)."""

    def __init__(self, data):
        super().__init__()
        m = data.meta
        self.E, self.H, self.Hkv, self.D = int(m["n_embd"]), int(m["n_head"]), int(m["n_head_kv"]), int(m["head_dim"])
        self.F, self.eps, self.L = int(m["n_ff"]), float(m["norm_eps"]), int(m["n_layer"])
        self.embd_scale = float(m["embd_scale"])
        self.rope_dim, self.neox = int(m["rope_dim"]), bool(m["rope_neox"])
        # the module's block is not a sliding-window layer (src/model/model.c, ls_plan_build): it
        # uses the file's RoPE base (gemma3's global one) and attends all its rows
        self.rope_base, self.rope_scale = float(m["rope_base"]), float(m["rope_freq_scale"])
        self.gemma = m["arch"] == "gemma3"
        self.gelu = m.get("act") == "gelu_tanh"
        self.qact = False  # the check: each matmul's input quantized as lockstep quantizes it (int8_act)
        blk = "blk.%d." % (self.L - 1)
        P = lambda a: torch.nn.Parameter(torch.from_numpy(np.array(a, dtype=np.float32)))
        W = lambda n: data.weight(blk + n)
        E = self.E
        # frozen: the model's embedding, final norm and head
        self.embed = torch.from_numpy(np.array(data.weight("token_embd.weight").reshape(-1, E)))
        out = data.weight("output.weight")
        self.head = self.embed if out is None else torch.from_numpy(np.array(out.reshape(-1, E)))
        self.out_norm = torch.from_numpy(np.array(data.weight("output_norm.weight").reshape(E)))
        # trained: the module's norms, projection and block
        # x starts as the hidden state itself, at its own scale (the embedding's half at 0;
        # measured on SmolLM2: the start's KL 9 against 31-51 for [I/2 I/2] or [I 0])
        n = min(len(data.tokens), 4096)
        s_h = float(np.sqrt((np.asarray(data.hidden[:n], dtype=np.float64) ** 2).mean(axis=1)).mean())
        self.enorm = P(np.full(E, s_h))
        self.hnorm = P(np.full(E, s_h))
        self.eh_proj = P(np.concatenate([np.zeros((E, E)), np.eye(E)], axis=1))  # (E, 2E): [embedding | hidden]
        self.attn_norm = P(W("attn_norm.weight").reshape(E))
        self.wq = P(W("attn_q.weight").reshape(-1, E))
        self.wk = P(W("attn_k.weight").reshape(-1, E))
        self.wv = P(W("attn_v.weight").reshape(-1, E))
        self.wo = P(W("attn_output.weight").reshape(E, -1))
        self.ffn_norm = P(W("ffn_norm.weight").reshape(E))
        if self.gemma:  # the stored weights as they are (the file holds 1 + w): lockstep multiplies by them
            self.q_norm = P(W("attn_q_norm.weight").reshape(self.D))
            self.k_norm = P(W("attn_k_norm.weight").reshape(self.D))
            self.post_attn_norm = P(W("post_attention_norm.weight").reshape(E))
            self.post_ffn_norm = P(W("post_ffw_norm.weight").reshape(E))
        self.w_gate = P(W("ffn_gate.weight").reshape(-1, E))
        self.w_up = P(W("ffn_up.weight").reshape(-1, E))
        self.w_down = P(W("ffn_down.weight").reshape(E, -1))
        half = self.rope_dim // 2
        i = torch.arange(half, dtype=torch.float64)
        self.inv_freq = torch.pow(torch.tensor(self.rope_base, dtype=torch.float64), -2.0 * i / self.rope_dim)

    def rope(self, x, pos):  # x (B, T, heads, D); pos (T,)
        th = (pos.to(torch.float64)[:, None] * self.rope_scale * self.inv_freq[None, :])
        c, s = torch.cos(th).float()[None, :, None, :], torch.sin(th).float()[None, :, None, :]
        half = self.rope_dim // 2
        if self.neox:
            x0, x1 = x[..., :half], x[..., half:self.rope_dim]
        else:
            x0, x1 = x[..., 0:self.rope_dim:2], x[..., 1:self.rope_dim:2]
        y0, y1 = x0 * c - x1 * s, x0 * s + x1 * c
        if self.neox:
            r = torch.cat([y0, y1], dim=-1)
        else:
            r = torch.stack([y0, y1], dim=-1).flatten(-2)
        return torch.cat([r, x[..., self.rope_dim:]], dim=-1)

    def forward(self, tok_next, h, prev=None):
        """tok_next (B, T) the tokens t_{i+1}; h (B, T, E) the hidden states h_i; rows at
        positions 0..T-1.  Returns the module's last hidden state (B, T, E) and the rows'
        K and V (B, T, Hkv, D).

        prev = (K, V) of such a call: this call is one chained step, as the drafter chains
        (spec.c): row j, at position j + 1, continues the module's own output at row j with
        the token after, and attends the earlier call's rows 0..j and itself."""
        B, T, E = h.shape
        Q = int8_act if self.qact else (lambda t: t)
        e = self.embed[tok_next] * self.embd_scale
        x = Q(torch.cat([rmsnorm(e, self.enorm, self.eps), rmsnorm(h, self.hnorm, self.eps)], dim=-1)) @ self.eh_proj.T
        n = Q(rmsnorm(x, self.attn_norm, self.eps))
        q = (n @ self.wq.T).view(B, T, self.H, self.D)
        k = (n @ self.wk.T).view(B, T, self.Hkv, self.D)
        v = (n @ self.wv.T).view(B, T, self.Hkv, self.D)
        if self.gemma:  # RMSNorm of each head, before RoPE
            q, k = rmsnorm(q, self.q_norm, self.eps), rmsnorm(k, self.k_norm, self.eps)
        pos = torch.arange(T, device=h.device) + (1 if prev is not None else 0)
        q, k = self.rope(q, pos), self.rope(k, pos)
        g = self.H // self.Hkv  # query head j reads kv head j // g
        rk = lambda t: t.repeat_interleave(g, dim=2).transpose(1, 2)  # (B, H, T, D)
        qh = q.transpose(1, 2)
        if prev is None:
            kh, vh = rk(k), rk(v)
            s = (qh @ kh.transpose(-1, -2)) / math.sqrt(self.D)
            s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=h.device).triu(1), float("-inf"))
            a = torch.softmax(s, dim=-1) @ vh
        else:
            kp, vp = rk(prev[0]), rk(prev[1])
            kh, vh = rk(k), rk(v)
            s1 = (qh @ kp.transpose(-1, -2)) / math.sqrt(self.D)  # the earlier rows 0..j
            s1 = s1.masked_fill(torch.ones(T, T, dtype=torch.bool, device=h.device).triu(1), float("-inf"))
            s2 = (qh * kh).sum(-1, keepdim=True) / math.sqrt(self.D)  # itself
            w = torch.softmax(torch.cat([s1, s2], dim=-1), dim=-1)
            a = w[..., :T] @ vp + w[..., T:] * vh
        o = Q(a.transpose(1, 2).reshape(B, T, self.H * self.D)) @ self.wo.T
        x = x + (rmsnorm(o, self.post_attn_norm, self.eps) if self.gemma else o)
        n = Q(rmsnorm(x, self.ffn_norm, self.eps))
        g = n @ self.w_gate.T
        g = torch.nn.functional.gelu(g, approximate="tanh") if self.gelu else torch.nn.functional.silu(g)
        o = Q(g * (n @ self.w_up.T)) @ self.w_down.T
        x = x + (rmsnorm(o, self.post_ffn_norm, self.eps) if self.gemma else o)
        return x, k, v

    def logits(self, x):
        n = rmsnorm(x, self.out_norm, self.eps)
        return (int8_act(n) if self.qact else n) @ self.head.T


def to_device(model, dev):
    """The module's parameters and its frozen tensors (embedding, head, norms, RoPE) on dev."""
    model.to(dev)
    for k, v in list(vars(model).items()):
        if isinstance(v, torch.Tensor) and not isinstance(v, torch.nn.Parameter):
            setattr(model, k, v.to(dev))


def batches(data, idx, max_rows, rng):
    """Groups of whole sequences (indexes idx) of about max_rows rows, in a shuffled order."""
    order = list(idx)
    rng.shuffle(order)
    cur, rows = [], 0
    for s in order:
        n = int(data.lens[s]) - 1
        if n < 1:
            continue
        if cur and rows + n > max_rows:
            yield cur
            cur, rows = [], 0
        cur.append(s)
        rows += n
    if cur:
        yield cur


def make_batch(data, seqs):
    """Padded (B, T) tensors: t_{i+1}, h_i, the teacher's h_{i+1}, a mask of real rows."""
    T = max(int(data.lens[s]) - 1 for s in seqs)
    B, E = len(seqs), data.E
    tok = np.zeros((B, T), dtype=np.int64)
    h = np.zeros((B, T, E), dtype=np.float32)
    ht = np.zeros((B, T, E), dtype=np.float32)
    mask = np.zeros((B, T), dtype=bool)
    for b, s in enumerate(seqs):
        st, n = int(data.starts[s]), int(data.lens[s]) - 1
        tok[b, :n] = data.tokens[st + 1:st + 1 + n]
        h[b, :n] = data.hidden[st:st + n]
        ht[b, :n] = data.hidden[st + 1:st + 1 + n]
        mask[b, :n] = True
    return tuple(torch.from_numpy(a).to(DEV) for a in (tok, h, ht, mask))


def kl_chunks(model, x, ht, rows, grad):
    """The mean over x's rows of KL(target || module) and of top-1 agreement, where the
    target's distribution is head(final_norm(ht)), computed chunk by chunk of `rows` rows
    (a 262,144-token head makes whole batches' logits gigabytes).  With grad, also the
    gradient of the mean KL with respect to x (the head and the final norm are frozen)."""
    N = x.shape[0]
    xd = x.detach()
    gx = torch.zeros_like(xd) if grad else None
    tot, agree = 0.0, 0.0
    for a in range(0, N, rows):
        with torch.no_grad():
            tl = torch.log_softmax(model.logits(ht[a:a + rows]), dim=-1)
        xc = xd[a:a + rows].clone().requires_grad_(True) if grad else xd[a:a + rows]
        with torch.set_grad_enabled(grad):
            sl = torch.log_softmax(model.logits(xc), dim=-1)
            kl = (tl.exp() * (tl - sl)).sum()
        if grad:
            (kl / N).backward()
            gx[a:a + rows] = xc.grad
        tot += float(kl)
        agree += float((sl.detach().argmax(-1) == tl.argmax(-1)).sum())
        del tl, sl, kl
    return tot / max(N, 1), agree / max(N, 1), gx


def step_loss(model, batch, chain=1, loss_rows=128, train=False):
    """KL for the token after next; with chain 2 also for the one after that, the module
    continuing its own output (the second draft of a chain), the two losses added.  With
    train, the gradients are in the module's parameters on return."""
    tok, h, ht, mask = batch
    x, k, v = model(tok, h)
    xm = x[mask]
    kl, top1, gx = kl_chunks(model, xm, ht[mask], loss_rows, train)
    outs, grads = [xm], [gx]
    if chain >= 2 and tok.shape[1] > 1:
        # chained row j: the module's output at row j with t_(j+2), predicting t_(j+3)
        m2 = mask[:, 1:]
        x2, _, _ = model(tok[:, 1:], x[:, :-1], prev=(k[:, :-1], v[:, :-1]))
        x2m = x2[m2]
        kl2, _, g2 = kl_chunks(model, x2m, ht[:, 1:][m2], loss_rows, train)
        kl += kl2
        outs.append(x2m)
        grads.append(g2)
    if train:
        torch.autograd.backward(outs, grads)
    return kl, top1, int(mask.sum())


def evaluate(model, data, idx, max_rows, loss_rows=128):
    tot, agree, n = 0.0, 0.0, 0
    with torch.no_grad():
        for seqs in batches(data, idx, max_rows, np.random.default_rng(0)):
            kl, top1, r = step_loss(model, make_batch(data, seqs), loss_rows=loss_rows)
            tot += kl * r
            agree += top1 * r
            n += r
    return tot / max(n, 1), agree / max(n, 1)


def check_module(a, model, ids=None):
    """lockstep's forward of the written module against this fit's, on held-out answers: the
    share of positions where their top tokens agree (1 but for near-ties: lockstep quantizes
    activations to int8 per block of 32; the fit's forward with its matmuls' inputs so
    quantized too (int8_act) should agree at nearly every position), and where lockstep's
    agrees with the model's own next token there (the first draft's acceptance at
    temperature 0 on such text)."""
    d = a.out + ".check"
    cmd = [a.lockstep, "mtp-data", "-m", a.model, "--module", a.out, "--prompts", a.check_prompts, "--out", d,
           "--max-prompts", str(a.check_max_prompts), "-n", str(a.n_predict), "--temp", str(a.temp),
           "--seed", str(a.seed + 1000), "-t", str(a.threads)] + (["--raw"] if a.raw else [])
    print("fit_mtp: " + " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True)
    data = Data(d)
    c_top = np.fromfile(os.path.join(d, "mtp_top1.i32"), dtype="<i4")
    t_top, q_top, teacher = [], [], []
    sub = torch.from_numpy(ids).to(DEV) if ids is not None else None

    def top(logits):  # the module's draft: over its head's tokens only, as lockstep's
        return (sub[logits[:, sub].argmax(-1)] if sub is not None else logits.argmax(-1)).cpu().numpy()
    with torch.no_grad():
        for s in range(len(data.lens)):
            tok, h, ht, mask = make_batch(data, [s])
            x = model(tok, h)[0][mask]
            t_top.append(top(model.logits(x)))
            teacher.append(model.logits(ht[mask]).argmax(-1).cpu().numpy())
            model.qact = True
            q_top.append(top(model.logits(model(tok, h)[0][mask])))
            model.qact = False
    t_top, q_top, teacher = np.concatenate(t_top), np.concatenate(q_top), np.concatenate(teacher)
    if len(t_top) != len(c_top):
        sys.exit("fit_mtp: the check has %d rows from lockstep, %d here" % (len(c_top), len(t_top)))
    r = {"rows": int(len(c_top)), "lockstep_vs_torch_top1": float((c_top == t_top).mean()),
         "lockstep_vs_model_top1": float((c_top == teacher).mean()),
         "torch_vs_model_top1": float((t_top == teacher).mean()),
         "lockstep_vs_torch_int8_top1": float((c_top == q_top).mean())}
    print("fit_mtp: check on %d held-out positions: lockstep's top token = this fit's at %.3f (with lockstep's "
          "int8 activations: %.3f); = the model's next at %.3f (this fit's: %.3f)" %
          (r["rows"], r["lockstep_vs_torch_top1"], r["lockstep_vs_torch_int8_top1"], r["lockstep_vs_model_top1"],
           r["torch_vs_model_top1"]), file=sys.stderr)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default=os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("-o", "--out", required=True, help="the module's GGUF file")
    ap.add_argument("--data", action="append", help="a folder of `lockstep mtp-data` output (made here when it has "
                    "none); repeat it to join several folders of the same model's data")
    ap.add_argument("--prompts", default=os.path.join(HERE, "mtp_prompts.txt"))
    ap.add_argument("--max-prompts", type=int, default=0, help="0: all")
    ap.add_argument("--raw", action="store_true",
                    help="the prompts are raw text, not chat messages (a pretrained model: no chat template); "
                         "the check's prompts too")
    ap.add_argument("--n-predict", type=int, default=192)
    ap.add_argument("--temp", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lockstep", default=os.path.join(ROOT, "build/lockstep"))
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--minutes", type=float, default=0, help="stop after this much training time (0: no limit)")
    ap.add_argument("--batch-rows", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--loss-rows", type=int, default=128,
                    help="rows per chunk of the loss (the head's logits of this many rows at a time)")
    ap.add_argument("--init", help="start from this module (one this tool wrote for the same model)")
    ap.add_argument("--chain", type=int, choices=[1, 2], default=1,
                    help="2: also train the second draft of a chain (the module continuing its own output)")
    ap.add_argument("--val-frac", type=float, default=0.05)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="where PyTorch trains: cpu, or cuda on a machine with a GPU")
    ap.add_argument("--type", choices=["q8_0", "f16"], default="q8_0", help="the matrices' type in the file")
    ap.add_argument("--log", help="a JSON file with the fit's record")
    ap.add_argument("--head-vocab", type=int, default=0,
                    help="the module's head covers only the N tokens the data holds most often "
                         "(lockstep.mtp.head_vocab; 0: the whole vocabulary)")
    ap.add_argument("--head-vocab-only", action="store_true",
                    help="no fit: copy the module --init to -o with --head-vocab's tokens from --data")
    ap.add_argument("--check-prompts", default=os.path.join(HERE, "mtp_prompts_heldout.txt"),
                    help="held-out prompts: lockstep runs the written module over the model's answers to them, "
                         "and its top tokens are compared with this fit's ('' to skip)")
    ap.add_argument("--check-max-prompts", type=int, default=4)
    a = ap.parse_args()
    global DEV
    DEV = torch.device(a.device)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    t_start = time.time()

    data_dirs = a.data or [a.out + ".data"]
    data_dir = data_dirs[0]
    if len(data_dirs) == 1 and not os.path.exists(os.path.join(data_dir, "meta.json")):
        cmd = [a.lockstep, "mtp-data", "-m", a.model, "--prompts", a.prompts, "--out", data_dir,
               "-n", str(a.n_predict), "--temp", str(a.temp), "--seed", str(a.seed), "-t", str(a.threads)]
        if a.max_prompts:
            cmd += ["--max-prompts", str(a.max_prompts)]
        if a.raw:
            cmd += ["--raw"]
        print("fit_mtp: " + " ".join(cmd), file=sys.stderr)
        subprocess.run(cmd, check=True)
    t_data = time.time() - t_start
    data = Data(data_dirs)
    m = data.meta
    ids = head_vocab(data.tokens, a.head_vocab, int(m["n_vocab"])) if a.head_vocab else None
    if ids is not None:
        print("fit_mtp: head over %d of %d tokens: they are %.2f %% of the data's tokens" %
              (len(ids), int(m["n_vocab"]), 100 * coverage(ids, data.tokens)), file=sys.stderr)
    if a.head_vocab_only:
        if not a.init or ids is None:
            sys.exit("fit_mtp: --head-vocab-only needs --init MODULE and --head-vocab N")
        _, sha = read_module(a.init)
        if sha != m["model_sha256"]:
            sys.exit("fit_mtp: %s was fitted to another model (sha256 %s)" % (a.init, sha))
        set_head_vocab(a.init, a.out, ids)
        print("fit_mtp: wrote %s: %s with a head over %d tokens" % (a.out, a.init, len(ids)), file=sys.stderr)
        return
    if m["arch"] not in FAMILIES:
        sys.exit("fit_mtp: architecture '%s' is not supported yet (%s)" % (m["arch"], ", ".join(FAMILIES)))
    if m["rope_yarn"] or m["rope_freqs"]:
        sys.exit("fit_mtp: YaRN and rope_freqs are not supported yet")
    rng = np.random.default_rng(a.seed)
    perm = rng.permutation(len(data.lens))
    n_val = max(1, int(round(a.val_frac * len(perm)))) if len(perm) > 1 else 0
    val, train = perm[:n_val], perm[n_val:]
    model = MTP(data)
    if a.init:  # continue a module this tool wrote for the same model
        w, sha = read_module(a.init)
        if sha != m["model_sha256"]:
            sys.exit("fit_mtp: %s was fitted to another model (sha256 %s)" % (a.init, sha))
        pre = "blk.%d." % int(m["n_layer"])
        names = {"enorm": "nextn.enorm.weight", "hnorm": "nextn.hnorm.weight", "eh_proj": "nextn.eh_proj.weight",
                 "attn_norm": "attn_norm.weight", "wq": "attn_q.weight", "wk": "attn_k.weight", "wv": "attn_v.weight",
                 "wo": "attn_output.weight", "ffn_norm": "ffn_norm.weight", "w_gate": "ffn_gate.weight",
                 "w_up": "ffn_up.weight", "w_down": "ffn_down.weight"}
        if model.gemma:
            names.update({"q_norm": "attn_q_norm.weight", "k_norm": "attn_k_norm.weight",
                          "post_attn_norm": "post_attention_norm.weight", "post_ffn_norm": "post_ffw_norm.weight"})
        with torch.no_grad():
            for attr, nm in names.items():
                getattr(model, attr).copy_(torch.from_numpy(w[pre + nm]).reshape(getattr(model, attr).shape))
    to_device(model, DEV)
    params = [p for p in model.parameters()]
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.0, betas=(0.9, 0.98))
    def sched(s, elapsed):  # warm-up, then a cosine to a tenth, over the steps or the minutes
        prog = min(1.0, max(s / a.steps, elapsed / (60 * a.minutes) if a.minutes else 0.0))
        return min(1.0, (s + 1) / 20) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * prog)))
    record = {"model": os.path.basename(a.model), "model_sha256": m["model_sha256"], "tokens": int(m["n_tokens"]),
              "chain": a.chain, "init": os.path.basename(a.init) if a.init else None, "seqs": int(m["n_seqs"]),
              "raw": a.raw,
              "val_seqs": int(n_val), "threads": a.threads, "evals": []}
    if n_val:
        kl0, top0 = evaluate(model, data, val, a.batch_rows, a.loss_rows)
        print("fit_mtp: start: val KL %.3f, top-1 agreement %.3f" % (kl0, top0), file=sys.stderr)
        record["evals"].append({"step": 0, "val_kl": kl0, "val_top1": top0})
    step, t0 = 0, time.time()
    done = False
    while not done:
        for seqs in batches(data, train, a.batch_rows, rng):
            for g in opt.param_groups:
                g["lr"] = a.lr * sched(step, time.time() - t0)
            opt.zero_grad()
            kl, top1, r = step_loss(model, make_batch(data, seqs), a.chain, a.loss_rows, train=True)
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            step += 1
            if step % 10 == 0:
                print("fit_mtp: step %d/%d: KL %.3f top-1 %.3f (%d rows, %.1f s)" %
                      (step, a.steps, float(kl), float(top1), r, time.time() - t0), file=sys.stderr)
            if n_val and step % a.eval_every == 0:
                kl_v, top_v = evaluate(model, data, val, a.batch_rows, a.loss_rows)
                print("fit_mtp: step %d: val KL %.3f, top-1 agreement %.3f" % (step, kl_v, top_v), file=sys.stderr)
                record["evals"].append({"step": step, "val_kl": kl_v, "val_top1": top_v})
            if step >= a.steps or (a.minutes and time.time() - t0 > 60 * a.minutes):
                done = True
                break
    t_train = time.time() - t0
    # the validation of what the file will hold (its matrices rounded as the type rounds them)
    with torch.no_grad():
        for name in ("eh_proj", "wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down"):
            p = getattr(model, name)
            w = p.detach().cpu().numpy()
            p.copy_(torch.from_numpy(q8_0_roundtrip(w) if a.type == "q8_0" else w.astype(np.float16).astype(np.float32)))
    if n_val:
        kl_v, top_v = evaluate(model, data, val, a.batch_rows, a.loss_rows)
        print("fit_mtp: final (%s): val KL %.3f, top-1 agreement %.3f" % (a.type, kl_v, top_v), file=sys.stderr)
        record["final"] = {"step": step, "val_kl": kl_v, "val_top1": top_v, "type": a.type}
    record.update({"steps": step, "train_s": round(t_train, 1), "data_s": round(t_data, 1),
                   "total_s": round(time.time() - t_start, 1)})

    L, arch = int(m["n_layer"]), m["arch"]
    mt = T_Q8_0 if a.type == "q8_0" else T_F16
    g = lambda p: p.detach().cpu().numpy()
    pre = "blk.%d." % L
    tensors = [
        (pre + "nextn.enorm.weight", g(model.enorm), T_F32),
        (pre + "nextn.hnorm.weight", g(model.hnorm), T_F32),
        (pre + "nextn.shared_head_norm.weight", model.out_norm.cpu().numpy(), T_F32),
        (pre + "nextn.eh_proj.weight", g(model.eh_proj), mt),
        (pre + "attn_norm.weight", g(model.attn_norm), T_F32),
        (pre + "attn_q.weight", g(model.wq), mt),
        (pre + "attn_k.weight", g(model.wk), mt),
        (pre + "attn_v.weight", g(model.wv), mt),
        (pre + "attn_output.weight", g(model.wo), mt),
        (pre + "ffn_norm.weight", g(model.ffn_norm), T_F32),
        (pre + "ffn_gate.weight", g(model.w_gate), mt),
        (pre + "ffn_up.weight", g(model.w_up), mt),
        (pre + "ffn_down.weight", g(model.w_down), mt),
    ]
    if model.gemma:
        tensors += [
            (pre + "attn_q_norm.weight", g(model.q_norm), T_F32),
            (pre + "attn_k_norm.weight", g(model.k_norm), T_F32),
            (pre + "post_attention_norm.weight", g(model.post_attn_norm), T_F32),
            (pre + "post_ffw_norm.weight", g(model.post_ffn_norm), T_F32),
        ]
    U, F, S = GGUF_U32, GGUF_F32, GGUF_STR
    kvs = [
        ("general.architecture", S, arch),
        ("general.name", S, (m["name"] or os.path.basename(a.model)) + " MTP module"),
        ("general.alignment", U, ALIGN),
        (arch + ".block_count", U, L + 1),
        (arch + ".nextn_predict_layers", U, 1),
        (arch + ".embedding_length", U, int(m["n_embd"])),
        (arch + ".feed_forward_length", U, int(m["n_ff"])),
        (arch + ".attention.head_count", U, int(m["n_head"])),
        (arch + ".attention.head_count_kv", U, int(m["n_head_kv"])),
        (arch + ".attention.layer_norm_rms_epsilon", F, float(m["norm_eps"])),
        (arch + ".rope.freq_base", F, float(m["rope_base"])),
        (arch + ".context_length", U, int(m["n_ctx_train"])),
        (arch + ".attention.key_length", U, int(m["head_dim"])),
        (arch + ".attention.value_length", U, int(m["head_dim"])),
        ("lockstep.mtp.target_sha256", S, m["model_sha256"]),
        ("lockstep.mtp.target_name", S, os.path.basename(a.model)),
        ("lockstep.mtp.fit", S, json.dumps({k: v for k, v in record.items() if k != "evals"}, sort_keys=True)),
    ]
    if ids is not None:
        kvs.append((HEAD_VOCAB_KEY, GGUF_ARR, ids))
        record["head_vocab"] = {"tokens": int(len(ids)), "data_coverage": coverage(ids, data.tokens)}
    write_gguf(a.out, kvs, tensors)
    print("fit_mtp: wrote %s (%.1f MB): %d steps in %.0f s, data %.0f s" %
          (a.out, os.path.getsize(a.out) / 1e6, step, t_train, t_data), file=sys.stderr)
    if a.check_prompts:
        record["check"] = check_module(a, model, ids)
    if a.log:
        with open(a.log, "w") as f:
            json.dump(record, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
