"""`lockstep serve`: the remaining endpoints (issue 22): /v1/embeddings, llama-server's
native /completion and /slots, streaming with n > 1 and prompt lists, tools.

- Embeddings are checked against an independent implementation: llama-cpp-python's
  pooled vector (embedding=True, pooling_type mean, L2-normalized) of the same text, by
  cosine (a cross-implementation check, so a tolerance); and against themselves by
  bytes: the same input alone, in a batch of inputs and amid concurrent generation
  gives identical bytes (float and base64).
- /completion replays /v1/completions with llama-server's defaults and the same seed
  byte for byte, streamed or not; its completion_probabilities are the logprobs
  /v1/completions reports for the same tokens.
- A stream of n choices (or prompts) carries each choice's index; each choice's text is
  the non-streamed choice's text.
"""
import base64
import concurrent.futures as cf
import json
import time
import http.client

import pytest

from test_server import Server

openai = pytest.importorskip("openai")
np = pytest.importorskip("numpy")


@pytest.fixture(scope="module")
def srv(model_path):
    s = Server(model_path, "--parallel", "4", "--ctx-size", "512")
    yield s
    assert s.stop() == 0, s.logtext()


TEXTS = ["The river runs to the sea.", "Hello world", "Quantized models keep their accuracy surprisingly well."]


def emb(srv, inp, **kw):
    st, r, _ = srv.post("/v1/embeddings", {"input": inp, **kw})
    assert st == 200, r
    return r


# ---- /v1/embeddings ----------------------------------------------------------------
def test_embeddings_match_exact_float64_mean_pooling(srv, model_path, report):
    """Against the exact float64 forward pass (ref_llama.py, no llama.cpp): the mean-pooled,
    normalized final hidden state, on the token ids the server itself counts."""
    from ref_llama import RefLlama

    exact = RefLlama(model_path)
    r = emb(srv, TEXTS)
    refs = [exact.embedding(srv.post("/tokenize", {"content": t, "add_special": True})[1]["tokens"]) for t in TEXTS]
    worst = 1.0
    for i, d in enumerate(r["data"]):
        got = np.array(d["embedding"], dtype=np.float64)
        c = float(got @ refs[i] / np.linalg.norm(got))
        worst = min(worst, c)
        for k in range(len(TEXTS)):  # the other texts' exact vectors are much further: the check tells inputs apart
            if k != i:
                assert c - float(got @ refs[k] / np.linalg.norm(got)) > 0.02
    report(f"embeddings vs exact float64 mean pooling: worst cosine {worst:.6f}")
    assert worst > 0.999


def test_embeddings_match_llama_cpp_mean_pooling(srv, model_path, report, llama_cpp):
    r = srv.client().embeddings.create(model="x", input=TEXTS)
    assert [d.index for d in r.data] == [0, 1, 2]
    n_tok = sum(len(srv.post("/tokenize", {"content": t, "add_special": True})[1]["tokens"]) for t in TEXTS)
    assert r.usage.prompt_tokens == n_tok == r.usage.total_tokens
    llm = llama_cpp.Llama(model_path=str(model_path), embedding=True, pooling_type=llama_cpp.LLAMA_POOLING_TYPE_MEAN,
                          n_ctx=512, verbose=False)
    refs = [np.array(llm.embed(t, normalize=True), dtype=np.float64) for t in TEXTS]
    worst = 1.0
    for i, d in enumerate(r.data):
        got = np.array(d.embedding, dtype=np.float64)
        assert got.shape == (576,) and abs(np.linalg.norm(got) - 1) < 1e-5
        cos = float(got @ refs[i] / np.linalg.norm(refs[i]))
        worst = min(worst, cos)
        # the other texts' vectors are much further: the check can tell inputs apart
        for k in range(len(TEXTS)):
            if k != i:
                assert cos - float(got @ refs[k] / np.linalg.norm(refs[k])) > 0.02
    report(f"embeddings vs llama-cpp-python mean pooling: worst cosine {worst:.6f}")
    assert worst > 0.999


