"""The Jinja engine (src/tokenizer/jinja.c) against Python's jinja2 on real chat templates.

tests/python/data/templates/ holds published chat templates (README.md there names each
file's source).  Every template renders every conversation below, with and without the
generation prompt, in jinja2 configured as transformers' apply_chat_template configures it
(ImmutableSandboxedEnvironment, trim_blocks and lstrip_blocks on, the loopcontrols
extension, tojson = json.dumps(ensure_ascii=False, ...), raise_exception, strftime_now)
and in lockstep's engine: the two outputs must be byte-identical, and where jinja2 raises
lockstep must return an error.
"""
import ctypes
import json
from datetime import datetime
from pathlib import Path

import pytest

TEMPLATES = Path(__file__).parent / "data" / "templates"
TEMPLATE_FILES = sorted(p.name for p in TEMPLATES.glob("*.jinja"))


class LsErr(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("offset", ctypes.c_uint64), ("msg", ctypes.c_char * 512)]


_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]


def _setup(lib):
    lib.ls_jinja_render_json.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                                         ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(LsErr)]
    lib.ls_jinja_render_json.restype = ctypes.c_int


def ours(lib, src: str, variables: dict):
    """(True, text) or (False, error message)"""
    _setup(lib)
    b = src.encode()
    out = ctypes.c_void_p()
    err = LsErr()
    rc = lib.ls_jinja_render_json(b, len(b), json.dumps(variables).encode(), ctypes.byref(out), ctypes.byref(err))
    if rc != 0:
        return False, err.msg.decode(errors="replace")
    s = ctypes.string_at(out.value).decode()
    _libc.free(out)
    return True, s


def reference(src: str, variables: dict):
    """(True, text) or (False, error message), as transformers renders it"""
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return True, env.from_string(src).render(**variables)
    except Exception as e:  # noqa: BLE001 -- any failure of the reference counts as "raises"
        return False, f"{type(e).__name__}: {e}"


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "description": "forecast days"},
        "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["city"]}}}
SEARCH_TOOL = {"type": "function", "function": {
    "name": "search", "description": "Search the web — returns snippets.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}

CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}
CALL_STR = {"id": "call_2", "type": "function", "function": {"name": "search", "arguments": "{\"query\": \"news\"}"}}

# (name, variables): conversations in the shapes the OpenAI-style chat API sends
CONVERSATIONS = [
    ("user", {"messages": [{"role": "user", "content": "What is the capital of France?"}]}),
    ("system", {"messages": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"}]}),
    ("multi_turn", {"messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke.\n\nA short one."}]}),
    ("odd_text", {"messages": [
        {"role": "user", "content": "  spaced  \t"}, {"role": "assistant", "content": "quotes ' \" and \\ back"},
        {"role": "user", "content": "ünïcödé 😀 {{ not jinja }} {% nor this %} <|im_end|>"}]}),
    ("empty_system", {"messages": [{"role": "system", "content": ""}, {"role": "user", "content": "x"}]}),
    ("assistant_first", {"messages": [{"role": "assistant", "content": "I start."},
                                      {"role": "user", "content": "ok"}]}),
    ("no_messages", {"messages": []}),
    ("content_parts", {"messages": [
        {"role": "system", "content": [{"type": "text", "text": "Sys part."}]},
        {"role": "user", "content": [{"type": "text", "text": "Part one."}, {"type": "text", "text": "Part two."}]}]}),
    ("tools", {"tools": [WEATHER_TOOL, SEARCH_TOOL], "messages": [
        {"role": "user", "content": "Weather in Paris?"}]}),
    ("tools_system", {"tools": [WEATHER_TOOL], "messages": [
        {"role": "system", "content": "You can call tools."}, {"role": "user", "content": "Weather in Paris?"}]}),
    ("tool_call_and_result", {"tools": [WEATHER_TOOL, SEARCH_TOOL], "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temp\": 21}"},
        {"role": "assistant", "content": "It is 21 degrees."},
        {"role": "user", "content": "And the news?"}]}),
    ("parallel_calls", {"tools": [WEATHER_TOOL, SEARCH_TOOL], "messages": [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather and news"},
        {"role": "assistant", "content": None, "tool_calls": [CALL, CALL_STR]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_2", "name": "search", "content": "nothing new"}]}),
    ("reasoning", {"messages": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "Two plus two is four."},
        {"role": "user", "content": "and 3+3?"}]}),
    ("think_in_content", {"messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<think>\nA greeting.\n</think>\n\nHello!"},
        {"role": "user", "content": "Bye"},
        {"role": "assistant", "content": "<think>short</think>Goodbye."}]}),
    ("thinking_off", {"enable_thinking": False, "messages": [{"role": "user", "content": "Quick answer: 1+1?"}]}),
    ("thinking_on", {"enable_thinking": True, "messages": [
        {"role": "system", "content": "Think first."}, {"role": "user", "content": "Why is the sky blue?"}]}),
]
BOS_EOS = {"bos_token": "<s>", "eos_token": "</s>"}


def _cases():
    for t in TEMPLATE_FILES:
        yield t


@pytest.mark.parametrize("name", TEMPLATE_FILES)
def test_template_matches_jinja2(lib, name):
    pytest.importorskip("jinja2")
    src = (TEMPLATES / name).read_text()
    rendered = failed = 0
    problems = []
    for conv_name, conv in CONVERSATIONS:
        for gen in (False, True):
            variables = dict(BOS_EOS, add_generation_prompt=gen, **conv)
            ok_ref, ref = reference(src, variables)
            ok, got = ours(lib, src, variables)
            if ok_ref:
                rendered += 1
                if not ok:
                    problems.append(f"{conv_name} gen={gen}: lockstep failed ({got}), jinja2 rendered")
                elif got != ref:
                    i = next((k for k in range(min(len(got), len(ref))) if got[k] != ref[k]), min(len(got), len(ref)))
                    problems.append(f"{conv_name} gen={gen}: differs at {i}: ours {got[max(0, i - 40):i + 40]!r} "
                                    f"jinja2 {ref[max(0, i - 40):i + 40]!r}")
            else:
                failed += 1
                if ok:
                    problems.append(f"{conv_name} gen={gen}: jinja2 raised ({ref}), lockstep rendered")
    assert not problems, "\n".join(problems)
    assert rendered > 0, "jinja2 rendered none of the conversations"
