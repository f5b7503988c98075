"""ctypes bindings to build/liblockstep.so for the Python reference tests."""
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
    _fields_ = [("path", C.c_char_p), ("chat_template", C.c_char_p)]


class CtxParams(C.Structure):
    """ls_ctx_params (src/model/model.h): keep in step with the C struct."""
    _fields_ = [("n_ctx", C.c_int32), ("n_batch", C.c_int32), ("n_threads", C.c_int32), ("isa", C.c_int32),
                ("layers", C.c_void_p), ("n_layers", C.c_int32), ("pool", C.c_void_p)]


class HParams(C.Structure):
    _fields_ = [("arch", C.c_char * 32), ("name", C.c_char * 128)] + [
        (n, C.c_uint32)
        for n in ("n_vocab", "n_ctx_train", "n_embd", "n_layer", "n_head", "n_head_kv", "n_ff", "head_dim", "rope_dim")
    ] + [("rope_base", C.c_float), ("rope_freq_scale", C.c_float), ("norm_eps", C.c_float), ("tied_output", C.c_bool)]


_lib = None


def lib():
    global _lib
    if _lib is None:
        L = C.CDLL(str(lib_path()))
        L.ls_model_load.argtypes = [ModelParams, C.POINTER(Err)]
        L.ls_model_load.restype = C.c_void_p
        L.ls_model_free.argtypes = [C.c_void_p]
        L.ls_model_hparams.argtypes = [C.c_void_p]
        L.ls_model_hparams.restype = C.POINTER(HParams)
        L.ls_model_tokenizer.argtypes = [C.c_void_p]
        L.ls_model_tokenizer.restype = C.c_void_p
        L.ls_ctx_create.argtypes = [C.c_void_p, CtxParams, C.POINTER(Err)]
        L.ls_ctx_create.restype = C.c_void_p
        L.ls_ctx_free.argtypes = [C.c_void_p]
        L.ls_ctx_eval.argtypes = [C.c_void_p, C.POINTER(C.c_int32), C.c_int32, C.c_int32,
                                  C.POINTER(C.c_float), C.c_bool, C.POINTER(Err)]
        L.ls_ctx_eval.restype = C.c_int
        L.ls_tokenize.argtypes = [C.c_void_p, C.c_char_p, C.c_size_t, C.c_bool, C.c_bool,
                                  C.POINTER(C.c_int32), C.c_size_t, C.POINTER(C.c_size_t), C.POINTER(Err)]
        L.ls_tokenize.restype = C.c_int
        L.ls_ctx_params_sizeof.restype = C.c_size_t
        if L.ls_ctx_params_sizeof() != C.sizeof(CtxParams):
            raise RuntimeError("tests/python/ls_ffi.py: CtxParams does not match ls_ctx_params in src/model/model.h")
        _lib = L
    return _lib


class Model:
    def __init__(self, path=None):
        self.L = lib()
        err = Err()
        self.h = self.L.ls_model_load(ModelParams(str(path or model_path()).encode(), None), C.byref(err))
        if not self.h:
            raise RuntimeError(err.msg.decode())
        self.hp = self.L.ls_model_hparams(self.h).contents
        self.n_vocab = self.hp.n_vocab

    def tokenize(self, text, add_special=True, parse_special=True):
        b = text.encode()
        cap = len(b) + 8
        out = (C.c_int32 * cap)()
        n = C.c_size_t()
        err = Err()
        rc = self.L.ls_tokenize(self.L.ls_model_tokenizer(self.h), b, len(b), add_special, parse_special, out,
                                cap, C.byref(n), C.byref(err))
        if rc:
            raise RuntimeError(err.msg.decode())
        return list(out[: n.value])

    def context(self, n_ctx=512, n_batch=0, threads=1, isa=-1):
        return Ctx(self, n_ctx, n_batch, threads, isa)

    def close(self):
        if self.h:
            self.L.ls_model_free(self.h)
            self.h = None


class Ctx:
    def __init__(self, model, n_ctx, n_batch, threads, isa):
        self.m = model
        err = Err()
        self.h = model.L.ls_ctx_create(model.h, CtxParams(n_ctx, n_batch, threads, isa), C.byref(err))
        if not self.h:
            raise RuntimeError(err.msg.decode())
        self.pos = 0

    def eval(self, tokens, all_logits=False):
        """Appends tokens at the current position; returns logits (last row, or all rows)."""
        n = len(tokens)
        arr = (C.c_int32 * n)(*tokens)
        rows = n if all_logits else 1
        out = np.empty((rows, self.m.n_vocab), dtype=np.float32)
        err = Err()
        rc = self.m.L.ls_ctx_eval(self.h, arr, n, self.pos, out.ctypes.data_as(C.POINTER(C.c_float)), all_logits,
                                  C.byref(err))
        if rc:
            raise RuntimeError(err.msg.decode())
        self.pos += n
        return out if all_logits else out[0]

    def close(self):
        if self.h:
            self.m.L.ls_ctx_free(self.h)
            self.h = None