def test_embeddings_bytes_alone_batched_and_amid_traffic(srv):
    alone = emb(srv, TEXTS[0])["data"][0]["embedding"]
    alone_b64 = emb(srv, TEXTS[0], encoding_format="base64")["data"][0]["embedding"]
    raw = base64.b64decode(alone_b64)
    # base64 = the same float32 values (the JSON numbers print every float exactly)
    assert np.array_equal(np.frombuffer(raw, dtype="<f4"), np.array(alone, dtype=np.float32))
    ids = srv.post("/tokenize", {"content": TEXTS[0], "add_special": True})[1]["tokens"]

    def gen(i):
        return srv.post("/v1/completions", {"prompt": f"Story {i}: once upon a time", "max_tokens": 24,
                                            "temperature": 0})[0]

    with cf.ThreadPoolExecutor(8) as ex:
        bg = [ex.submit(gen, i) for i in range(4)]
        mixed = [ex.submit(emb, srv, [TEXTS[1], TEXTS[0], TEXTS[2]]),
                 ex.submit(emb, srv, TEXTS[0], encoding_format="base64"),
                 ex.submit(emb, srv, ids), ex.submit(emb, srv, [ids, ids[:3]])]
        assert all(f.result() == 200 for f in bg)
        m = [f.result() for f in mixed]
    assert m[0]["data"][1]["embedding"] == alone
    assert m[1]["data"][0]["embedding"] == alone_b64
    assert m[2]["data"][0]["embedding"] == alone  # token ids = the text's tokens
    assert m[3]["data"][0]["embedding"] == alone and m[3]["data"][1]["embedding"] != alone
    assert m[3]["usage"]["prompt_tokens"] == len(ids) + 3


@pytest.mark.parametrize("body,name", [
    ({"input": "x", "dimensions": 64}, "dimensions"),
    ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
    ({"input": "x", "pooling": "cls"}, "pooling"),
    ({"input": []}, "input"),
    ({"input": ""}, "input[0]"),
    ({"input": [1, 2, 10 ** 7]}, "input[0][2]"),
    ({}, "input"),
])
def test_embeddings_refusals_name_the_field(srv, body, name):
    st, r, _ = srv.post("/v1/embeddings", body)
    assert st == 400 and name in r["error"]["message"], r


# ---- /completion and /slots ------------------------------------------------------------
def sse(srv, path, body):
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200
    raw = r.read().decode()
    c.close()
    return [json.loads(e[6:]) for e in raw.split("\n\n") if e.startswith("data: ") and e != "data: [DONE]"], raw


def test_native_completion_replays_v1_completions(srv):
    body = {"prompt": "The capital of France is", "n_predict": 10, "seed": 11, "n_probs": 3}
    st, n, _ = srv.post("/completion", body)
    assert st == 200, n
    # llama-server's defaults, spelled out on the OpenAI endpoint, give the same bytes
    st, o, _ = srv.post("/v1/completions", {"prompt": body["prompt"], "max_tokens": 10, "seed": 11, "temperature": 0.8,
                                            "top_k": 40, "top_p": 0.95, "min_p": 0.05, "logprobs": 3})
    assert st == 200
    ch = o["choices"][0]
    assert n["content"] == ch["text"] and n["tokens"] == ch["token_ids"]
    assert n["tokens_predicted"] == len(n["tokens"]) == o["usage"]["completion_tokens"]
    assert n["tokens_evaluated"] == o["usage"]["prompt_tokens"]
    assert n["stop"] is True and n["stop_type"] == "limit"
    assert n["generation_settings"]["seed"] == 11 and n["generation_settings"]["top_k"] == 40
    assert set(n["timings"]) >= {"prompt_n", "prompt_ms", "predicted_n", "predicted_ms"}
    cp = n["completion_probabilities"]
    assert [p["id"] for p in cp] == n["tokens"]
    assert [p["logprob"] for p in cp] == ch["logprobs"]["token_logprobs"]
    assert all(len(p["top_logprobs"]) == 3 for p in cp)
    # streamed: content events, then the whole reply with stop true (no [DONE])
    evs, raw = sse(srv, "/completion", {**body, "stream": True})
    assert "[DONE]" not in raw and evs[-1]["stop"] is True and all(e["stop"] is False for e in evs[:-1])
    assert "".join(e["content"] for e in evs) == n["content"]
    assert [p["id"] for e in evs for p in e.get("completion_probabilities", [])] == n["tokens"]
    # a prompt of token ids is the same prompt
    ids = srv.post("/tokenize", {"content": body["prompt"], "add_special": True})[1]["tokens"]
    st, t, _ = srv.post("/completion", {**body, "prompt": ids})
    assert st == 200 and t["content"] == n["content"]
    # a stop string: stop_type word, the text ends before it
    st, w, _ = srv.post("/completion", {"prompt": "1, 2, 3, 4,", "n_predict": 16, "temperature": 0, "stop": [","]})
    assert st == 200 and w["stop_type"] == "word" and w["stopping_word"] == "," and "," not in w["content"], w


