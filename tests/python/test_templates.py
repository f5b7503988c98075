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


# Constructs one at a time (whitespace control, scoping, slices, numbers, filters, tests,
# methods, macros, loop controls), each against jinja2.
FEATURES = [
    ("a\n  {% if true %}\n  x\n  {% endif %}\nb\n", {}),
    ("{%- for i in range(3) -%} {{ i }}{{ ',' if not loop.last }} {%- endfor %}", {}),
    ("x  {%+ if true %}y{% endif +%}\nz {#- c -#} w", {}),
    ("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}",
     {"messages": [1, 2, 3]}),
    ("{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = i %}{% endfor %}{{ x }}", {}),
    ("{{ 'abc'[::-1] }}|{{ [1,2,3][-2:] }}|{{ 'héllo'[1:3] }}|{{ 'héllo'[-1] }}|{{ 7 // 2 }}|{{ -7 % 3 }}|{{ 1/4 }}"
     "|{{ 2**10 }}|{{ -7 // 2 }}|{{ 10 / 5 }}|{{ 3 * 'ab' }}|{{ [0] * 3 }}", {}),
    ("{{ x|tojson }}|{{ x|tojson(indent=2) }}|{{ x|tojson(sort_keys=true) }}|{{ x|tojson(separators=(',', ':')) }}"
     "|{{ 'é\u0001\u007f'|tojson }}|{{ 'é😀'|tojson(ensure_ascii=true) }}",
     {"x": {"b": [1, "é\n\t\"\\"], "a": None, "c": True, "d": 2.5, "e": {}, "f": []}}),
    ("{{ '  a  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' x  y '.split() }}"
     "|{{ 'a b c'.split(' ', 1) }}|{{ 'Hello'.startswith(('x','He')) }}|{{ 'aXbX'.replace('X','-') }}"
     "|{{ 'ab'.replace('', '.') }}|{{ '\\n x \\n'.strip() }}|{{ 'xyx'.lstrip('x') }}|{{ 'a\\nb'.splitlines() }}"
     "|{{ 'hello world'.title() }}|{{ 'hello'.capitalize() }}|{{ 'abcb'.find('b') }}|{{ 'abcb'.rfind('b') }}"
     "|{{ 'abcb'.count('b') }}|{{ '-'.join(['a', 'b']) }}|{{ 'abc'.upper() }}{{ 'ABC'|lower }}", {}),
    ("{% macro f(a, b='B') %}<{{ a }}{{ b }}>{% endmacro %}{{ f(1) }}{{ f(2, b=3) }}{{ f() }}", {}),
    ("{{ xs|selectattr('k', 'equalto', 1)|map(attribute='v')|join(',') }}|{{ xs|rejectattr('k', 'eq', 1)|list }}"
     "|{{ xs|length }}|{{ xs|first }}|{{ xs|last }}|{{ xs|map(attribute='v')|map('upper')|list }}"
     "|{{ [3, 1, 2]|sort }}|{{ ['b', 'A', 'c']|sort(reverse=true) }}|{{ [1, 1, 2]|unique|list }}"
     "|{{ [1, 2]|reverse|list }}|{{ [1, 'a', none]|select|list }}|{{ [1, 2, 3]|reject('odd')|list }}",
     {"xs": [{"k": 1, "v": "a"}, {"k": 2, "v": "b"}, {"k": 1, "v": "c"}]}),
    ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% if 'a' in d %}has{% endif %}{{ d.get('z', 'none') }}"
     "{{ d|items|list }}{{ d.keys()|list }}{% for k in d %}{{ k }}{% endfor %}{{ d|dictsort }}",
     {"d": {"b": [1, 2], "a": 1}}),
    ("{{ x is defined }}{{ y is none }}{{ 's' is string }}{{ {} is mapping }}{{ 3 is odd }}{{ 4 is even }}"
     "{{ 6 is divisibleby 3 }}{{ 1 if u else 2 }}{{ u|default('D') }}{{ ''|default('E', true) }}{{ [] is iterable }}"
     "{{ 1 is number }}{{ 1.5 is float }}{{ true is boolean }}{{ 1 is integer }}{{ 'ab' is lower }}{{ y is not none }}",
     {"y": None}),
    ("{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}"
     "{% endfor %}{% for i in [] %}x{% else %}empty{% endfor %}{% for i in range(6) if i is even %}{{ loop.index }}"
     "{{ loop.length }}{{ loop.revindex0 }}{{ loop.previtem }}{{ loop.cycle('a', 'b') }}{% endfor %}", {}),
    ("{% raw %}{{ not }}{% endraw %}{# c #}x", {}),
    ("{{ 1.5 }} {{ 1e20 }} {{ 0.1 + 0.2 }} {{ [1.0, 'a', none, true] }} {{ (1,) }} {{ 1e-5 }} {{ 123456789012.0 }}"
     " {{ 2.0 ** 70 }} {{ -0.0 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ 1 < 2 < 3 }} {{ [1, 2] == [1, 2] }}", {}),
    ("{{ 'a' ~ 1 ~ none ~ u }}|{{ a or 'x' }}|{{ a and 'y' }}|{{ not a }}|{{ 'b' not in 'abc' }}|{{ -(1) }}", {"a": 0}),
    ("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t %}in {{ a }}{% endset %}[{{ t }}]{% set u | upper %}low{% endset %}{{ u }}",
     {}),
    ("{{ messages[0]['content'] if messages[0]['role'] == 'system' else 'none' }}{{ messages|length }}"
     "{{ messages[-1].content|trim }}", {"messages": [{"role": "user", "content": " hi "}]}),
    ("{{ raise_exception('stop here') }}", {}),
    ("{{ undefined_thing.attr }}", {}),
    ("{{ 1 + 'a' }}", {}),
    ("{% for x in 3 %}{% endfor %}", {}),
    ("{{ range(1000000)|length }}", {}),
    ("{{ 'x'|nonexistent_filter }}", {}),
    ("{% if %}", {}),
    ("{{ 1 }", {}),
    ("{% for %}{% endfor %}", {}),
    ("{% if true %}never closed", {}),
    ("{% endif %}", {}),
]


