"""`lockstep serve`: OpenAI's Responses API (/v1/responses) and Anthropic's Messages API
(/v1/messages), through the official `openai` and `anthropic` clients (issue 32).

- Both are adapters onto the chat request: a greedy or seeded reply has byte for byte
  the text (and token count) of the equivalent /v1/chat/completions request, streamed or
  not, alone or amid concurrent traffic, on a plain and on a --spec ngram server.
- Replay: each reply names its seed and system_fingerprint (extension fields); sending
  the seed back gives the same bytes.
- Tools: a call forced with tool_choice, its result sent back, a text reply; streamed
  calls equal the non-streamed ones.
- Reasoning (--reasoning-format deepseek, the default): a reply that opens with a think
  block (forced here by a GBNF grammar on the default model, so the split runs on real
  generated text) comes back as reasoning_content / a reasoning item / a thinking block,
  and the streamed pieces concatenate to the non-streamed fields.
- Bad fields are 4xx naming them (Anthropic's error shape on /v1/messages); nothing is
  stored (store: true and previous_response_id are refused); x-api-key is a key.
"""
import concurrent.futures as cf
import json
import subprocess

import pytest

from test_server import EXE, Server

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

KEY = "sk-agents"


@pytest.fixture(scope="module")
def servers(model_path):
    plain = Server(model_path, "--parallel", "12", "--ctx-size", "1024", "--api-key", KEY)
    try:
        spec = Server(model_path, "--parallel", "12", "--ctx-size", "1024", "--api-key", KEY, "--spec", "ngram",
                      "--draft-max", "4")
    except Exception:
        plain.stop()
        raise
    yield plain, spec
    assert plain.stop() == 0, plain.logtext()
    assert spec.stop() == 0, spec.logtext()


def oai(srv):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key=KEY, max_retries=0)


def anth(srv, key=KEY):
    return anthropic.Anthropic(base_url=f"http://127.0.0.1:{srv.port}", api_key=key, max_retries=0)


Q = "Write two sentences about rivers."
SAMPLING = [dict(temperature=0), dict(temperature=0.9, seed=1234)]


def chat_text(srv, q=Q, max_tokens=16, **kw):
    r = oai(srv).chat.completions.create(model="x", messages=[{"role": "user", "content": q}], max_tokens=max_tokens, **kw)
    return r.choices[0].message.content, r.usage.completion_tokens, r.choices[0].finish_reason


def responses_text(srv, q=Q, max_tokens=16, stream=False, **kw):
    seed = kw.pop("seed", None)
    extra = {"seed": seed} if seed is not None else {}
    r = oai(srv).responses.create(model="x", input=q, max_output_tokens=max_tokens, extra_body=extra, stream=stream, **kw)
    if not stream:
        return r.output_text, r.usage.output_tokens, r.status
    evs = list(r)
    text = "".join(e.delta for e in evs if e.type == "response.output_text.delta")
    done = [e.text for e in evs if e.type == "response.output_text.done"]
    fin = evs[-1].response
    assert done == [text] and fin.output_text == text, (done, text)
    assert [e.sequence_number for e in evs] == list(range(len(evs)))
    assert evs[0].type == "response.created" and fin.status in ("completed", "incomplete")
    return text, fin.usage.output_tokens, fin.status


def messages_text(srv, q=Q, max_tokens=16, stream=False, **kw):
    body = dict(model="x", max_tokens=max_tokens, messages=[{"role": "user", "content": q}], extra_body=kw)
    if not stream:
        m = anth(srv).messages.create(**body)
        return "".join(b.text for b in m.content if b.type == "text"), m.usage.output_tokens, m.stop_reason
    with anth(srv).messages.stream(**body) as s:
        text = "".join(s.text_stream)
        m = s.get_final_message()
    assert "".join(b.text for b in m.content if b.type == "text") == text
    return text, m.usage.output_tokens, m.stop_reason


FINISH = {"length": ("incomplete", "max_tokens"), "stop": ("completed", "end_turn")}


