"""The OpenAI-compatible endpoints of the real app (``python app.py``), driven with the official ``openai`` client."""

from __future__ import annotations

import re

import httpx
import openai
import pytest
from conftest import API_KEY

import lmswitch as ls
from lmswitch.io.resources import shipped_switch_path

pytestmark = [pytest.mark.real_model, pytest.mark.slow]  # a launched app.py on the embedded model

PROMPT = "My weekend was"


@pytest.fixture(scope="module")
def client(app_server) -> openai.OpenAI:
    app_server.wait_ready()
    return openai.OpenAI(base_url=f"{app_server.url}/v1", api_key=API_KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def switches(lm32) -> dict[str, ls.Switch]:
    return {name: ls.load_switch(shipped_switch_path(name), lm32) for name in ("sentiment", "formality")}


def test_models_lists_the_served_model_and_its_switches(client, lm32):
    models = client.models.list().data
    assert models[0].id == lm32.name  # the model the server started with, then any a page loaded since (gemma3-270m)
    assert {m.id for m in models} <= {lm32.name, "gemma3-270m"}
    assert {"sentiment", "detox", "formality"} <= set(models[0].model_extra["switches"])
    assert client.models.retrieve(lm32.name).model_extra["switches"] == models[0].model_extra["switches"]
    with pytest.raises(openai.NotFoundError, match="unknown model 'gpt-9'"):
        client.models.retrieve("gpt-9")


def test_neutral_values_of_fields_not_implemented_are_accepted(client, lm32):
    """What clients send by default (no log-probabilities, zero penalties, plain text) asks for nothing, so it is served."""
    args = dict(model=lm32.name, messages=[{"role": "user", "content": "Hi"}], max_tokens=3, seed=1)
    plain = client.chat.completions.create(**args).choices[0].message.content
    neutral = client.chat.completions.create(**args, logprobs=False, presence_penalty=0, frequency_penalty=0.0,
                                             response_format={"type": "text"}, user="someone").choices[0].message.content
    assert neutral == plain
    with pytest.raises(openai.BadRequestError, match="max_completion_tokens must be an integer from 1 to 1,024 on this server; got 0"):
        client.chat.completions.create(**{**args, "max_tokens": None}, max_completion_tokens=0)


def test_top_p_zero_is_the_most_likely_token_as_openai_accepts_it(client, lm32):
    args = dict(model=lm32.name, prompt=PROMPT, max_tokens=6)
    greedy = client.completions.create(**args, temperature=0).choices[0].text
    assert client.completions.create(**args, top_p=0, seed=4).choices[0].text == greedy


def test_a_stream_has_its_usage_in_a_last_chunk_of_its_own_only_when_asked(client, lm32):
    args = dict(model=lm32.name, messages=[{"role": "user", "content": "Hi"}], max_tokens=5, seed=1, stream=True)
    plain = list(client.chat.completions.create(**args))
    assert all(chunk.usage is None for chunk in plain) and plain[-1].choices[0].finish_reason == "length"
    asked = list(client.chat.completions.create(**args, stream_options={"include_usage": True}))
    assert len({c.id for c in asked}) == 1  # one completion's chunks
    assert asked[-1].choices == [] and asked[-1].usage.completion_tokens == 5 and all(c.usage is None for c in asked[:-1])
    assert "".join(c.choices[0].delta.content or "" for c in asked[:-1]) == "".join(c.choices[0].delta.content or "" for c in plain)


def test_completion_with_switches_equals_the_library_and_streams_the_same_text(client, lm32, switches):
    body = {"switches": {"sentiment": 6, "formality": -2}}
    done = client.completions.create(model=lm32.name, prompt=PROMPT, max_tokens=16, seed=3, extra_body=body)
    want = ls.generate(lm32, PROMPT, [(switches["sentiment"], 6), (switches["formality"], -2)], seed=3, max_new_tokens=16)[0]
    assert done.choices[0].text == want
    assert done.choices[0].finish_reason in ("length", "stop") and done.usage.completion_tokens <= 16
    fluent = switches["sentiment"].card.fluent_text  # +6 is past it, as the CLI warns (ε 400 was served without a word)
    assert done.model_extra["lmswitch"] == {"seed": 3, "switches": {"sentiment": 6.0, "formality": -2.0}, "adaptive": False,
                                            "beyond_fluent": {"sentiment": f"ε +6 is beyond its fluent range {fluent}: expect text "
                                                              "that reads less well"}}
    unsteered = client.completions.create(model=lm32.name, prompt=PROMPT, max_tokens=16, seed=3)
    assert "beyond_fluent" not in unsteered.model_extra["lmswitch"]
    assert unsteered.choices[0].text == ls.generate(lm32, PROMPT, seed=3, max_new_tokens=16)[0] != want
    chunks = list(client.completions.create(model=lm32.name, prompt=PROMPT, max_tokens=16, seed=3, stream=True, extra_body=body))
    assert len(chunks) > 3 and "".join(c.choices[0].text for c in chunks) == want
    assert chunks[-1].choices[0].finish_reason == done.choices[0].finish_reason


def test_guide_returns_the_librarys_guided_decode(client, lm32, switches):
    """lmswitch's ``guide`` extension field: guided decoding by the switch's judge, as the library does it."""
    done = client.completions.create(model=lm32.name, prompt=PROMPT, max_tokens=12, seed=3, extra_body={"switches": {"sentiment": 4}, "guide": 3})
    want = ls.generate(lm32, PROMPT, [(switches["sentiment"], 4)], seed=3, max_new_tokens=12, guide=3)[0]
    assert done.choices[0].text == want
    with pytest.raises(openai.BadRequestError, match="guide"):
        client.completions.create(model=lm32.name, prompt=PROMPT, max_tokens=4, extra_body={"guide": 40})


def test_repeat_guard_is_the_librarys_and_bad_values_are_refused(client, lm32, switches):
    """lmswitch's ``repeat_guard`` extension field: 0 is the paper's plain steering, as the library decodes it."""
    done = client.completions.create(model=lm32.name, prompt=PROMPT, max_tokens=12, seed=3,
                                     extra_body={"switches": {"sentiment": 6}, "repeat_guard": 0})
    assert done.choices[0].text == ls.generate(lm32, PROMPT, [(switches["sentiment"], 6)], seed=3, max_new_tokens=12, repeat_guard=0)[0]
    with pytest.raises(openai.BadRequestError, match="repeat_guard"):
        client.completions.create(model=lm32.name, prompt=PROMPT, max_tokens=4, extra_body={"repeat_guard": 100})


def test_best_of_returns_the_librarys_likeliest_candidate(client, lm32, switches):
    """OpenAI's ``best_of`` field: the server samples that many candidates and returns the library's choice."""
    done = client.completions.create(model=lm32.name, prompt=PROMPT, max_tokens=12, seed=3, best_of=3, extra_body={"switches": {"sentiment": 6}})
    want = ls.generate(lm32, PROMPT, [(switches["sentiment"], 6)], seed=3, max_new_tokens=12, best_of=3)[0]
    assert done.choices[0].text == want != ls.generate(lm32, PROMPT, [(switches["sentiment"], 6)], seed=3, max_new_tokens=12)[0]
    with pytest.raises(openai.BadRequestError, match="best_of"):
        client.completions.create(model=lm32.name, prompt=PROMPT, max_tokens=4, best_of=40)


def test_chat_completion_equals_the_library_with_the_chat_template(client, lm32, switches):
    messages = [{"role": "user", "content": "Tell me about your day."}]
    body = {"switches": {"sentiment": 6}, "adaptive": True}
    done = client.chat.completions.create(model=lm32.name, messages=messages, max_tokens=14, seed=2, extra_body=body)
    want = ls.generate(lm32, messages[0]["content"], [(switches["sentiment"], 6)], seed=2, max_new_tokens=14, chat=True, adaptive=True)[0]
    assert done.choices[0].message.role == "assistant" and done.choices[0].message.content == want
    stream = client.chat.completions.create(model=lm32.name, messages=messages, max_tokens=14, seed=2, stream=True, extra_body=body)
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == want
    conversation = [{"role": "system", "content": "You are brief."}, *messages,
                    {"role": "assistant", "content": "Fine."}, {"role": "user", "content": "Only fine?"}]
    reply = client.chat.completions.create(model=lm32.name, messages=conversation, max_tokens=10, seed=2)
    assert reply.choices[0].message.content == ls.generate(lm32, [conversation], seed=2, max_new_tokens=10, chat=True)[0]


@pytest.mark.parametrize(("request_args", "error", "said"), [
    ({"extra_body": {"switches": {"no-such-switch": 3}}}, openai.BadRequestError, "unknown switch 'no-such-switch'"),
    ({"extra_body": {"switches": {"sentiment": 1e9}}}, openai.BadRequestError, "out of range"),
    # streamed: refused before the stream starts, not as an event after a 200
    ({"stream": True, "extra_body": {"switches": {"sentiment": 1e9}}}, openai.BadRequestError, "out of range: .*fluent range is"),
    # the Python client's argument sent as a field (by a raw-JSON client) would leave the text unsteered
    ({"extra_body": {"extra_body": {"switches": {"sentiment": 4}}}}, openai.BadRequestError, "extra_body is an argument of the OpenAI"),
    ({"extra_body": {"switches": {"sentiment": "strong"}}}, openai.BadRequestError, "switches.sentiment: Input should be a number"),
    ({"extra_body": {"switch": {"sentiment": 4}}}, openai.BadRequestError, "unknown field 'switch': did you mean 'switches'"),
    ({"extra_body": {"generation_budget": 1}}, openai.BadRequestError, "generation_budget .* give it with adaptive=true"),
    ({"seed": 2**32}, openai.BadRequestError, "seed must be an integer from 0 to 4,294,967,295"),
    ({"temperature": -1}, openai.BadRequestError, "temperature must be"),
    ({"max_tokens": 10**6}, openai.BadRequestError, "more than this server generates"),
    ({"max_tokens": 0}, openai.BadRequestError, "max_tokens must be an integer from 1 to 1,024 on this server"),
    # asked for and not implemented: refused, never ignored (a client would read None where it asked for log-probabilities)
    ({"logprobs": 2}, openai.BadRequestError, "logprobs: log-probabilities are not returned"),
    ({"echo": True}, openai.BadRequestError, "echo: the prompt is not echoed"),
    ({"presence_penalty": 1.0}, openai.BadRequestError, "presence_penalty: penalties are not applied"),
    ({"logit_bias": {"28": -100}}, openai.BadRequestError, "logit_bias"),
    ({"suffix": " end."}, openai.BadRequestError, "suffix"),
    ({"prompt": "hello " * 9000}, openai.BadRequestError, "reads at most 2,048 per request"),  # too long: never cut silently
    ({"n": 2}, openai.BadRequestError, "one choice per request"),
    ({"stop": ["."]}, openai.BadRequestError, "stop sequences are not supported"),
    ({"model": "gpt-9"}, openai.NotFoundError, "unknown model 'gpt-9'"),
])
def test_bad_requests_get_openai_errors_with_clear_messages(client, request_args, error, said):
    args = {"model": None, "prompt": PROMPT, "max_tokens": 4, **request_args}
    args["model"] = args["model"] or client.models.list().data[0].id
    with pytest.raises(error, match=said):
        client.completions.create(**args)


def test_a_streamed_requests_bad_eps_is_a_400_naming_the_switch(app_server):
    """A raw client's streamed request with ε NaN: refused with a 400 whose param names the switch's field, before any
    event is sent (it came as an error event after a 200)."""
    body = b'{"model": "smollm2-135m", "prompt": "Hi", "max_tokens": 2, "stream": true, "switches": {"sentiment": NaN}}'
    answer = httpx.post(f"{app_server.url}/v1/completions", content=body, timeout=60,
                        headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == "switches.sentiment" and "must be a finite number" in answer.json()["error"]["message"]


@pytest.mark.parametrize(("body", "said"), [
    (b'{"model": "smollm2-135m", "max_tokens": 3}', "^prompt is required$"),
    (b"hello", r"^the body is not JSON \(expected value at line 1 column 1\): send a JSON object"),
    (b"[]", r"^the body must be a JSON object; got \[\]$"),
    (b'{"prompt": "Hi", "switches": {"sentiment": null}}', r"Input should be a number \(got null\)$"),
    (b'{"prompt": "Hi", "max_tokens": "5"}', r'\(got "5"\)$'),
])
def test_a_malformed_body_is_told_in_the_clients_terms(app_server, body, said):
    """What pydantic says of a body, without Python's spelling of it (b'hello', None, the whole body as a dict)."""
    answer = httpx.post(f"{app_server.url}/v1/completions", content=body, timeout=60,
                        headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"})
    assert answer.status_code == 400 and re.search(said, answer.json()["error"]["message"]), answer.text


@pytest.mark.parametrize(("method", "path", "said"), [
    ("GET", "/v1/chat/completions", "takes POST, with a JSON body; got GET"),
    ("PUT", "/v1/completions", "takes POST, with a JSON body; got PUT"),
    ("POST", "/v1/models", "/v1/models takes GET; got POST"),
    ("DELETE", "/v1/models/smollm2-135m", "takes GET; got DELETE"),
])
def test_a_wrong_method_is_answered_with_an_openai_error(app_server, method, path, said):
    answer = httpx.request(method, f"{app_server.url}{path}", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30)
    assert answer.status_code == 405 and said in answer.json()["error"]["message"], answer.text
    assert answer.headers["allow"] == ("POST" if "POST," in said else "GET")


def test_the_api_key_is_required_and_oversized_bodies_are_refused(app_server, client):
    stranger = openai.OpenAI(base_url=f"{app_server.url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError, match="API key"):
        stranger.models.list()
    with pytest.raises(openai.AuthenticationError):
        stranger.completions.create(model="smollm2-135m", prompt=PROMPT)
    big = httpx.post(f"{app_server.url}/v1/completions", content=b'{"prompt": "' + b"x" * 1_100_000 + b'"}',
                     headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60)
    assert big.status_code == 413 and big.json()["error"]["code"] == "request_too_large"
    assert client.completions.create(model="smollm2-135m", prompt=PROMPT, max_tokens=2, seed=0).choices[0].text  # still serving
    models = httpx.get(f"{app_server.url}/v1/models", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30).json()
    assert models["lmswitch"]["in_flight"] == 0  # every request of this module gave its slot back


@pytest.mark.parametrize("extra", [{}, {"guide": 4, "switches": {"sentiment": 4}}], ids=["plain", "guided"])
def test_a_request_whose_client_left_stops_generating(app_server, client, lm32, extra):
    """A non-streaming request of the longest length, whose client gives up after a second: the server notices the
    disconnect and stops its generation (which would run for tens of seconds), freeing its slot within seconds."""
    import time

    def in_flight() -> int:
        models = httpx.get(f"{app_server.url}/v1/models", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30).json()
        return models["lmswitch"]["in_flight"]

    assert in_flight() == 0
    impatient = client.with_options(timeout=1.0)
    with pytest.raises(openai.APITimeoutError):
        impatient.completions.create(model=lm32.name, prompt=PROMPT, max_tokens=1024, seed=5, temperature=1.5, top_p=1.0,
                                     extra_body=extra)
    left = time.monotonic()
    while in_flight() and time.monotonic() - left < 6:
        time.sleep(0.1)
    assert in_flight() == 0, "the abandoned request is still generating"
    done = client.completions.create(model=lm32.name, prompt=PROMPT, max_tokens=4, seed=3)  # serving as before
    assert done.usage.completion_tokens <= 4


@pytest.mark.parametrize("extra", [{}, {"guide": 4, "switches": {"sentiment": 4}}], ids=["plain", "guided"])
def test_a_streamed_request_whose_client_left_stops_generating(app_server, client, lm32, extra):
    """The same for a streamed request: a plain one whose client closes the stream after two chunks, a guided one (no
    chunk before its end) whose client gives up after a second. Its generation stops and its slot is free within seconds,
    without waiting for the garbage collector."""
    import time

    def in_flight() -> int:
        models = httpx.get(f"{app_server.url}/v1/models", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30).json()
        return models["lmswitch"]["in_flight"]

    assert in_flight() == 0
    args = dict(model=lm32.name, prompt=PROMPT, max_tokens=1024, seed=5, temperature=1.5, top_p=1.0, stream=True, extra_body=extra)
    if extra:
        with pytest.raises(openai.APITimeoutError):
            list(client.with_options(timeout=1.0).completions.create(**args))
    else:
        stream = client.completions.create(**args)
        chunks = iter(stream)
        next(chunks), next(chunks)
        stream.close()
    left = time.monotonic()
    while in_flight() and time.monotonic() - left < 6:
        time.sleep(0.1)
    assert in_flight() == 0, "the abandoned stream is still generating"
