"""An independent float64 reference of the Llama forward pass, in numpy, from the
weights as the `gguf` package dequantizes them.  No activation quantization, no
float32 rounding: the exact math the quantized engines approximate."""
import numpy as np


class RefLlama:
    def __init__(self, path):
        import gguf

        r = gguf.GGUFReader(str(path))
        f = {k: v.contents() for k, v in r.fields.items() if not k.startswith("tokenizer.ggml.")}
        a = f["general.architecture"]
        self.E = f[f"{a}.embedding_length"]
        self.L = f[f"{a}.block_count"]
        self.H = f[f"{a}.attention.head_count"]
        self.Hkv = f.get(f"{a}.attention.head_count_kv", self.H)
        self.D = self.E // self.H
        self.eps = f[f"{a}.attention.layer_norm_rms_epsilon"]
        self.base = f.get(f"{a}.rope.freq_base", 10000.0)
        self.W = {}
        for t in r.tensors:
            w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
            self.W[t.name] = w.reshape([int(x) for x in reversed(t.shape)]) if len(t.shape) > 1 else w.reshape(-1)
        self.out = self.W.get("output.weight", self.W["token_embd.weight"])

    def _rms(self, x, w):
        return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + self.eps) * w

    def _rope(self, x, pos):  # x (T, h, D); llama: rotate adjacent pairs (2i, 2i+1)
        D = self.D
        theta = pos[:, None] * (self.base ** (-2.0 * np.arange(D // 2) / D))[None, :]
        c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * c - x1 * s
        out[..., 1::2] = x0 * s + x1 * c
        return out

    def logits(self, toks):
        """Logits (float64) for every position of toks."""
        W, T, H, Hkv, D = self.W, len(toks), self.H, self.Hkv, self.D
        pos = np.arange(T, dtype=np.float64)
        mask = np.triu(np.full((T, T), -np.inf), 1)
        x = W["token_embd.weight"][toks]
        for l in range(self.L):
            p = f"blk.{l}."
            h = self._rms(x, W[p + "attn_norm.weight"])
            q = self._rope((h @ W[p + "attn_q.weight"].T).reshape(T, H, D), pos)
            k = self._rope((h @ W[p + "attn_k.weight"].T).reshape(T, Hkv, D), pos)
            v = (h @ W[p + "attn_v.weight"].T).reshape(T, Hkv, D)
            out = np.empty((T, H, D))
            for hh in range(H):
                kv = hh // (H // Hkv)
                s = q[:, hh] @ k[:, kv].T / np.sqrt(D) + mask
                s = np.exp(s - s.max(-1, keepdims=True))
                out[:, hh] = (s / s.sum(-1, keepdims=True)) @ v[:, kv]
            x = x + out.reshape(T, -1) @ W[p + "attn_output.weight"].T
            h = self._rms(x, W[p + "ffn_norm.weight"])
            g, u = h @ W[p + "ffn_gate.weight"].T, h @ W[p + "ffn_up.weight"].T
            x = x + (g / (1.0 + np.exp(-g)) * u) @ W[p + "ffn_down.weight"].T
        return self._rms(x, W["output_norm.weight"]) @ self.out.T