@pytest.mark.parametrize("which", ["plain", "spec"])
def test_replies_are_the_chat_replies_byte_for_byte(servers, which):
    srv = servers[0] if which == "plain" else servers[1]
    for kw in SAMPLING:
        ref, n, fin = chat_text(srv, **kw)
        assert ref
        for stream in (False, True):
            assert responses_text(srv, stream=stream, **kw) == (ref, n, FINISH[fin][0]), (kw, stream)
            assert messages_text(srv, stream=stream, **kw) == (ref, n, FINISH[fin][1]), (kw, stream)


def test_parity_amid_concurrent_traffic_and_across_spec(servers):
    plain, spec = servers
    kw = dict(temperature=0.8, seed=99)
    ref = chat_text(plain, **kw)[0]
    others = ["Name three colours.", "Count to five.", "What is rain?", "Say hello in French.", "Describe a cat."]
    with cf.ThreadPoolExecutor(12) as ex:
        noise = [ex.submit(chat_text, plain, q, 24, temperature=0.7, seed=i) for i, q in enumerate(others * 2)]
        ours = [ex.submit(responses_text, plain, Q, 16, s, **kw) for s in (False, True)]
        ours += [ex.submit(messages_text, plain, Q, 16, s, **kw) for s in (False, True)]
        ours += [ex.submit(responses_text, spec, Q, 16, True, **kw), ex.submit(messages_text, spec, Q, 16, True, **kw)]
        for f in noise:
            f.result()
        for f in ours:
            assert f.result()[0] == ref


def test_replay_seed_and_fingerprint(servers):
    plain, _ = servers
    fp = oai(plain).chat.completions.create(model="x", messages=[{"role": "user", "content": Q}],
                                            max_tokens=4).system_fingerprint
    r = oai(plain).responses.create(model="x", input=Q, max_output_tokens=16, temperature=1.0)
    seed = r.model_extra["seed"]
    assert isinstance(seed, int) and r.model_extra["system_fingerprint"] == fp
    again = oai(plain).responses.create(model="x", input=Q, max_output_tokens=16, temperature=1.0, extra_body={"seed": seed})
    assert again.output_text == r.output_text and again.model_extra["seed"] == seed
    assert chat_text(plain, temperature=1.0, seed=seed)[0] == r.output_text
    m = anth(plain).messages.create(model="x", max_tokens=16, messages=[{"role": "user", "content": Q}])
    seed = m.model_extra["seed"]
    assert m.model_extra["system_fingerprint"] == fp
    m2 = anth(plain).messages.create(model="x", max_tokens=16, messages=[{"role": "user", "content": Q}],
                                     extra_body={"seed": seed})
    assert m2.content[0].text == m.content[0].text
    # the stream says them in its first event
    with anth(plain).messages.stream(model="x", max_tokens=4, messages=[{"role": "user", "content": Q}],
                                     extra_body={"seed": seed}) as s:
        first = next(iter(s))
        assert first.type == "message_start" and first.message.model_extra["seed"] == seed


WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
ASK = "What is the weather in Paris? Use the tool."