@pytest.mark.parametrize("i", range(len(FEATURES)))
def test_feature_matches_jinja2(lib, i):
    pytest.importorskip("jinja2")
    src, variables = FEATURES[i]
    ok_ref, ref = reference(src, variables)
    ok, got = ours(lib, src, variables)
    assert ok == ok_ref, (src, ref, got)
    if ok:
        assert got == ref, src
    else:
        assert got.startswith("chat template line "), got


# ---- wired in: a template of no known family (issue 31: DeepSeek-R1-Distill-Qwen's) ----------

class ChatTemplate(ctypes.Structure):
    _fields_ = [("family", ctypes.c_int), ("default_system", ctypes.c_void_p), ("tools_hermes", ctypes.c_bool),
                ("jinja", ctypes.c_void_p)]


class ChatMsg(ctypes.Structure):
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]


def test_deepseek_r1_renders_through_the_engine(lib):
    """detect gives the "jinja" family; the prompt is jinja2's minus the leading bos_token,
    which the tokenizer adds itself (as llama.cpp drops it)."""
    pytest.importorskip("jinja2")
    src = (TEMPLATES / "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja").read_text()
    bos, eos = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
    t, err = ChatTemplate(), LsErr()
    b = src.encode()
    assert lib.ls_chat_template_detect(b, len(b), ctypes.byref(t), ctypes.byref(err)) == 0, err.msg
    try:
        lib.ls_chat_family_name.restype = ctypes.c_char_p
        assert lib.ls_chat_family_name(t.family) == b"jinja"
        assert lib.ls_chat_template_set_tokens(ctypes.byref(t), bos.encode(), eos.encode(), True, False,
                                               ctypes.byref(err)) == 0
        conv = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
                {"role": "assistant", "content": "4"}, {"role": "user", "content": "3+3?"}]
        arr = (ChatMsg * len(conv))(*[ChatMsg(m["role"].encode(), m["content"].encode()) for m in conv])
        for gen in (False, True):
            out = ctypes.c_void_p()
            assert lib.ls_chat_apply(ctypes.byref(t), arr, len(conv), gen, ctypes.byref(out), ctypes.byref(err)) == 0
            got = ctypes.string_at(out.value).decode()
            _libc.free(out)
            ok, ref = reference(src, {"messages": conv, "add_generation_prompt": gen, "bos_token": bos, "eos_token": eos})
            assert ok and ref.startswith(bos)
            assert got == ref[len(bos):]
    finally:
        lib.ls_chat_template_free(ctypes.byref(t))


def test_run_chat_template_file(tmp_path, model_path):
    """`run --chat-template-file`: the file's template renders the prompt; a file that does not
    parse is refused (exit 2) naming the file and the line."""
    import subprocess

    from conftest import REPO_ROOT
    exe = REPO_ROOT / "build" / "lockstep"
    src = TEMPLATES / "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"
    r = subprocess.run([str(exe), "run", "-m", str(model_path), "--chat", "Hi", "--chat-template-file", str(src),
                        "-n", "2", "--temp", "0", "--no-probe", "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    # the template's "<｜User｜>Hi<｜Assistant｜><think>\n" is more tokens than a bare "Hi"
    assert json.loads(r.stdout)["n_prompt"] > 3
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for m in messages %}\n{{ m.content }")
    r = subprocess.run([str(exe), "run", "-m", str(model_path), "--chat", "Hi", "--chat-template-file", str(bad),
                        "-n", "2", "--no-probe"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert str(bad) in r.stderr and "line 2" in r.stderr


def test_serve_chat_template_file(tmp_path, model_path):
    """`serve --chat-template-file`: /apply-template and the chat endpoint render with the
    file's template (jinja2's rendering of it); an unreadable or unparsable file is refused
    (exit 2) before anything listens, naming the file (and the line)."""
    import subprocess

    from test_server import EXE, Server
    src = TEMPLATES / "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"
    conv = [{"role": "user", "content": "Hi"}]
    s = Server(model_path, "--chat-template-file", str(src), "--no-probe", "--parallel", "2", "--ctx-size", "512")
    try:
        st, r, _ = s.post("/apply-template", {"messages": conv})
        assert st == 200, r
        # SmolLM2's BOS and EOS, which /apply-template's text carries as the template writes them
        ok, ref = reference(src.read_text(), {"messages": conv, "add_generation_prompt": True,
                                              "bos_token": "<|im_start|>", "eos_token": "<|im_end|>"})
        assert ok and r["prompt"] == ref, (r, ref)
        st, r, _ = s.post("/v1/chat/completions", {"messages": conv, "max_tokens": 2, "temperature": 0})
        st2, plain, _ = s.post("/tokenize", {"content": "Hi"})
        assert st == 200 and r["usage"]["prompt_tokens"] > len(plain["tokens"]) + 3, r
    finally:
        assert s.stop() == 0, s.logtext()
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for m in messages %}\n{{ m.content }")
    for f, why in ((bad, "line 2"), (tmp_path / "missing.jinja", "cannot read")):
        r = subprocess.run([str(EXE), "serve", "-m", str(model_path), "--port", "1", "--chat-template-file", str(f)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and str(f) in r.stderr and why in r.stderr, r.stderr