def test_native_completion_constrained(srv):
    """llama-server's json_schema and grammar fields on /completion: the reply follows them and
    is the /v1/completions reply of the same request."""
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                               "age": {"type": "integer"}}, "required": ["name", "age"]}
    body = {"prompt": "A person as JSON:", "n_predict": 48, "seed": 5, "json_schema": schema}
    st, n, _ = srv.post("/completion", body)
    assert st == 200, n
    obj = json.loads(n["content"])
    assert set(obj) == {"name", "age"} and isinstance(obj["age"], int), n["content"]
    st, o, _ = srv.post("/v1/completions", {"prompt": body["prompt"], "max_tokens": 48, "seed": 5, "temperature": 0.8,
                                            "top_k": 40, "top_p": 0.95, "min_p": 0.05, "json_schema": schema})
    assert st == 200 and o["choices"][0]["text"] == n["content"]
    st, g, _ = srv.post("/completion", {"prompt": "Answer:", "n_predict": 8, "grammar": 'root ::= "yes" | "no"'})
    assert st == 200 and g["content"] in ("yes", "no"), g
    st, b, _ = srv.post("/completion", {"prompt": "x", "grammar": 'root ::= "a'})
    assert st == 400 and "grammar" in b["error"]["message"], b


@pytest.mark.parametrize("body,name", [
    ({"prompt": "x", "mirostat": 2}, "mirostat"),
    ({"prompt": "x", "n_predict": 0}, "n_predict"),
    ({"prompt": "x", "n_probs": 99}, "n_probs"),
    ({"prompt": "x", "cache_prompt": "yes"}, "cache_prompt"),
    ({"n_predict": 3}, "prompt"),
])
def test_native_completion_refusals(srv, body, name):
    st, r, _ = srv.post("/completion", body)
    assert st == 400 and name in r["error"]["message"], r


def _poll(what, deadline_s=30):
    """Polls what() until it returns a true value, or fails at the deadline."""
    deadline = time.time() + deadline_s
    while True:
        v = what()
        if v:
            return v
        assert time.time() < deadline, "condition not reached before the deadline"
        time.sleep(0.02)


def test_slots_show_running_requests(srv):
    st, out, _ = srv.request("GET", "/slots")
    slots = json.loads(out)
    assert st == 200 and [s["id"] for s in slots] == [0, 1, 2, 3]
    assert not any(s["is_processing"] for s in slots) and all(s["n_ctx"] == 512 for s in slots)
    # far more tokens than any host makes before the checks below; the client leaves after
    # them and the request is cancelled, so no fixed time is assumed either way
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
    c.request("POST", "/completion", json.dumps({"prompt": "Once upon a time", "n_predict": 450, "stream": True,
                                                 "ignore_eos": True}), {"Content-Type": "application/json"})
    r = c.getresponse()
    first = r.readline()  # the first token is out: it is running
    assert first.startswith(b"data: ")
    busy = _poll(lambda: [s for s in json.loads(srv.request("GET", "/slots")[1])
                          if s["is_processing"] and s["next_token"]["n_decoded"] >= 1])
    assert len(busy) == 1 and busy[0]["endpoint"] == "/completion"
    assert busy[0]["n_prompt_tokens"] == len(srv.post("/tokenize", {"content": "Once upon a time",
                                                                     "add_special": True})[1]["tokens"])
    c.sock.shutdown(__import__("socket").SHUT_RDWR)
    c.close()
    _poll(lambda: not any(s["is_processing"] for s in json.loads(srv.request("GET", "/slots")[1])))