def test_responses_tool_conversation(servers):
    plain, _ = servers
    c = oai(plain)
    tools = [{"type": "function", "name": "get_weather", "description": "Current weather of a city",
              "parameters": WEATHER}]
    r = c.responses.create(model="x", input=ASK, tools=tools, tool_choice="required", max_output_tokens=48,
                           temperature=0)
    calls = [o for o in r.output if o.type == "function_call"]
    assert r.status == "completed" and len(calls) == 1 and calls[0].name == "get_weather"
    assert set(json.loads(calls[0].arguments)) == {"city"}
    evs = list(c.responses.create(model="x", input=ASK, tools=tools, tool_choice="required", max_output_tokens=48,
                                  temperature=0, stream=True))
    done = [e for e in evs if e.type == "response.function_call_arguments.done"]
    assert len(done) == 1 and done[0].arguments == calls[0].arguments
    assert "".join(e.delta for e in evs if e.type == "response.function_call_arguments.delta") == calls[0].arguments
    # the result goes back; the reply is text
    fc = calls[0]
    turn2 = [{"role": "user", "content": [{"type": "input_text", "text": ASK}]},
             {"type": "function_call", "call_id": fc.call_id, "name": fc.name, "arguments": fc.arguments},
             {"type": "function_call_output", "call_id": fc.call_id, "output": "Sunny, 21 C."}]
    r2 = c.responses.create(model="x", input=turn2, tools=tools, tool_choice="none", max_output_tokens=24,
                            temperature=0)
    assert r2.output_text and not [o for o in r2.output if o.type == "function_call"]
    # ... the chat request it means gives the same bytes
    ch = c.chat.completions.create(model="x", max_tokens=24, temperature=0, tool_choice="none", messages=[
        {"role": "user", "content": ASK},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": fc.call_id, "type": "function", "function": {"name": fc.name, "arguments": fc.arguments}}]},
        {"role": "tool", "tool_call_id": fc.call_id, "content": "Sunny, 21 C."}],
        tools=[{"type": "function", "function": {"name": "get_weather", "description": "Current weather of a city",
                                                 "parameters": WEATHER}}])
    assert ch.choices[0].message.content == r2.output_text


def test_messages_tool_conversation(servers):
    plain, _ = servers
    a = anth(plain)
    tools = [{"name": "get_weather", "description": "Current weather of a city", "input_schema": WEATHER}]
    body = dict(model="x", max_tokens=48, messages=[{"role": "user", "content": ASK}], tools=tools,
                tool_choice={"type": "tool", "name": "get_weather"}, extra_body={"temperature": 0})
    m = a.messages.create(**body)
    uses = [b for b in m.content if b.type == "tool_use"]
    assert m.stop_reason == "tool_use" and len(uses) == 1 and uses[0].name == "get_weather"
    assert set(uses[0].input) == {"city"}
    with a.messages.stream(**body) as s:
        evs = list(s)
        fm = s.get_final_message()
    assert [b.input for b in fm.content if b.type == "tool_use"] == [uses[0].input] and fm.stop_reason == "tool_use"
    assert [e.delta.type for e in evs if e.type == "content_block_delta"] == ["input_json_delta"]
    # any = required
    assert a.messages.create(**{**body, "tool_choice": {"type": "any"}}).stop_reason == "tool_use"
    m2 = a.messages.create(model="x", max_tokens=24, tools=tools, tool_choice={"type": "none"},
                           extra_body={"temperature": 0}, messages=[
                               {"role": "user", "content": ASK},
                               {"role": "assistant", "content": [b.model_dump(include={"type", "id", "name", "input"})
                                                                 for b in uses]},
                               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                                             "content": "Sunny, 21 C."}]}])
    assert m2.content[0].type == "text" and m2.content[0].text and m2.stop_reason in ("end_turn", "max_tokens")
    ch = oai(plain).chat.completions.create(model="x", max_tokens=24, temperature=0, tool_choice="none", messages=[
        {"role": "user", "content": ASK},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": uses[0].id, "type": "function",
             "function": {"name": "get_weather", "arguments": json.dumps(uses[0].input, separators=(",", ":"))}}]},
        {"role": "tool", "tool_call_id": uses[0].id, "content": "Sunny, 21 C."}],
        tools=[{"type": "function", "function": {"name": "get_weather", "description": "Current weather of a city",
                                                 "parameters": WEATHER}}])
    assert ch.choices[0].message.content == m2.content[0].text


# A think block forced on the default model: the split runs on the text it generates.
THINK = ('root ::= "<think>\\n" w (" " w){2,5} "\\n</think>\\n\\n" [A-Z] [a-z]{1,6} (" " w){1,4} "."\n'
         'w ::= [a-z]{2,7}')
TQ = "Think first, then answer: what is a river?"


