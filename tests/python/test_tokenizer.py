"""lockstep's tokenizer against HF `tokenizers`, built from the same GGUF vocab and merges.

The reference is built independently of our C code: the `gguf` package reads
tokenizer.ggml.tokens / merges / token_type from the model file, and HF's BPE model
gets SmolLM2's pre-tokenizer (Sequence[Digits(individual_digits), ByteLevel(use_regex)]),
a ByteLevel decoder and the control tokens as special added tokens.

Environment: LOCKSTEP_BUILD (default build) and MODEL, both relative to the repo root.
"""
import ctypes
import os
import random
import threading
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = "models/SmolLM2-135M-Instruct.Q4_1.gguf"
SEED = 20240611
N_GENERATED = 2200


def _resolve(p: str) -> Path:
    path = Path(p)
    return path if path.is_absolute() else REPO_ROOT / path


# ---------------------------------------------------------------------------
# ctypes binding


class LsErr(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("offset", ctypes.c_uint64), ("msg", ctypes.c_char * 512)]


class DetokStream(ctypes.Structure):
    _fields_ = [("pending", ctypes.c_char * 8), ("n_pending", ctypes.c_int)]


class ChatTemplate(ctypes.Structure):
    _fields_ = [("family", ctypes.c_int), ("default_system", ctypes.c_void_p), ("tools_hermes", ctypes.c_bool),
                ("jinja", ctypes.c_void_p)]


class ChatVars(ctypes.Structure):
    _fields_ = [("enable_thinking", ctypes.c_int)]


class ChatMsg(ctypes.Structure):
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]


def _load_lib() -> ctypes.CDLL:
    # the tokenizer's and chat templates' own functions are internal: the test build exports them
    so = _resolve(os.environ.get("LOCKSTEP_BUILD", "build")) / "liblockstep_test.so"
    if not so.exists():
        pytest.fail(f"{so} not found: run `make lib` first")
    L = ctypes.CDLL(str(so))
    P, c = ctypes.POINTER, ctypes
    L.ls_tokenizer_open_file.restype = c.c_void_p
    L.ls_tokenizer_open_file.argtypes = [c.c_char_p, P(LsErr)]
    L.ls_tokenizer_free.argtypes = [c.c_void_p]
    L.ls_tokenizer_n_vocab.restype = c.c_uint32
    L.ls_tokenizer_n_vocab.argtypes = [c.c_void_p]
    for f in ("ls_tokenizer_bos", "ls_tokenizer_eos", "ls_tokenizer_eot"):
        getattr(L, f).restype = c.c_int32
        getattr(L, f).argtypes = [c.c_void_p]
    L.ls_tokenizer_is_eog.restype = c.c_bool
    L.ls_tokenizer_is_eog.argtypes = [c.c_void_p, c.c_int32]
    L.ls_tokenizer_find.restype = c.c_int32
    L.ls_tokenizer_find.argtypes = [c.c_void_p, c.c_char_p]
    L.ls_tokenize.restype = c.c_int
    L.ls_tokenize.argtypes = [c.c_void_p, c.c_char_p, c.c_size_t, c.c_bool, c.c_bool, P(c.c_int32),
                              c.c_size_t, P(c.c_size_t), P(LsErr)]
    L.ls_token_bytes.restype = c.c_size_t
    L.ls_token_bytes.argtypes = [c.c_void_p, c.c_int32, c.c_bool, c.c_char_p, c.c_size_t]
    L.ls_detok_init.argtypes = [P(DetokStream)]
    L.ls_detok_push.restype = c.c_size_t
    L.ls_detok_push.argtypes = [P(DetokStream), c.c_void_p, c.c_int32, c.c_char_p, c.c_size_t]
    L.ls_detok_flush.restype = c.c_size_t
    L.ls_detok_flush.argtypes = [P(DetokStream), c.c_char_p, c.c_size_t]
    L.ls_chat_template_detect.restype = c.c_int
    L.ls_chat_template_detect.argtypes = [c.c_char_p, c.c_size_t, P(ChatTemplate), P(LsErr)]
    L.ls_chat_template_free.argtypes = [P(ChatTemplate)]
    L.ls_chat_apply.restype = c.c_int
    L.ls_chat_apply.argtypes = [P(ChatTemplate), P(ChatMsg), c.c_size_t, c.c_bool, P(c.c_void_p), P(LsErr)]
    L.ls_chat_apply_vars.restype = c.c_int
    L.ls_chat_apply_vars.argtypes = [P(ChatTemplate), P(ChatMsg), c.c_size_t, c.c_bool, P(ChatVars), P(c.c_void_p),
                                     P(LsErr)]
    return L


