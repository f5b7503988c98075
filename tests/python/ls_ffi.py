"""ctypes bindings to build/liblockstep.so (the public API, include/lockstep.h) for the
Python reference tests.  Each mirrored struct starts with its `size`, which the library
reads, so a struct mirrored shorter than the C one gets the library's defaults for the
fields it lacks."""
import ctypes as C
import os
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def lib_path():
    return ROOT / os.environ.get("LOCKSTEP_BUILD", "build") / "liblockstep.so"


def model_path():
    return ROOT / os.environ.get("MODEL", "models/SmolLM2-135M-Instruct.Q4_1.gguf")


class Err(C.Structure):
    _fields_ = [("code", C.c_int), ("offset", C.c_uint64), ("msg", C.c_char * 512)]


class ModelParams(C.Structure):
    _fields_ = [("size", C.c_size_t), ("path", C.c_char_p), ("chat_template", C.c_char_p)]


class ModelInfo(C.Structure):
    _fields_ = [("size", C.c_size_t), ("arch", C.c_char * 32), ("name", C.c_char * 128)] + [
        (n, C.c_uint32) for n in ("n_vocab", "n_ctx_train", "n_embd", "n_layer", "n_head", "n_head_kv", "n_ff", "head_dim")
    ] + [("weight_bytes", C.c_uint64), ("has_mtp", C.c_bool), ("chat_template", C.c_char * 32), ("sha256", C.c_char * 65)]


class EngineParams(C.Structure):
    _fields_ = [("size", C.c_size_t), ("n_ctx", C.c_int32), ("kv_mem", C.c_int64), ("n_seq_max", C.c_int32),
                ("step_tokens", C.c_int32), ("n_threads", C.c_int32), ("isa", C.c_int), ("kernels", C.c_char_p),
                ("no_prefix_cache", C.c_bool), ("draft_max", C.c_int32), ("allow_inexact", C.c_bool),
                ("fam", C.c_void_p), ("fam_parity", C.c_void_p), ("faults", C.c_uint)]


class LogitBias(C.Structure):
    _fields_ = [("id", C.c_int32), ("bias", C.c_float)]


class EngineInfo(C.Structure):
    _fields_ = [("size", C.c_size_t), ("isa", C.c_int), ("n_threads", C.c_int32), ("n_ctx", C.c_int32),
                ("n_seq_max", C.c_int32), ("step_tokens", C.c_int32), ("draft_max", C.c_int32),
                ("kernels", C.c_char * 32), ("kernels_free", C.c_char * 32), ("device", C.c_char * 80)]


class Sampler(C.Structure):
    _fields_ = [("temperature", C.c_float), ("top_k", C.c_int32), ("top_p", C.c_float), ("seed", C.c_uint64),
                ("logit_bias", C.c_void_p), ("n_logit_bias", C.c_int32), ("repeat_penalty", C.c_float),
                ("repeat_last_n", C.c_int32), ("frequency_penalty", C.c_float), ("presence_penalty", C.c_float),
                ("min_p", C.c_float)]


class Request(C.Structure):
    _fields_ = [("size", C.c_size_t), ("prompt", C.POINTER(C.c_int32)), ("n_prompt", C.c_int32),
                ("sampling", Sampler), ("max_tokens", C.c_int32), ("stop_tokens", C.c_void_p),
                ("n_stop_tokens", C.c_int32), ("stop", C.c_void_p), ("n_stop", C.c_int32), ("ignore_eos", C.c_bool),
                ("no_parity", C.c_bool), ("prefill_chunk", C.c_int32), ("want_logits", C.c_bool),
                ("want_prompt_logits", C.c_bool), ("draft", C.c_void_p), ("draft_ud", C.c_void_p),
                ("draft_observe", C.c_void_p), ("on_event", C.c_void_p), ("ud", C.c_void_p), ("grammar", C.c_char_p)]