def test_reasoning_is_split_out_streamed_and_not(servers):
    plain, _ = servers
    c = oai(plain)
    kw = dict(model="x", messages=[{"role": "user", "content": TQ}], max_tokens=60, temperature=0.7, seed=5)
    raw = c.chat.completions.create(**kw, extra_body={"grammar": THINK, "reasoning_format": "none"})
    text = raw.choices[0].message.content
    assert text.startswith("<think>\n") and "\n</think>\n\n" in text
    want_r, want_c = text[len("<think>\n"):].split("\n</think>\n\n")
    r = c.chat.completions.create(**kw, extra_body={"grammar": THINK})
    msg = r.choices[0].message
    assert (msg.model_extra["reasoning_content"], msg.content) == (want_r, want_c)
    assert r.choices[0].model_extra["token_ids"] == raw.choices[0].model_extra["token_ids"]
    evs = [e for e in c.chat.completions.create(**kw, stream=True, extra_body={"grammar": THINK}) if e.choices]
    pieces_r = [(e.choices[0].delta.model_extra or {}).get("reasoning_content") for e in evs]
    pieces_c = [e.choices[0].delta.content for e in evs]
    assert "".join(p or "" for p in pieces_r) == want_r and "".join(p or "" for p in pieces_c) == want_c
    assert sum(1 for p in pieces_r if p) > 1  # streamed as it came, not at the end
    # no <think> markup in any piece
    assert not any("think>" in (p or "") for p in pieces_r + pieces_c)
    # Responses: a reasoning item, then the message
    body = dict(model="x", input=TQ, max_output_tokens=60, temperature=0.7, extra_body={"grammar": THINK, "seed": 5})
    rr = c.responses.create(**body)
    assert [o.type for o in rr.output] == ["reasoning", "message"]
    assert rr.output[0].content[0].text == want_r and rr.output_text == want_c
    evs = list(c.responses.create(**body, stream=True))
    assert "".join(e.delta for e in evs if e.type == "response.reasoning_text.delta") == want_r
    assert "".join(e.delta for e in evs if e.type == "response.output_text.delta") == want_c
    assert [e.text for e in evs if e.type == "response.reasoning_text.done"] == [want_r]
    same = lambda out: [o.model_dump(exclude={"id"}) for o in out]  # ids are per response
    assert same(evs[-1].response.output) == same(rr.output)
    # Messages: a thinking block, then the text
    a = anth(plain)
    body = dict(model="x", max_tokens=60, messages=[{"role": "user", "content": TQ}],
                extra_body={"temperature": 0.7, "seed": 5, "grammar": THINK})
    m = a.messages.create(**body)
    assert [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in m.content] == \
        [("thinking", want_r), ("text", want_c)]
    with a.messages.stream(**body) as s:
        evs = list(s)
        fm = s.get_final_message()
    deltas = [e.delta for e in evs if e.type == "content_block_delta"]
    assert "".join(d.thinking for d in deltas if d.type == "thinking_delta") == want_r
    assert "".join(d.text for d in deltas if d.type == "text_delta") == want_c
    assert [b.type for b in fm.content] == ["thinking", "text"] and fm.content[0].thinking == want_r


def post(srv, path, body, headers=None):
    h = {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}", **(headers or {})}
    st, out, _ = srv.request("POST", path, body, headers=h)
    return st, json.loads(out)