_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]


class Ours:
    def __init__(self, lib, path: Path):
        self.L = lib
        err = LsErr()
        self.t = lib.ls_tokenizer_open_file(str(path).encode(), ctypes.byref(err))
        assert self.t, err.msg.decode()

    def encode(self, data, parse_special=True, add_special=False):
        b = data.encode("utf-8") if isinstance(data, str) else data
        cap = len(b) + 4
        out = (ctypes.c_int32 * cap)()
        n = ctypes.c_size_t()
        err = LsErr()
        rc = self.L.ls_tokenize(self.t, b, len(b), add_special, parse_special, out, cap, ctypes.byref(n),
                                ctypes.byref(err))
        assert rc == 0, err.msg.decode()
        return list(out[: n.value])

    def token_bytes(self, tid, special=True) -> bytes:
        n = self.L.ls_token_bytes(self.t, tid, special, None, 0)
        buf = ctypes.create_string_buffer(n + 1)
        assert self.L.ls_token_bytes(self.t, tid, special, buf, n + 1) == n
        return buf.raw[:n]

    def decode(self, ids, special=True) -> bytes:
        return b"".join(self.token_bytes(i, special) for i in ids)

    def stream(self, ids):
        """Streaming detok: yields each pushed chunk, then the flush."""
        s = DetokStream()
        self.L.ls_detok_init(ctypes.byref(s))
        buf = ctypes.create_string_buffer(4096)
        for i in ids:
            n = self.L.ls_detok_push(ctypes.byref(s), self.t, i, buf, 4096)
            yield buf.raw[:n]
        n = self.L.ls_detok_flush(ctypes.byref(s), buf, 4096)
        yield buf.raw[:n]


# ---------------------------------------------------------------------------
# the independent reference


def _read_gguf(path: Path):
    import gguf

    r = gguf.GGUFReader(str(path))

    def arr(key):
        f = r.fields[key]
        return [f.parts[i] for i in f.data]

    def scalar_str(key):
        f = r.fields.get(key)
        return None if f is None else bytes(f.parts[f.data[0]]).decode("utf-8")

    tokens = [bytes(p).decode("utf-8") for p in arr("tokenizer.ggml.tokens")]
    merges = [bytes(p).decode("utf-8") for p in arr("tokenizer.ggml.merges")]
    types = [int(p[0]) for p in arr("tokenizer.ggml.token_type")]
    return {
        "tokens": tokens,
        "merges": merges,
        "types": types,
        "pre": scalar_str("tokenizer.ggml.pre"),
        "chat_template": scalar_str("tokenizer.chat_template"),
    }


def _hf_tokenizer(meta, with_specials: bool):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    vocab = {tok: i for i, tok in enumerate(meta["tokens"])}
    merges = [tuple(m.split(" ", 1)) for m in meta["merges"]]
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tk.decoder = decoders.ByteLevel()
    if with_specials:
        tk.add_special_tokens([AddedToken(meta["tokens"][i], special=True, normalized=False)
                               for i, ty in enumerate(meta["types"]) if ty in (3, 4)])
    return tk


# ---------------------------------------------------------------------------
# the corpus

