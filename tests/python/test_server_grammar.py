"""`lockstep serve`: constrained decoding through the official `openai` client.

- response_format json_object: the reply parses (Python's json) to an object;
  response_format json_schema and llama-server's json_schema field: the reply is valid
  under the schema by the `jsonschema` package (an independent reference);
  llama-server's grammar field (GBNF): the reply is in the language;
- on /v1/chat/completions and /v1/completions, streamed and not (the deltas add up to
  the same bytes), and a seeded request replays to the same tokens on a plain and on a
  speculating (--spec ngram) server;
- a bad grammar or schema is a 400 naming the problem.
"""
import json

import pytest

from test_server import Server

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")


@pytest.fixture(scope="module")
def servers(model_path):
    # test_server_api.py's configurations: in one pytest session the probe's memo serves them
    plain = Server(model_path, "--parallel", "12", "--ctx-size", "512")
    try:
        spec = Server(model_path, "--parallel", "12", "--ctx-size", "512", "--spec", "ngram", "--draft-max", "4")
    except Exception:
        plain.stop()
        raise
    yield plain, spec
    assert plain.stop() == 0, plain.logtext()
    assert spec.stop() == 0, spec.logtext()


PERSON = {"type": "object", "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 12},
                                           "age": {"type": "integer"}, "city": {"type": "string", "maxLength": 10}},
          "required": ["name", "age"], "additionalProperties": False}
MSG = [{"role": "user", "content": "Describe a person as JSON with name and age."}]


def chat(srv, stream=False, **kw):
    c = srv.client()
    kw.setdefault("messages", MSG)
    kw.setdefault("max_tokens", 60)
    kw.setdefault("temperature", 0.8)
    kw.setdefault("seed", 3)
    if not stream:
        r = c.chat.completions.create(model="x", **kw)
        return r.choices[0].message.content, r.choices[0].finish_reason, r.choices[0].model_extra["token_ids"]
    parts, finish = [], None
    for ev in c.chat.completions.create(model="x", stream=True, **kw):
        if ev.choices:
            parts.append(ev.choices[0].delta.content or "")
            finish = ev.choices[0].finish_reason or finish
    return "".join(parts), finish, None


def test_json_schema_reply_validates_and_replays(servers):
    plain, spec = servers
    rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    for seed in (1,):
        text, fin, ids = chat(plain, response_format=rf, seed=seed)
        assert fin == "stop", text
        jsonschema.validate(json.loads(text), PERSON)
        # streamed: the same bytes; the speculating server: the same tokens
        assert chat(plain, stream=True, response_format=rf, seed=seed)[:2] == (text, fin)
        assert chat(spec, response_format=rf, seed=seed) == (text, fin, ids)
        assert chat(spec, stream=True, response_format=rf, seed=seed)[0] == text
    # llama-server's json_schema field, on /v1/completions too
    assert chat(plain, extra_body={"json_schema": PERSON}, seed=1) == (text, fin, ids)
    r = plain.client().completions.create(model="x", prompt="A person as JSON:", max_tokens=60, temperature=0.8,
                                          seed=4, extra_body={"json_schema": PERSON})
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].text), PERSON)
    parts = [ev.choices[0].text for ev in plain.client().completions.create(
        model="x", prompt="A person as JSON:", max_tokens=60, temperature=0.8, seed=4, stream=True,
        extra_body={"json_schema": PERSON}) if ev.choices]
    assert "".join(parts) == r.choices[0].text


def test_json_object_reply_is_an_object(servers):
    plain, spec = servers
    text, fin, ids = chat(plain, response_format={"type": "json_object"}, max_tokens=100, seed=5)
    if fin == "stop":
        assert isinstance(json.loads(text), dict), text
    else:  # cut at max_tokens: what there is must still be a prefix the grammar allowed
        assert text.startswith("{"), text
    assert chat(spec, response_format={"type": "json_object"}, max_tokens=100, seed=5) == (text, fin, ids)
    unconstrained = chat(plain, max_tokens=100, seed=5)[0]
    assert unconstrained != text  # the constraint acted (the free reply is prose)


def test_gbnf_grammar_field(servers):
    plain, spec = servers
    g = 'root ::= ("yes" | "no") ", because " [a-z ]{3,30} "."\n'
    for seed in range(2):
        text, fin, ids = chat(plain, messages=[{"role": "user", "content": "Is the sky blue?"}],
                              extra_body={"grammar": g}, seed=seed)
        assert fin == "stop"
        head, _, rest = text.partition(", because ")
        assert head in ("yes", "no") and rest.endswith(".") and 3 <= len(rest) - 1 <= 30, text
        assert all(ch in "abcdefghijklmnopqrstuvwxyz " for ch in rest[:-1]), text
        assert chat(spec, messages=[{"role": "user", "content": "Is the sky blue?"}], extra_body={"grammar": g},
                    seed=seed) == (text, fin, ids)
    r = plain.client().completions.create(model="x", prompt="Q: Is water wet?\nA:", max_tokens=40, seed=1,
                                          extra_body={"grammar": g})
    assert r.choices[0].text.split(",")[0] in ("yes", "no"), r.choices[0].text


@pytest.mark.parametrize("body,needle", [
    ({"grammar": "root ::= [a-"}, "grammar line 1"),
    ({"grammar": "root ::= x"}, "undefined rule 'x'"),
    ({"json_schema": {"type": "string", "pattern": "a+"}}, "keyword 'pattern'"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "n"}}}, "json_schema.schema' is required"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object",
      "properties": {"a": {"type": "number", "minimum": 1}}}}}}, "/properties/a: keyword 'minimum'"),
    ({"response_format": {"type": "yaml"}}, "response_format.type"),
    ({"grammar": "root ::= \"a\"", "json_schema": {"type": "string"}}, "only one of"),
])
def test_bad_constraints_are_400_naming_the_problem(servers, body, needle):
    plain, _ = servers
    for path, base in (("/v1/chat/completions", {"messages": MSG}), ("/v1/completions", {"prompt": "hi"})):
        st, out, _ = plain.post(path, {"max_tokens": 4, **base, **body})
        assert st == 400 and needle in out["error"]["message"], (path, st, out)