# ---- streaming several choices ----------------------------------------------------------
def test_stream_n_choices_and_prompt_lists(srv):
    c = srv.client()
    msgs = [{"role": "user", "content": "Name a colour."}]
    full = c.chat.completions.create(model="x", messages=msgs, n=3, max_tokens=8, seed=9, temperature=1.0)
    got = {}
    usage = None
    for ev in c.chat.completions.create(model="x", messages=msgs, n=3, max_tokens=8, seed=9, temperature=1.0,
                                        stream=True, stream_options={"include_usage": True}):
        if ev.usage:
            usage = ev.usage
        for ch in ev.choices:
            got.setdefault(ch.index, []).append(ch)
    assert sorted(got) == [0, 1, 2]
    for k, ch in enumerate(full.choices):
        assert "".join(x.delta.content or "" for x in got[k]) == ch.message.content
        assert got[k][-1].finish_reason == ch.finish_reason
    assert usage.completion_tokens == full.usage.completion_tokens
    # a list of prompts, streamed: choices prompt-major with n each, as without stream
    prompts = ["The cat", "A dog"]
    t = c.completions.create(model="x", prompt=prompts, n=2, max_tokens=6, seed=5)
    texts = {}
    for ev in c.completions.create(model="x", prompt=prompts, n=2, max_tokens=6, seed=5, stream=True):
        for ch in ev.choices:
            texts[ch.index] = texts.get(ch.index, "") + ch.text
    assert texts == {ch.index: ch.text for ch in t.choices}