HAND_PICKED = [
    # control characters, some of which (0x04, 0x06, 0x13, 0x14, 0x16, 0x1d) have no
    # byte-level token in SmolLM2's vocabulary (found by tests/fuzz/fuzz_tokenizer.c)
    "a\x04b", "\x06", "x\x13\x14y", "\x16 hi \x1d", "\x00null\x00", "\x01\x02\x03 \x07\x08", "tab\x0bvt\x0cff",
    "", " ", "  ", "\n", "\n\n\n", " \n ", "\r\n", "\t", "\t\t x", "a  ", "a \n", "trailing   ",
    "Hello world", "Hello, world!", "  leading spaces", "multiple   spaces   here",
    "line one\nline two\r\nline three\n", "tabs\tand\ttabs", "x\n\n\ny", "   \n\n   \t  end ",
    "it's", "It's they're we've I'm you'll he'd", "IT'S THEY'RE WE'VE I'M YOU'LL HE'D",
    "don't 'LL 'S 'Re 're's", "'s's's", "quote 'single' and \"double\"", "rock'n'roll",
    "12345", "3.14159265358979", "1,000,000", "0x7fffffff", "2024-06-11T12:34:56Z",
    "123456789012345678901234567890", "v1.2.3-rc4", "a1b2c3", " 42 ", "١٢٣٤٥", "²³ ½ Ⅻ",
    "你好，世界！今天天气很好。", "日本語のテキストです。カタカナとひらがな。", "한국어 텍스트입니다.",
    "مرحبا بالعالم", "नमस्ते दुनिया", "Привет, мир! Как дела?", "Γειά σου Κόσμε",
    "Crème brûlée, naïve café, façade, Ångström, Øresund, straße", "ﬁ ligature ﬀ",
    "e\u0301 combining acute", "Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇",
    "😀 😃 😄", "👩‍👩‍👧‍👦 family", "👨🏽‍💻 coder", "🇫🇷🇩🇪🇯🇵 flags", "🏳️‍🌈", "❤️‍🔥",
    "emoji😀without spaces😃", "\u200b zero width \ufeff bom", "nbsp\u00a0here", "\u3000ideographic",
    "line\u2028sep\u2029para", "nel\u0085char", "\x0b\x0c vertical", "\x00nul\x01ctl",
    "int main(void) {\n    printf(\"hello\\n\");\n    return 0;\n}\n",
    "def f(x):\n    return x ** 2  # square\n\n\nclass A:\n    pass\n",
    '{"key": "value", "n": [1, 2, 3], "nested": {"a": null, "b": true}}',
    "for (int i = 0; i < n; ++i) { a[i] += b[i] * 2; }",
    "SELECT * FROM users WHERE id = 42;", "<html><body><p>Hi</p></body></html>",
    "https://example.com/path?query=1&x=y#frag", "user@example.com",
    "<|im_start|>user\nhi<|im_end|>", "<|im_start|>system\nYou are helpful<|im_end|>\n<|im_start|>user\nWhat?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>", "text<|endoftext|>more", "<|im_start|><|im_end|>", "<|im_start", "<|im_end|",
    "<repo_name>foo<file_sep>bar<filename>baz.py", "a<|im_end|>b<|im_end|>c", "<<|im_start|>>",
    "<jupyter_code>print(1)<jupyter_output>1<empty_output>", "  <|im_start|>  ", "\n<|im_end|>\n",
    "!!!???...,,,;;;", "---===+++", "$$$ %%% ^^^", "a.b.c", "(x)", "[[nested]]", "~~strike~~",
    "`code` **bold** _it_", "# Heading\n\n- item 1\n- item 2\n", "| a | b |\n|---|---|\n| 1 | 2 |",
    "ALLCAPS lowercase MiXeD", "CamelCaseIdentifier snake_case_identifier kebab-case",
    "a\x04b", "x\x13\x14\x16\x1dy", "\x04", "\U00050000 plane 5 \U00090001",  # bytes SmolLM2's vocab lacks
    "a" * 300, " " * 50, "\n" * 20, "ab" * 200, "1" * 100, "😀" * 30,
]

SCRIPT_WORDS = {
    "en": ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "Tokenizer", "model", "weights"],
    "fr": ["élève", "garçon", "où", "déjà", "Noël", "cœur", "français"],
    "de": ["Größe", "Straße", "Übung", "Äpfel", "schön", "Fußball"],
    "es": ["niño", "España", "¿Qué?", "¡Hola!", "corazón"],
    "zh": ["中文", "汉字", "分词器", "模型", "北京", "你好", "谢谢"],
    "ja": ["日本", "東京", "ひらがな", "カタカナ", "ありがとう", "トークン"],
    "ko": ["한국", "서울", "안녕하세요", "감사합니다", "토크나이저"],
    "ar": ["مرحبا", "العربية", "شكرا", "كتاب", "مدرسة"],
    "hi": ["नमस्ते", "हिन्दी", "भारत", "धन्यवाद", "किताब"],
    "ru": ["Привет", "Москва", "спасибо", "токенизатор", "модель"],
    "el": ["Αθήνα", "ελληνικά", "ευχαριστώ", "λόγος", "Ωμέγα"],
    "he": ["שלום", "עברית", "תודה"],
    "th": ["สวัสดี", "ภาษาไทย", "ขอบคุณ"],
    "emoji": ["😀", "🎉", "👍🏻", "👩‍💻", "🇺🇸", "🇯🇵", "❤️", "🧑‍🤝‍🧑", "🏴‍☠️", "✈️", "1️⃣"],
}