OK_R = {"input": "hi", "max_output_tokens": 4}
OK_M = {"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("body,name", [
    ({**OK_R, "previous_response_id": "resp_1"}, "previous_response_id"),
    ({**OK_R, "store": True}, "store"),
    ({**OK_R, "frequency_penalty": 1}, "frequency_penalty"),
    ({**OK_R, "max_output_tokens": 0}, "max_output_tokens"),
    ({"max_output_tokens": 4}, "input"),
    ({**OK_R, "input": [{"type": "image", "url": "x"}]}, "input[0].type"),
    ({**OK_R, "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input[0].content[0].type"),
    ({**OK_R, "input": [{"role": "user", "content": "hi", "name": "bob"}]}, "input[0].name"),
    ({**OK_R, "input": [{"type": "function_call", "call_id": "c"}]}, "input[0]"),
    ({**OK_R, "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({**OK_R, "tools": [{"type": "function", "name": "f", "parameters": {}, "color": 1}]}, "tools[0].color"),
    ({**OK_R, "tool_choice": {"type": "function", "name": "nope"}, "tools": [{"type": "function", "name": "f"}]},
     "tool_choice"),
    ({**OK_R, "truncation": "auto"}, "truncation"),
    ({**OK_R, "temperature": 7000}, "temperature"),
])
def test_responses_refusals_name_the_field(servers, body, name):
    st, out = post(servers[0], "/v1/responses", body)
    assert st == 400 and f"'{name}" in out["error"]["message"], out


@pytest.mark.parametrize("body,name", [
    ({"messages": [{"role": "user", "content": "hi"}]}, "max_tokens"),
    ({**OK_M, "max_tokens": 10 ** 7}, "max_tokens"),
    ({**OK_M, "stop_sequences": "x"}, "stop_sequences"),
    ({**OK_M, "service_tier": "auto"}, "service_tier"),
    ({**OK_M, "thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking"),
    ({**OK_M, "messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
    ({**OK_M, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "messages[0].content[0].type"),
    ({**OK_M, "messages": [{"role": "user", "content": [{"type": "tool_result"}]}]}, "messages[0].content[0].tool_use_id"),
    ({**OK_M, "system": [{"type": "text", "text": "x", "extra": 1}]}, "system[0].extra"),
    ({**OK_M, "tools": [{"name": "f"}]}, "tools[0].input_schema"),
    ({**OK_M, "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type"),
    ({**OK_M, "tool_choice": {"type": "sometimes"}}, "tool_choice.type"),
    ({**OK_M, "metadata": {"session": "x"}}, "metadata.session"),
    ({**OK_M, "top_k": -3}, "top_k"),
])
def test_messages_refusals_name_the_field_in_anthropics_shape(servers, body, name):
    st, out = post(servers[0], "/v1/messages", body)
    assert st == 400 and out["type"] == "error" and out["error"]["type"] == "invalid_request_error", out
    assert f"'{name}" in out["error"]["message"], out


def test_messages_errors_keys_and_methods(servers):
    plain, _ = servers
    with pytest.raises(anthropic.BadRequestError) as e:
        anth(plain).messages.create(model="x", max_tokens=4, messages=[{"role": "user", "content": "hi"}],
                                    extra_body={"temperature": -1})
    assert "temperature" in str(e.value)
    with pytest.raises(anthropic.AuthenticationError):
        anth(plain, key="wrong").messages.create(model="x", max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    # x-api-key is a key on every route; Anthropic's shape on /v1/messages only
    st, out = post(plain, "/v1/messages", OK_M, headers={"Authorization": "", "x-api-key": KEY})
    assert st == 200 and out["type"] == "message"
    st, out = post(plain, "/v1/messages", OK_M, headers={"Authorization": "", "x-api-key": "no"})
    assert st == 401 and out["error"]["type"] == "authentication_error"
    st, body, h = plain.request("GET", "/v1/messages", headers={"Authorization": f"Bearer {KEY}"})
    assert st == 405 and h["Allow"] == "POST" and json.loads(body)["type"] == "error"
    st, out = post(plain, "/v1/responses", {**OK_R, "store": False})
    assert st == 200 and out["store"] is False and out["object"] == "response"
    st, out = post(plain, "/v1/chat/completions", {"messages": [], "max_tokens": 1},
                   headers={"Authorization": "", "x-api-key": KEY})
    assert st == 400 and "error" in out and "type" not in out


def test_help_lists_every_endpoint():
    out = subprocess.run([str(EXE), "serve", "--help"], capture_output=True, text=True).stdout
    for ep in ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages", "/v1/embeddings",
               "/completion", "/slots", "/v1/models", "/health", "/metrics", "/props", "/tokenize", "/detokenize",
               "/apply-template", "--reasoning-format"):
        assert ep in out, ep