class Result(C.Structure):
    _fields_ = [("size", C.c_size_t), ("tokens", C.POINTER(C.c_int32)), ("n_tokens", C.c_int32),
                ("text", C.c_char_p), ("text_len", C.c_size_t), ("logits", C.POINTER(C.c_float)),
                ("n_logits", C.c_int32), ("logits_pos0", C.c_int32), ("finish", C.c_int), ("n_prompt", C.c_int32),
                ("n_cached", C.c_int32), ("n_drafted", C.c_int32), ("n_accepted", C.c_int32), ("n_steps", C.c_int32),
                ("prompt_ms", C.c_double), ("gen_ms", C.c_double)]


def _struct(cls, **kw):
    s = cls(size=C.sizeof(cls))
    for k, v in kw.items():
        setattr(s, k, v)
    return s


_lib = None


def lib():
    global _lib
    if _lib is None:
        L = C.CDLL(str(lib_path()))
        P = C.POINTER
        L.ls_model_load.argtypes = [P(ModelParams), P(Err)]
        L.ls_model_load.restype = C.c_void_p
        L.ls_model_free.argtypes = [C.c_void_p]
        L.ls_model_get_info.argtypes = [C.c_void_p, P(ModelInfo), P(Err)]
        L.ls_model_get_info.restype = C.c_int
        L.ls_model_tokenize.argtypes = [C.c_void_p, C.c_char_p, C.c_size_t, C.c_bool, C.c_bool, P(C.c_int32),
                                        C.c_size_t, P(C.c_size_t), P(Err)]
        L.ls_model_tokenize.restype = C.c_int
        L.ls_engine_create.argtypes = [C.c_void_p, P(EngineParams), P(Err)]
        L.ls_engine_create.restype = C.c_void_p
        L.ls_engine_free.argtypes = [C.c_void_p]
        L.ls_engine_generate.argtypes = [C.c_void_p, P(Request), P(Result), P(Err)]
        L.ls_engine_generate.restype = C.c_int
        L.ls_result_free.argtypes = [P(Result)]
        L.ls_engine_score.argtypes = [C.c_void_p, P(C.c_int32), C.c_int32, P(C.c_float), P(Err)]
        L.ls_engine_score.restype = C.c_int
        L.ls_engine_get_info.argtypes = [C.c_void_p, P(EngineInfo)]
        L.ls_engine_get_info.restype = None
        L.ls_model_token_bytes.argtypes = [C.c_void_p, C.c_int32, C.c_bool, C.c_char_p, C.c_size_t]
        L.ls_model_token_bytes.restype = C.c_size_t
        L.ls_model_is_eog.argtypes = [C.c_void_p, C.c_int32]
        L.ls_model_is_eog.restype = C.c_bool
        _lib = L
    return _lib


class Model:
    def __init__(self, path=None):
        self.L = lib()
        err = Err()
        mp = _struct(ModelParams, path=str(path or model_path()).encode())
        self.h = self.L.ls_model_load(C.byref(mp), C.byref(err))
        if not self.h:
            raise RuntimeError(err.msg.decode())
        self.info = _struct(ModelInfo)
        if self.L.ls_model_get_info(self.h, C.byref(self.info), C.byref(err)):
            raise RuntimeError(err.msg.decode())
        self.n_vocab = self.info.n_vocab

    def tokenize(self, text, add_special=True, parse_special=True):
        b = text.encode()
        cap = len(b) + 8
        out = (C.c_int32 * cap)()
        n = C.c_size_t()
        err = Err()
        rc = self.L.ls_model_tokenize(self.h, b, len(b), add_special, parse_special, out, cap, C.byref(n), C.byref(err))
        if rc:
            raise RuntimeError(err.msg.decode())
        return list(out[: n.value])

    def token_bytes(self, tid):
        """The bytes token tid stands for in generated text (special tokens: none)."""
        buf = C.create_string_buffer(256)
        n = self.L.ls_model_token_bytes(self.h, tid, False, buf, 256)
        return buf.raw[:n]

    def is_eog(self, tid):
        return bool(self.L.ls_model_is_eog(self.h, tid))

    def engine(self, n_ctx=512, threads=1, isa=-1, kernels=None):
        return Engine(self, n_ctx, threads, isa, kernels)

    def close(self):
        if self.h:
            self.L.ls_model_free(self.h)
            self.h = None