SEPARATORS = [" ", " ", " ", "  ", "\n", "\n\n", "\t", ", ", ". ", "! ", "? ", " - ", "\r\n", " \n", "'s ", "'re ",
              "'ll ", "'LL ", "'d ", "", "\u00a0", "\u3000", "... ", "; ", ": ", "/", "_"]

CODE_SNIPPETS = [
    "if (x > 0) {{ return {n}; }}", "x = [{n}, {n}, {n}]", "print(f\"{{x}} = {n}\")",
    "\"{w}\": {n},", "#define MAX_{W} {n}", "    for i in range({n}):\n        total += i\n",
    "let {w} = vec![{n}; 3];", "// {w} comment\n", "/* {w} */", "{w}->next = NULL;",
]

RANGES = [
    (0x20, 0x7E), (0x20, 0x7E), (0x20, 0x7E), (0xA0, 0xFF), (0x100, 0x17F), (0x370, 0x3FF),
    (0x400, 0x4FF), (0x590, 0x5FF), (0x600, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF),
    (0x2000, 0x206F), (0x20A0, 0x20CF), (0x2100, 0x214F), (0x2190, 0x21FF), (0x2200, 0x22FF),
    (0x2460, 0x24FF), (0x2500, 0x257F), (0x3000, 0x303F), (0x3040, 0x309F), (0x30A0, 0x30FF),
    (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xFF00, 0xFFEF), (0x1F300, 0x1F5FF), (0x1F600, 0x1F64F),
    (0x1F900, 0x1F9FF), (0x1D400, 0x1D7FF), (0x0300, 0x036F), (0x0660, 0x0669), (0x09E6, 0x09EF),
]
WHITESPACE = [" ", "\t", "\n", "\r", "\x0b", "\x0c", "\x85", "\u00a0", "\u1680", "\u2000", "\u2009",
              "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\u200b", "\ufeff"]
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<file_sep>", "<jupyter_code>"]


def _random_char(rng: random.Random) -> str:
    lo, hi = rng.choice(RANGES)
    while True:
        c = rng.randint(lo, hi)
        if not 0xD800 <= c <= 0xDFFF:
            return chr(c)


def generate_corpus(n: int, seed: int = SEED) -> list[str]:
    rng = random.Random(seed)
    out = []
    langs = list(SCRIPT_WORDS)
    for k in range(n):
        kind = k % 7
        if kind in (0, 1):  # multilingual word salad
            parts = []
            for _ in range(rng.randint(1, 12)):
                parts.append(rng.choice(SCRIPT_WORDS[rng.choice(langs)]))
                parts.append(rng.choice(SEPARATORS))
            s = "".join(parts)
            if rng.random() < 0.3:
                s = s.upper() if rng.random() < 0.5 else s.capitalize()
        elif kind == 2:  # random unicode mixes
            s = "".join(_random_char(rng) if rng.random() < 0.8 else rng.choice(WHITESPACE)
                        for _ in range(rng.randint(1, 40)))
        elif kind == 3:  # numbers
            parts = []
            for _ in range(rng.randint(1, 6)):
                r = rng.random()
                if r < 0.3:
                    parts.append(str(rng.randint(0, 10 ** rng.randint(1, 25))))
                elif r < 0.5:
                    parts.append(f"{rng.uniform(-1e6, 1e6):.{rng.randint(0, 8)}f}")
                elif r < 0.6:
                    parts.append(rng.choice(["١٢٣", "४५६", "৭৮", "²", "½", "Ⅳ", "①"]))
                else:
                    parts.append(rng.choice(SCRIPT_WORDS["en"]))
                parts.append(rng.choice([" ", "", ",", "\n", "  ", "+", "-", "x"]))
            s = "".join(parts)
        elif kind == 4:  # code
            s = "".join(rng.choice(CODE_SNIPPETS).format(n=rng.randint(0, 99999), w=rng.choice(SCRIPT_WORDS["en"]),
                                                         W=rng.choice(SCRIPT_WORDS["en"]).upper())
                        + rng.choice(["\n", "\n\n", " ", "\n    ", "\t"]) for _ in range(rng.randint(1, 5)))
        elif kind == 5:  # whitespace runs and punctuation
            s = "".join(rng.choice(WHITESPACE[:7] + ["a", "b", "!", ".", "'s", "'t", "9", "é", "中", "😀"])
                        * rng.randint(1, 4) for _ in range(rng.randint(1, 15)))
        else:  # special tokens inside text
            parts = []
            for _ in range(rng.randint(1, 6)):
                r = rng.random()
                if r < 0.35:
                    parts.append(rng.choice(SPECIALS))
                elif r < 0.45:
                    parts.append(rng.choice(SPECIALS)[:-1])  # almost a special token
                else:
                    parts.append(rng.choice(SCRIPT_WORDS[rng.choice(langs)]))
                parts.append(rng.choice(["", " ", "\n", "user\n", "assistant\n", "  "]))
            s = "".join(parts)
        out.append(s)
    return out