# ---- tools --------------------------------------------------------------------------------
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather <now> & 'here'",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}]
CALL = {"id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris", "days": 2, "x": 1.5})}}
TOOL_CONVS = [
    [{"role": "user", "content": "Weather in Paris?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}],
    [{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": None, "tool_calls": [CALL]},
     {"role": "tool", "tool_call_id": "c1", "content": "sunny"}, {"role": "tool", "tool_call_id": "c2", "content": "22C"}],
    [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "Checking.", "tool_calls": [CALL, CALL]},
     {"role": "tool", "tool_call_id": "c1", "content": "rain"}, {"role": "assistant", "content": "It rains."},
     {"role": "user", "content": "Thanks"}],
]


def _jinja_tools(src, messages, tools):
    """The template rendered as transformers does (tojson = json.dumps, ensure_ascii off),
    with each call's arguments parsed, as llama.cpp passes them."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False)
    msgs = json.loads(json.dumps(messages))
    for m in msgs:
        for tc in m.get("tool_calls") or []:
            tc["function"]["arguments"] = json.loads(tc["function"]["arguments"])
    return env.from_string(src).render(messages=msgs, tools=tools, add_generation_prompt=True)


def test_hermes_tools_render_as_the_qwen_template(tmp_path):
    pytest.importorskip("jinja2")
    import synth_family
    from pathlib import Path

    q = Server(synth_family.write(tmp_path / "qwen2.gguf", "qwen2"), "--parallel", "1", "--ctx-size", "256",
               "--no-probe")
    try:
        src = (Path(__file__).parent / "data" / "qwen2.5.jinja").read_text()
        for conv in TOOL_CONVS:
            for tools in (TOOLS, None):
                body = {"messages": conv, **({"tools": tools} if tools else {})}
                st, r, _ = q.post("/apply-template", body)
                assert st == 200, r
                assert r["prompt"] == _jinja_tools(src, conv, tools), (conv, tools)
    finally:
        assert q.stop() == 0
    # Qwen 3's template has the same tags but <think> handling: not claimed as hermes
    q3 = Server(synth_family.write(tmp_path / "qwen3.gguf", "qwen3"), "--parallel", "1", "--ctx-size", "256",
                "--no-probe")
    try:
        st, r, _ = q3.post("/apply-template", {"messages": TOOL_CONVS[0], "tools": TOOLS})
        assert st == 200 and r["prompt"].startswith("<|im_start|>system\nRespond in JSON format"), r
        # chat_template_kwargs.enable_thinking (vLLM's), rendered as jinja2 renders Qwen 3's template
        from test_tokenizer import _jinja_render

        src3 = (Path(__file__).parent / "data" / "qwen3.jinja").read_text()
        conv = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "<think>\nhm\n</think>\n\nHello"},
                {"role": "user", "content": "again"}]
        prompts = {}
        for think in (None, False, True):
            body = {"messages": conv, **({"chat_template_kwargs": {"enable_thinking": think}} if think is not None else {})}
            st, r, _ = q3.post("/apply-template", body)
            assert st == 200, r
            want = _jinja_render(src3, conv, True, **({"enable_thinking": think} if think is not None else {}))
            assert r["prompt"] == want, (think, r["prompt"], want)
            prompts[think] = r["prompt"]
        assert prompts[False].endswith("<think>\n\n</think>\n\n") and prompts[None] == prompts[True]
        # the chat endpoint renders the same: the empty think block is in the prompt it ran
        usage = {}
        for think in (None, False):
            body = {"messages": conv, "max_tokens": 1, "temperature": 0,
                    **({"chat_template_kwargs": {"enable_thinking": think}} if think is not None else {})}
            st, r, _ = q3.post("/v1/chat/completions", body)
            assert st == 200, r
            usage[think] = r["usage"]["prompt_tokens"]
            st, t, _ = q3.post("/tokenize", {"content": prompts[think], "add_special": True})
            assert st == 200 and usage[think] == len(t["tokens"]), (think, usage, t)
        assert usage[False] > usage[None]
        # anything else there is refused by name
        for kw, needle in (({"enable_thinking": "no"}, "enable_thinking' must be true or false"),
                           ({"add_vision_id": True}, "chat_template_kwargs.add_vision_id"),
                           ([1], "'chat_template_kwargs' must be an object")):
            st, r, _ = q3.post("/v1/chat/completions", {"messages": conv, "chat_template_kwargs": kw})
            assert st == 400 and needle in r["error"]["message"], (kw, r)
    finally:
        assert q3.stop() == 0


def test_generic_tools_prompt_and_replies(srv):
    # SmolLM2's template has no tool format: the generic system message lists the tools
    st, r, _ = srv.post("/apply-template", {"messages": TOOL_CONVS[2], "tools": TOOLS})
    assert st == 200
    p = r["prompt"]
    assert p.startswith("<|im_start|>system\nRespond in JSON format, either with `tool_call`")
    assert json.dumps(TOOLS, ensure_ascii=False) in p
    assert ('<|im_start|>assistant\n{"tool_call": {"name": "get_weather", "arguments": '
            '{"city": "Paris", "days": 2, "x": 1.5}}}<|im_end|>') in p
    assert '{"tool_response": {"tool_call_id": "c1", "content": "sunny"}}' in p
    # tool_choice none: plain chat, the tools not rendered
    st, r, _ = srv.post("/apply-template", {"messages": TOOL_CONVS[0], "tools": TOOLS, "tool_choice": "none"})
    assert "get_weather" not in r["prompt"]



@pytest.mark.parametrize("choice,names", [
    ("auto", None),
    ("required", {"get_weather", "get_time"}),
    ({"type": "function", "function": {"name": "get_weather"}}, {"get_weather"}),
    ({"type": "function", "function": {"name": "get_time"}}, {"get_time"}),  # no arguments: {}
])
def test_tool_choice_replies_stream_and_not(srv, choice, names):
    # the reply, streamed or not, is the same parse of the same text; the generic format is
    # constrained (a tool_call or a response, as llama.cpp does); required / named: a call
    c = srv.client()
    kw = dict(model="x", messages=TOOL_CONVS[0], tools=TOOLS, tool_choice=choice, max_tokens=48, temperature=0)
    full = c.chat.completions.create(**kw)
    msg = full.choices[0].message
    content, calls, finish = "", [], None
    for ev in c.chat.completions.create(**kw, stream=True):
        for ch in ev.choices:
            content += ch.delta.content or ""
            calls += ch.delta.tool_calls or []
            finish = ch.finish_reason or finish
    assert content == (msg.content or "") and finish == full.choices[0].finish_reason
    assert [(t.index, t.function.name, t.function.arguments) for t in calls] == \
           [(k, t.function.name, t.function.arguments) for k, t in enumerate(msg.tool_calls or [])]
    assert all(t.id.startswith("call_") and t.type == "function" for t in calls)
    if names:
        assert full.choices[0].finish_reason == "tool_calls" and msg.content is None, msg
        assert {t.function.name for t in msg.tool_calls} <= names and msg.tool_calls[0].type == "function"
        args = json.loads(msg.tool_calls[0].function.arguments)
        assert isinstance(args, dict) and (msg.tool_calls[0].function.name != "get_weather" or "city" in args)
    else:  # auto: a call or a plain reply, never the raw JSON
        assert msg.tool_calls or not (msg.content or "").lstrip().startswith('{"')


@pytest.mark.parametrize("body,name", [
    ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
    ({"tools": [{"type": "function", "function": {"description": "x"}}]}, "tools[0].function.name"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "nope"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": TOOLS, "response_format": {"type": "json_object"}}, "response_format"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
                                                                              "patternProperties": {}}}}]},
     "patternProperties"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "tool_call_id"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{"}}]}]},
     "arguments"),
])
def test_tools_refusals(srv, body, name):
    st, r, _ = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                                                 **body})
    assert st == 400 and name in r["error"]["message"], r
