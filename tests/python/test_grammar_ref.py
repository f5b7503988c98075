"""The grammar matcher (src/sample/grammar.c) and the JSON Schema converter
(src/sample/json_schema.c) against independent references, through ctypes on
liblockstep_test.so:

- the json_object grammar accepts exactly the strings Python's json module parses to an
  object (NaN/Infinity refused, as JSON has them not), over valid JSON texts and their
  one-character mutations (whitespace kept to what the grammar allows: none, or one
  space after ',' and ':' -- the grammar bounds whitespace so a model cannot pad forever);
- every string a converted schema's grammar accepts is valid under the schema by the
  `jsonschema` package, and the schema's canonical instances are accepted (not vacuous).
"""
import ctypes as C
import json
import random

import pytest

jsonschema = pytest.importorskip("jsonschema")


class Err(C.Structure):
    _fields_ = [("code", C.c_int), ("offset", C.c_uint64), ("msg", C.c_char * 512)]


@pytest.fixture(scope="module")
def G(lib):
    lib.ls_grammar_compile.argtypes = [C.c_char_p, C.c_size_t, C.POINTER(Err)]
    lib.ls_grammar_compile.restype = C.c_void_p
    lib.ls_grammar_free.argtypes = [C.c_void_p]
    lib.ls_grammar_matches.argtypes = [C.c_void_p, C.c_char_p, C.c_size_t]
    lib.ls_grammar_matches.restype = C.c_bool
    lib.ls_json_schema_to_gbnf.argtypes = [C.c_char_p, C.c_size_t, C.POINTER(Err)]
    lib.ls_json_schema_to_gbnf.restype = C.c_void_p
    lib.ls_json_object_gbnf.restype = C.c_char_p
    lib.free = C.CDLL(None).free
    lib.free.argtypes = [C.c_void_p]
    return lib


def compile_(G, text: bytes):
    e = Err()
    g = G.ls_grammar_compile(text, len(text), C.byref(e))
    assert g, e.msg
    return g


def matches(G, g, s: str) -> bool:
    b = s.encode()
    return G.ls_grammar_matches(g, b, len(b))


def rand_value(r: random.Random, depth=0):
    k = r.randrange(9 if depth < 3 else 6)
    if k == 0: return None
    if k == 1: return r.random() < 0.5
    if k == 2: return r.randrange(-1000, 1000)
    if k == 3: return r.choice([0.5, -2.25e-3, 1e21, 3.0, -0.0])
    if k in (4, 5): return "".join(r.choice('ab "\\é\n/\t\u2028x') for _ in range(r.randrange(5)))
    if k in (6, 7): return {rand_value(r, 9) if False else "k%d" % r.randrange(4): rand_value(r, depth + 1) for _ in range(r.randrange(4))}
    return [rand_value(r, depth + 1) for _ in range(r.randrange(4))]


def py_object(s: str) -> bool:
    def bad(_):
        raise ValueError("constant")
    try:
        return isinstance(json.loads(s, parse_constant=bad), dict)
    except ValueError:
        return False


MUT = list('{}[]",:0123456789.eE+-abtrufnl\\é') + ["\x01"]


def test_json_object_grammar_agrees_with_python_json(G):
    g = compile_(G, G.ls_json_object_gbnf())
    r = random.Random(5)
    agree = accepted = 0
    try:
        for i in range(600):
            v = {"k%d" % j: rand_value(r) for j in range(r.randrange(4))} if i % 4 else rand_value(r)
            sep = (", ", ": ") if r.random() < 0.5 else (",", ":")
            s = json.dumps(v, separators=sep, ensure_ascii=r.random() < 0.3)
            cands = [s]
            for _ in range(4):
                p = r.randrange(len(s) + 1)
                op = r.randrange(3)
                cands.append(s[:p] + r.choice(MUT) + s[p + (op == 1):] if op < 2 else s[:p] + s[p + 1:])
            for c in cands:
                want = py_object(c)
                got = matches(G, g, c)
                assert got == want, (c, want, got)
                agree += 1
                accepted += got
    finally:
        G.ls_grammar_free(g)
    assert accepted > 300 and agree - accepted > 300, (agree, accepted)