# ---------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module")
def model_file() -> Path:
    path = _resolve(os.environ.get("MODEL", DEFAULT_MODEL))
    if not path.exists():
        pytest.skip(f"model {path} not present (make model)")
    return path


@pytest.fixture(scope="module")
def lib():
    return _load_lib()


@pytest.fixture(scope="module")
def meta(model_file):
    return _read_gguf(model_file)


@pytest.fixture(scope="module")
def ours(lib, model_file):
    o = Ours(lib, model_file)
    yield o
    lib.ls_tokenizer_free(o.t)


@pytest.fixture(scope="module")
def hf(meta):
    assert meta["pre"] == "smollm", "this reference is SmolLM2's pre-tokenizer"
    return _hf_tokenizer(meta, with_specials=True)


@pytest.fixture(scope="module")
def hf_plain(meta):
    return _hf_tokenizer(meta, with_specials=False)


@pytest.fixture(scope="module")
def corpus():
    return HAND_PICKED + generate_corpus(N_GENERATED)


# ---------------------------------------------------------------------------
# tests


def _compare(ours_fn, hf_tok, corpus):
    mismatches = []
    for s in corpus:
        a = ours_fn(s)
        b = hf_tok.encode(s, add_special_tokens=False).ids
        if a != b:
            mismatches.append((s, a, b))
    for s, a, b in mismatches[:20]:
        print(f"MISMATCH {s!r}\n  ours: {a}\n  hf:   {b}")
    return mismatches


def test_matches_hf_parse_special(ours, hf, corpus):
    mm = _compare(lambda s: ours.encode(s, parse_special=True), hf, corpus)
    print(f"parse_special=true: {len(corpus)} strings, {len(mm)} mismatches")
    assert len(corpus) >= 2000
    assert not mm, f"{len(mm)} of {len(corpus)} strings differ (first: {mm[0][0]!r})"


def test_matches_hf_plain_text(ours, hf_plain, corpus):
    mm = _compare(lambda s: ours.encode(s, parse_special=False), hf_plain, corpus)
    print(f"parse_special=false: {len(corpus)} strings, {len(mm)} mismatches")
    assert not mm, f"{len(mm)} of {len(corpus)} strings differ (first: {mm[0][0]!r})"


def test_add_special_smollm(ours):
    # SmolLM2: add_bos_token false, no add_eos_token key -> add_special adds nothing
    assert ours.encode("Hello", add_special=True) == ours.encode("Hello")
    L = ours.L
    assert L.ls_tokenizer_bos(ours.t) == 1 and L.ls_tokenizer_eos(ours.t) == 2
    im_end = L.ls_tokenizer_find(ours.t, b"<|im_end|>")
    assert im_end == 2 and L.ls_tokenizer_eot(ours.t) == im_end
    assert L.ls_tokenizer_is_eog(ours.t, im_end)
    assert L.ls_tokenizer_is_eog(ours.t, L.ls_tokenizer_find(ours.t, b"<|endoftext|>"))
    assert not L.ls_tokenizer_is_eog(ours.t, L.ls_tokenizer_find(ours.t, b"<|im_start|>"))
    assert not L.ls_tokenizer_is_eog(ours.t, ours.encode("Hello")[0])
    assert not L.ls_tokenizer_is_eog(ours.t, -1) and not L.ls_tokenizer_is_eog(ours.t, 10**8)