class Engine:
    def __init__(self, model, n_ctx, threads, isa, kernels=None):
        self.m = model
        err = Err()
        ep = _struct(EngineParams, n_ctx=n_ctx, n_threads=threads, isa=isa, n_seq_max=1,
                     kernels=kernels.encode() if kernels else None)
        self.h = model.L.ls_engine_create(model.h, C.byref(ep), C.byref(err))
        if not self.h:
            raise RuntimeError(err.msg.decode())

    def score(self, tokens):
        """The logits at every position of tokens (row i predicts token i + 1)."""
        n = len(tokens)
        arr = (C.c_int32 * n)(*tokens)
        out = np.empty((n, self.m.n_vocab), dtype=np.float32)
        err = Err()
        if self.m.L.ls_engine_score(self.h, arr, n, out.ctypes.data_as(C.POINTER(C.c_float)), C.byref(err)):
            raise RuntimeError(err.msg.decode())
        return out

    def greedy(self, tokens, n_gen, all_rows=False):
        """Greedy decoding: (the last prompt position's logits, the n_gen tokens); with
        all_rows, the logits of every position that chose a token (n_gen rows, row k the
        distribution token k was picked from)."""
        n = len(tokens)
        arr = (C.c_int32 * n)(*tokens)
        q = _struct(Request, prompt=C.cast(arr, C.POINTER(C.c_int32)), n_prompt=n, max_tokens=n_gen, ignore_eos=True,
                    want_logits=True)
        q.sampling.top_p = 1.0
        r = _struct(Result)
        err = Err()
        if self.m.L.ls_engine_generate(self.h, C.byref(q), C.byref(r), C.byref(err)):
            raise RuntimeError(err.msg.decode())
        try:
            assert r.logits_pos0 == n - 1 and r.n_tokens == n_gen
            rows = np.ctypeslib.as_array(r.logits, shape=(r.n_logits, self.m.n_vocab))
            return (rows[:n_gen] if all_rows else rows[0]).copy(), list(r.tokens[: r.n_tokens])
        finally:
            self.m.L.ls_result_free(C.byref(r))

    def info(self):
        i = _struct(EngineInfo)
        self.m.L.ls_engine_get_info(self.h, C.byref(i))
        return i

    def generate(self, tokens, n_gen, logit_bias=None, grammar=None, **sampling):
        """One request with the given sampler fields (Sampler's names; top_p defaults to 1)
        and logit_bias ({id: bias}, applied in the dict's order), ignoring end-of-generation
        unless a grammar (GBNF text) constrains it: (the tokens, n_gen of them without a
        grammar, and their logits: row k the distribution token k was drawn from)."""
        n = len(tokens)
        arr = (C.c_int32 * n)(*tokens)
        q = _struct(Request, prompt=C.cast(arr, C.POINTER(C.c_int32)), n_prompt=n, max_tokens=n_gen,
                    ignore_eos=grammar is None, want_logits=True, grammar=grammar.encode() if grammar else None)
        q.sampling.top_p = 1.0
        for k, v in sampling.items():
            setattr(q.sampling, k, v)
        bias = (LogitBias * max(1, len(logit_bias or {})))(*[LogitBias(i, b) for i, b in (logit_bias or {}).items()])
        if logit_bias:
            q.sampling.logit_bias = C.cast(bias, C.c_void_p)
            q.sampling.n_logit_bias = len(logit_bias)
        r = _struct(Result)
        err = Err()
        if self.m.L.ls_engine_generate(self.h, C.byref(q), C.byref(r), C.byref(err)):
            raise RuntimeError(err.msg.decode())
        try:
            k = r.n_tokens
            assert r.logits_pos0 == n - 1 and (k == n_gen or grammar and 0 < k < n_gen) and r.n_logits >= k
            rows = np.ctypeslib.as_array(r.logits, shape=(r.n_logits, self.m.n_vocab))
            return list(r.tokens[:k]), rows[:k].copy()
        finally:
            self.m.L.ls_result_free(C.byref(r))

    def close(self):
        if self.h:
            self.m.L.ls_engine_free(self.h)
            self.h = None