SCHEMAS = [
    ({"type": "object", "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 4},
                                       "age": {"type": "integer"}, "ok": {"type": "boolean"}},
      "required": ["name", "ok"], "additionalProperties": False},
     [{"name": "ab", "ok": True}, {"name": "abcd", "age": -3, "ok": False}]),
    ({"type": "array", "items": {"enum": ["x", 2, None, {"a": [1]}]}, "minItems": 1, "maxItems": 3},
     [["x"], [2, None, {"a": [1]}]]),
    ({"$defs": {"t": {"type": "object", "properties": {"v": {"type": "number"},
                                                       "kids": {"type": "array", "items": {"$ref": "#/$defs/t"}}},
                      "required": ["v"]}}, "$ref": "#/$defs/t"},
     [{"v": 1}, {"v": 1.5, "kids": [{"v": -2}, {"v": 3, "kids": []}]}]),
    ({"anyOf": [{"type": "string", "maxLength": 2}, {"type": "array", "prefixItems": [{"type": "null"}, {"const": "c"}],
                                                    "items": False}]},
     ["", "ab", [None, "c"], [None], []]),
    ({"type": "object", "additionalProperties": {"type": ["integer", "null"]}}, [{}, {"a": 1, "b": None}]),
]


@pytest.mark.parametrize("case", range(len(SCHEMAS)))
def test_json_schema_grammar_is_sound_under_jsonschema(G, case):
    schema, canon = SCHEMAS[case]
    e = Err()
    text = json.dumps(schema).encode()
    p = G.ls_json_schema_to_gbnf(text, len(text), C.byref(e))
    assert p, e.msg
    gbnf = C.string_at(p)
    G.free(p)
    g = compile_(G, gbnf)
    val = jsonschema.Draft202012Validator(schema)
    r = random.Random(case)
    n_ok = 0
    try:
        for c in canon:
            for sep in ((",", ":"), (", ", ": ")):
                assert matches(G, g, json.dumps(c, separators=sep, ensure_ascii=False)), (c, gbnf.decode())
        pool = [json.dumps(c) for c in canon]
        for _ in range(400):
            v = rand_value(r) if r.random() < 0.5 else json.loads(r.choice(pool))
            s = json.dumps(v, separators=(", ", ": "))
            for c in (s, s[: r.randrange(len(s) + 1)] + r.choice(MUT) + s[r.randrange(len(s) + 1):]):
                if matches(G, g, c):
                    n_ok += 1
                    assert val.is_valid(json.loads(c)), (c, gbnf.decode())
    finally:
        G.ls_grammar_free(g)
    assert n_ok > 0


def test_json_schema_grammar_refuses_each_missing_required_key(G):
    """A schema with several required keys (and optional ones between them): the full
    instance and every instance with only optional keys dropped are accepted; every
    instance that misses any one required key -- alone, or with any optional keys also
    dropped -- is refused by the grammar, as jsonschema refuses it."""
    import itertools
    props = {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"},
             "d": {"type": "null"}, "e": {"type": "array", "items": {"type": "integer"}}}
    required = ["a", "c", "d", "e"]
    schema = {"type": "object", "properties": props, "required": required}
    full = {"a": 1, "b": "x", "c": True, "d": None, "e": [1, 2]}
    e = Err()
    text = json.dumps(schema).encode()
    p = G.ls_json_schema_to_gbnf(text, len(text), C.byref(e))
    assert p, e.msg
    gbnf = C.string_at(p)
    G.free(p)
    g = compile_(G, gbnf)
    val = jsonschema.Draft202012Validator(schema)
    optional = [k for k in props if k not in required]
    try:
        for sep in ((",", ":"), (", ", ": ")):
            for drop_opt in range(len(optional) + 1):
                for opt in itertools.combinations(optional, drop_opt):
                    base = {k: v for k, v in full.items() if k not in opt}
                    assert val.is_valid(base) and matches(G, g, json.dumps(base, separators=sep)), base
                    for miss in required:  # each omission of a required key
                        inst = {k: v for k, v in base.items() if k != miss}
                        assert not val.is_valid(inst)
                        assert not matches(G, g, json.dumps(inst, separators=sep)), (miss, inst, gbnf.decode())
            for n_miss in range(2, len(required) + 1):  # and several at once
                for miss in itertools.combinations(required, n_miss):
                    inst = {k: v for k, v in full.items() if k not in miss}
                    assert not matches(G, g, json.dumps(inst, separators=sep)), (miss, inst)
    finally:
        G.ls_grammar_free(g)