def test_round_trip(ours, hf, meta, corpus):
    # bytes with no token (SmolLM2 lacks e.g. 0x04) are left out, as HF does: skip those strings
    missing = bytes(b for b in range(256) if _byte_token(meta, b) is None)
    skipped = 0
    for s in corpus:
        if any(b in missing for b in s.encode("utf-8")):
            skipped += 1
            continue
        ids = ours.encode(s, parse_special=True)
        assert ours.decode(ids, special=True) == s.encode("utf-8"), repr(s)
        assert ours.decode(ids, special=True).decode("utf-8") == hf.decode(ids, skip_special_tokens=False)
        ids = ours.encode(s, parse_special=False)
        assert ours.decode(ids, special=False) == s.encode("utf-8"), repr(s)
    assert skipped < 50


def test_control_tokens_hidden_without_special(ours):
    ids = ours.encode("<|im_start|>user\nhi<|im_end|>\n")
    assert ids[0] == 1
    assert ours.decode(ids, special=False) == b"user\nhi\n"
    assert b"".join(ours.stream(ids)) == b"user\nhi\n"


def _bytes_to_unicode() -> dict:
    # GPT-2 bytes_to_unicode, straight from its definition
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for x in range(256):
        if x not in bs:
            bs.append(x)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, cs))


def _byte_token(meta, b: int):
    """The token of byte b, or None when the vocabulary has none."""
    try:
        return meta["tokens"].index(chr(_bytes_to_unicode()[b]))
    except ValueError:
        return None


def test_invalid_utf8(ours, hf_plain, meta):
    """Invalid bytes: each is a piece of its own (its byte token, or U+FFFD's tokens
    when the vocabulary has no token for the byte); the valid runs between them are
    tokenized independently.  Expected ids come from HF on the valid runs (Python's
    surrogateescape marks exactly the invalid bytes)."""
    fffd = hf_plain.encode("\ufffd", add_special_tokens=False).ids
    rng = random.Random(SEED + 1)
    cases = [b"\xff", b"abc\xffdef", b"\xe2\x82", b"x\xe2\x82 y", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80",
             b"caf\xc3", b"\x80\x80\x80", "héllo".encode() + b"\xfe" + " wörld 123".encode(), b"  \xff  "]
    for _ in range(300):
        parts = [rng.choice(["hello", " world", "😀", "中文", " 12", "\n", "  ", "é"]).encode() if rng.random() < 0.6
                 else bytes([rng.randint(0x80, 0xFF)]) for _ in range(rng.randint(1, 8))]
        cases.append(b"".join(parts))
    byte_tok = {}
    for data in cases:
        expect = []
        run = []
        for ch in data.decode("utf-8", "surrogateescape"):
            if 0xDC80 <= ord(ch) <= 0xDCFF:
                if run:
                    expect += hf_plain.encode("".join(run), add_special_tokens=False).ids
                    run = []
                b = ord(ch) - 0xDC00
                if b not in byte_tok:
                    byte_tok[b] = _byte_token(meta, b)
                expect += [byte_tok[b]] if byte_tok[b] is not None else fffd
            else:
                run.append(ch)
        if run:
            expect += hf_plain.encode("".join(run), add_special_tokens=False).ids
        got = ours.encode(data, parse_special=False)
        assert got == expect, f"{data!r}: ours {got} expected {expect}"
        if all(byte_tok.get(b) is not None for b in data if b >= 0x80):
            assert ours.decode(got) == data


def test_streaming_detok_never_splits_utf8(ours, meta):
    texts = ["👩‍👩‍👧‍👦 family 🇫🇷🇩🇪 flags ❤️‍🔥", "日本語のテキスト 😀😃😄", "Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o", "🧑‍🤝‍🧑" * 5]
    split_somewhere = False
    for s in texts:
        ids = ours.encode(s)
        chunks = list(ours.stream(ids))
        for c in chunks:
            c.decode("utf-8")  # every chunk is complete UTF-8
        assert b"".join(chunks) == s.encode()
        # at least one token of these strings is part of a multi-byte char
        for i in ids:
            try:
                ours.token_bytes(i).decode("utf-8")
            except UnicodeDecodeError:
                split_somewhere = True
    assert split_somewhere
    # an emoji pushed one byte token at a time
    ids = [_byte_token(meta, b) for b in "😀".encode()]
    chunks = list(ours.stream(ids))
    assert chunks == [b"", b"", b"", "😀".encode(), b""]


