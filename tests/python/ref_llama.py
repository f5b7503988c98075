"""An independent float64 reference of the forward pass, in numpy, from the weights as
the `gguf` package dequantizes them.  No activation quantization, no float32 rounding:
the exact math the quantized engines approximate.

The Llama block, plus what each family adds (written from the families' published
definitions, not from lockstep's code): qwen2's q/k/v biases; qwen3's per-head q/k
RMSNorm; gemma3's scaled embedding, q/k norms, post-attention/post-FFN norms, GeGLU
(tanh GELU), and five sliding-window layers (RoPE base 10000, attending the last
`attention.sliding_window` positions) to one global; NeoX RoPE
for qwen and gemma; Llama 3.1's rope_freqs.weight dividing each frequency."""
import numpy as np


class RefLlama:
    def __init__(self, path):
        import gguf

        r = gguf.GGUFReader(str(path))
        f = {k: v.contents() for k, v in r.fields.items() if not k.startswith("tokenizer.ggml.")}
        a = self.arch = f["general.architecture"]
        self.E = f[f"{a}.embedding_length"]
        self.L = f[f"{a}.block_count"]
        self.H = f[f"{a}.attention.head_count"]
        self.Hkv = f.get(f"{a}.attention.head_count_kv", self.H)
        self.D = f.get(f"{a}.attention.key_length", self.E // self.H)
        self.eps = f[f"{a}.attention.layer_norm_rms_epsilon"]
        self.base = f.get(f"{a}.rope.freq_base", 10000.0)
        self.neox = a in ("qwen2", "qwen3", "gemma3")
        self.gemma = a == "gemma3"
        # gemma3: every layer but 6k+5 attends only the last `sliding_window` positions
        self.window = f.get(f"{a}.attention.sliding_window", 0) if self.gemma else 0
        self.W = {}
        for t in r.tensors:
            # Kept as the float32 values gguf dequantizes to (exact); every product is in float64.
            w = gguf.quants.dequantize(t.data, t.tensor_type)
            self.W[t.name] = w.reshape([int(x) for x in reversed(t.shape)]) if len(t.shape) > 1 else w.reshape(-1)
        self.out = self.W.get("output.weight", self.W["token_embd.weight"])
        self.freq_factors = self.W.get("rope_freqs.weight")
        # YaRN (the YaRN paper's NTK-by-parts interpolation, as transformers' _compute_yarn_parameters
        # writes it): per frequency a mix of the original and the 1/factor-interpolated one, ramped
        # between the dims that rotate beta_fast and beta_slow times in the original context; cos and
        # sin scaled by 0.1 ln(factor) + 1, times rope.scaling.attn_factor (the GGUF key as llama.cpp
        # reads it).
        self.yarn = None
        if f.get(f"{a}.rope.scaling.type") == "yarn":
            self.yarn = dict(factor=f[f"{a}.rope.scaling.factor"],
                             orig=f.get(f"{a}.rope.scaling.original_context_length", f[f"{a}.context_length"]),
                             attn=f.get(f"{a}.rope.scaling.attn_factor", 1.0),
                             fast=f.get(f"{a}.rope.scaling.yarn_beta_fast", 32.0),
                             slow=f.get(f"{a}.rope.scaling.yarn_beta_slow", 1.0))

    def _rms(self, x, w):
        return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + self.eps) * w

    def _rope(self, x, pos, base):  # x (T, h, D)
        D = self.D
        inv = base ** (-2.0 * np.arange(D // 2) / D)
        if self.freq_factors is not None:
            inv = inv / self.freq_factors
        mscale = 1.0
        if self.yarn:
            y = self.yarn
            corr = lambda rot: D * np.log(y["orig"] / (rot * 2 * np.pi)) / (2 * np.log(base))
            lo, hi = max(np.floor(corr(y["fast"])), 0), min(np.ceil(corr(y["slow"])), D - 1)
            keep = 1 - np.clip((np.arange(D // 2) - lo) / max(hi - lo, 0.001), 0, 1)  # 1: the original frequency
            inv = inv / y["factor"] * (1 - keep) + inv * keep
            mscale = (0.1 * np.log(y["factor"]) + 1) * y["attn"]
        theta = pos[:, None] * inv[None, :]
        c, s = mscale * np.cos(theta)[:, None, :], mscale * np.sin(theta)[:, None, :]
        if self.neox:  # rotate (i, i + D/2)
            x0, x1 = x[..., : D // 2], x[..., D // 2:]
            return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], -1)
        x0, x1 = x[..., 0::2], x[..., 1::2]  # llama: rotate adjacent pairs (2i, 2i+1)
        out = np.empty_like(x)
        out[..., 0::2] = x0 * c - x1 * s
        out[..., 1::2] = x0 * s + x1 * c
        return out

    def logits(self, toks, last_only=False):
        """Logits (float64) for every position of toks (last_only: the last position's, one row)."""
        h = self.hidden(toks, last_only)
        out = np.empty((h.shape[0], self.out.shape[0]))
        for r in range(0, self.out.shape[0], 16384):  # the head in slices: a 262144-token vocabulary in float64 is 1.3 GB
            out[:, r:r + 16384] = h @ self.out[r:r + 16384].astype(np.float64).T
        return out

    def embedding(self, toks):
        """The mean over positions of the final hidden state after the output norm, L2-normalized
        (mean pooling as llama.cpp's LLAMA_POOLING_TYPE_MEAN and OpenAI-style servers define it)."""
        e = self.hidden(toks).mean(0)
        return e / np.linalg.norm(e)

    def hidden(self, toks, last_only=False):
        """The final hidden state after the output norm (float64), (T, E) or (1, E)."""
        W, T, H, Hkv, D = self.W, len(toks), self.H, self.Hkv, self.D
        pos = np.arange(T, dtype=np.float64)
        mask = np.triu(np.full((T, T), -np.inf), 1)
        wmask = mask.copy()
        if self.window:  # key j is outside the window of query i when i - j >= window
            wmask[np.subtract.outer(np.arange(T), np.arange(T)) >= self.window] = -np.inf
        x = W["token_embd.weight"][toks].astype(np.float64)
        if self.gemma:
            x = x * np.sqrt(self.E)
        for l in range(self.L):
            p = f"blk.{l}."
            g = lambda n: W.get(p + n)
            local = self.gemma and l % 6 != 5  # gemma3: layer 6k+5 is global, the others sliding-window
            base = 10000.0 if local else self.base
            h = self._rms(x, W[p + "attn_norm.weight"])
            q, k, v = h @ W[p + "attn_q.weight"].T, h @ W[p + "attn_k.weight"].T, h @ W[p + "attn_v.weight"].T
            if g("attn_q.bias") is not None:
                q, k, v = q + g("attn_q.bias"), k + g("attn_k.bias"), v + g("attn_v.bias")
            q, k, v = q.reshape(T, H, D), k.reshape(T, Hkv, D), v.reshape(T, Hkv, D)
            if g("attn_q_norm.weight") is not None:
                q, k = self._rms(q, g("attn_q_norm.weight")), self._rms(k, g("attn_k_norm.weight"))
            q, k = self._rope(q, pos, base), self._rope(k, pos, base)
            out = np.empty((T, H, D))
            for hh in range(H):
                kv = hh // (H // Hkv)
                s = q[:, hh] @ k[:, kv].T / np.sqrt(D) + (wmask if local else mask)
                s = np.exp(s - s.max(-1, keepdims=True))
                out[:, hh] = (s / s.sum(-1, keepdims=True)) @ v[:, kv]
            a = out.reshape(T, -1) @ W[p + "attn_output.weight"].T
            if g("post_attention_norm.weight") is not None:
                a = self._rms(a, g("post_attention_norm.weight"))
            x = x + a
            h = self._rms(x, W[p + "ffn_norm.weight"])
            gt, u = h @ W[p + "ffn_gate.weight"].T, h @ W[p + "ffn_up.weight"].T
            if self.gemma:
                act = 0.5 * gt * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (gt + 0.044715 * gt ** 3)))
            else:
                act = gt / (1.0 + np.exp(-gt))
            d = (act * u) @ W[p + "ffn_down.weight"].T
            if g("post_ffw_norm.weight") is not None:
                d = self._rms(d, g("post_ffw_norm.weight"))
            x = x + d
        return self._rms(x[-1:] if last_only else x, W["output_norm.weight"])