def test_streaming_detok_matches_python_replace(ours, meta):
    """Random byte-token sequences: the stream equals bytes.decode('utf-8', 'replace')."""
    rng = random.Random(SEED + 2)
    toks = {b: _byte_token(meta, b) for b in range(256)}
    toks = {b: i for b, i in toks.items() if i is not None}
    interesting = [0x41, 0x80, 0xBF, 0xC2, 0xE0, 0xE2, 0xED, 0xA0, 0x9F, 0xF0, 0xF3, 0xF4, 0x90, 0x8F, 0x82]
    for _ in range(500):
        data = bytes(rng.choice(interesting) if rng.random() < 0.7 else rng.choice(list(toks))
                     for _ in range(rng.randint(1, 12)))
        data = bytes(b for b in data if b in toks)
        chunks = list(ours.stream([toks[b] for b in data]))
        for c in chunks:
            c.decode("utf-8")
        assert b"".join(chunks).decode("utf-8") == data.decode("utf-8", "replace"), data


def test_threads_share_one_tokenizer(ours, corpus):
    expected = [ours.encode(s) for s in corpus[:400]]
    errors = []

    def work(k):
        for j in range(k, 400, 3):
            if ours.encode(corpus[j]) != expected[j]:
                errors.append(j)

    ths = [threading.Thread(target=work, args=(k % 3,)) for k in range(8)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    assert not errors


def test_speed_10kb(ours, corpus):
    text = "\n".join(corpus)[:10000]
    assert len(text.encode()) >= 10000
    ours.encode(text)
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        ids = ours.encode(text)
        times.append(time.perf_counter() - t0)
    best = min(times) * 1e3
    print(f"tokenize {len(text.encode())} bytes -> {len(ids)} tokens: {best:.2f} ms")
    assert best < 10.0


def test_buffer_too_small(ours):
    L = ours.L
    b = "hello world, how are you".encode()
    out = (ctypes.c_int32 * 2)()
    n = ctypes.c_size_t()
    err = LsErr()
    rc = L.ls_tokenize(ours.t, b, len(b), False, True, out, 2, ctypes.byref(n), ctypes.byref(err))
    full = ours.encode(b)
    assert rc == 6 and n.value == len(full) and list(out) == full[:2]


# ---------------------------------------------------------------------------
# chat template: our rendering vs jinja2 rendering the GGUF's template


def _jinja_render(src, messages, add_generation_prompt, **variables):
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(src).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                       bos_token="", eos_token="<|im_end|>", **variables)


# enable_thinking: ls_chat_vars's (-1: not passed, 0: false, 1: true)
def _ours_render(lib, src: str, messages, add_generation_prompt, enable_thinking=-1):
    t = ChatTemplate()
    err = LsErr()
    b = src.encode()
    assert lib.ls_chat_template_detect(b, len(b), ctypes.byref(t), ctypes.byref(err)) == 0, err.msg.decode()
    try:
        arr = (ChatMsg * max(1, len(messages)))()
        for i, m in enumerate(messages):
            arr[i].role = m["role"].encode()
            arr[i].content = m["content"].encode()
        out = ctypes.c_void_p()
        if enable_thinking == -1:
            rc = lib.ls_chat_apply(ctypes.byref(t), arr, len(messages), add_generation_prompt, ctypes.byref(out),
                                   ctypes.byref(err))
        else:
            rc = lib.ls_chat_apply_vars(ctypes.byref(t), arr, len(messages), add_generation_prompt,
                                        ctypes.byref(ChatVars(enable_thinking)), ctypes.byref(out), ctypes.byref(err))
        assert rc == 0, err.msg.decode()
        s = ctypes.string_at(out.value).decode()
        _libc.free(out)
        return t.family, s
    finally:
        lib.ls_chat_template_free(ctypes.byref(t))


CONVERSATIONS = [
    [],
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Tell me a joke.\n\nA short one."}],
    [{"role": "system", "content": ""}, {"role": "user", "content": "  spaced  "}],
    [{"role": "assistant", "content": "I start."}, {"role": "user", "content": "ok 😀"}],
]

# A Qwen2.5-style ChatML template: default system prompt in an else branch, with
# the newline written as a Jinja escape (not a literal newline as in SmolLM2's).
QWEN_STYLE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}{%- if not (message.role == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def test_chat_smollm2_matches_jinja(lib, meta):
    src = meta["chat_template"]
    assert src and "<|im_start|>" in src
    for conv in CONVERSATIONS:
        for gen in (False, True):
            family, got = _ours_render(lib, src, conv, gen)
            assert family == 1  # LS_CHAT_CHATML
            assert got == _jinja_render(src, conv, gen), (conv, gen)


def test_chat_qwen_style_matches_jinja(lib):
    for conv in CONVERSATIONS[1:]:  # Qwen's template writes its system prompt even with no messages
        for gen in (False, True):
            _, got = _ours_render(lib, QWEN_STYLE, conv, gen)
            assert got == _jinja_render(QWEN_STYLE, conv, gen), (conv, gen)


# ---------------------------------------------------------------------------
# the other pre-tokenizers (llama3, qwen2, gpt2) on SmolLM2's vocabulary, through
# ls_tokenizer_create, against HF with the same regex


class GgufStr(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint64), ("ptr", ctypes.c_char_p)]


class TokParams(ctypes.Structure):
    _fields_ = [("n_vocab", ctypes.c_uint32), ("tokens", ctypes.POINTER(GgufStr)),
                ("token_types", ctypes.POINTER(ctypes.c_int32)), ("n_merges", ctypes.c_uint32),
                ("merges", ctypes.POINTER(GgufStr)), ("pre", ctypes.c_char_p), ("bos_id", ctypes.c_int32),
                ("eos_id", ctypes.c_int32), ("eot_id", ctypes.c_int32), ("add_bos", ctypes.c_bool),
                ("add_eos", ctypes.c_bool), ("model", ctypes.c_int), ("scores", ctypes.POINTER(ctypes.c_float)),
                ("unk_id", ctypes.c_int32), ("add_space_prefix", ctypes.c_bool)]


def _gstrs(strs):
    enc = [x.encode("utf-8") for x in strs]
    arr = (GgufStr * len(enc))()
    for i, b in enumerate(enc):
        arr[i].len = len(b)
        arr[i].ptr = b
    return arr, enc  # keep enc alive


HF_REGEX = {
    "gpt2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    "llama3": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}


@pytest.mark.parametrize("pre", ["gpt2", "llama3", "qwen2"])
def test_other_pretokenizers_match_hf(lib, meta, corpus, pre):
    from tokenizers import AddedToken, Regex, Tokenizer, models, pre_tokenizers

    lib.ls_tokenizer_create.restype = ctypes.c_void_p
    lib.ls_tokenizer_create.argtypes = [ctypes.POINTER(TokParams), ctypes.POINTER(LsErr)]
    toks, keep1 = _gstrs(meta["tokens"])
    merges, keep2 = _gstrs(meta["merges"])
    types = (ctypes.c_int32 * len(meta["types"]))(*meta["types"])
    p = TokParams(len(meta["tokens"]), toks, types, len(meta["merges"]), merges, pre.encode(), -1, -1, -1, False,
                  False)
    err = LsErr()
    t = lib.ls_tokenizer_create(ctypes.byref(p), ctypes.byref(err))
    assert t, err.msg.decode()
    o = Ours.__new__(Ours)
    o.L, o.t = lib, t

    vocab = {tok: i for i, tok in enumerate(meta["tokens"])}
    hf = Tokenizer(models.BPE(vocab=vocab, merges=[tuple(m.split(" ", 1)) for m in meta["merges"]],
                              ignore_merges=(pre == "llama3")))
    hf.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(HF_REGEX[pre]), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    hf.add_special_tokens([AddedToken(meta["tokens"][i], special=True, normalized=False)
                           for i, ty in enumerate(meta["types"]) if ty in (3, 4)])
    try:
        mm = _compare(lambda s: o.encode(s, parse_special=True), hf, corpus)
        print(f"{pre}: {len(corpus)} strings, {len(mm)} mismatches")
        assert not mm, f"{len(mm)} of {len(corpus)} strings differ (first: {mm[0][0]!r})"
    finally:
        lib.ls_tokenizer_free(t)
