"""The OpenAI-compatible endpoints' limits, in process (FastAPI's test client, the library on a tiny model): a request over
capacity is refused at once with "busy, retry", a streaming request's slot comes back however its stream ends, and token
caps are explicit. The real server and the official client are tested in test_openai_api.py."""

from __future__ import annotations

import pytest
from conftest import random_switch
from fastapi import FastAPI
from fastapi.testclient import TestClient

from lmswitch.serve.limits import MAX_NEW_TOKENS
from lmswitch.webapp.backend import Backend
from lmswitch.webapp.openai_api import OpenAIApi


@pytest.fixture
def client(llama_lm, tmp_path):
    random_switch(llama_lm, seed=1, scale=20.0, name="mood").save(tmp_path / "mood.safetensors")
    app = FastAPI()
    app.include_router(OpenAIApi(Backend.with_model(llama_lm, tmp_path), max_in_flight=1).router())
    return TestClient(app)


def ask(client, **body):
    return client.post("/v1/completions", json={"prompt": "alpha beta", "max_tokens": 4, "seed": 0, **body})


def test_over_capacity_a_request_is_refused_at_once_and_served_again_when_a_slot_frees(client):
    with client.stream("POST", "/v1/completions", json={"prompt": "alpha beta", "max_tokens": 4, "seed": 0, "stream": True}) as held:
        busy = ask(client)
        assert busy.status_code == 503 and busy.json()["error"]["code"] == "busy" and "retry" in busy.json()["error"]["message"]
        chunks = [line for line in held.iter_lines() if line.startswith("data: ")]
    assert chunks[-1] == "data: [DONE]"
    done = ask(client, switches={"mood": 3})
    assert done.status_code == 200 and done.json()["lmswitch"]["switches"] == {"mood": 3.0}
    assert ask(client).status_code == 200  # the non-streaming request gave its slot back too


def test_a_stream_left_unread_gives_its_slot_back(client):
    with client.stream("POST", "/v1/completions", json={"prompt": "alpha beta", "max_tokens": 4, "stream": True}):
        pass  # the client goes away without reading
    assert ask(client).status_code == 200


def test_bad_requests_never_take_a_slot(client):
    for _ in range(3):
        assert ask(client, max_tokens=MAX_NEW_TOKENS + 1).status_code == 400
        assert ask(client, switches={"nope": 1}).status_code == 400
    refused = ask(client, max_tokens=MAX_NEW_TOKENS + 1).json()["error"]
    assert refused["param"] == "max_tokens" and f"({MAX_NEW_TOKENS:,})" in refused["message"]
    assert ask(client).status_code == 200


def test_the_api_key_takes_the_bearer_scheme_in_any_case_and_bodies_are_sized_before_reading(llama_lm, tmp_path):
    app = FastAPI()
    app.include_router(OpenAIApi(Backend.with_model(llama_lm, tmp_path), api_key="k1").router())
    client = TestClient(app)
    assert client.get("/v1/models", headers={"Authorization": "bearer k1"}).status_code == 200
    assert client.get("/v1/models", headers={"Authorization": "k1"}).status_code == 401  # no scheme: refused
    big = client.post("/v1/completions", content=b"{}", headers={"Authorization": "Bearer k1", "Content-Length": "2000000"})
    assert big.status_code == 413


def test_a_prompt_that_cannot_be_rendered_is_a_400_before_any_stream(llama_lm, tmp_path):
    app = FastAPI()
    app.include_router(OpenAIApi(Backend.with_model(llama_lm, tmp_path)).router())
    client = TestClient(app)
    binary = client.post("/v1/completions", json={"prompt": "a\x00b", "stream": True})
    assert binary.status_code == 400 and "NUL" in binary.json()["error"]["message"]
    chat = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "stream": True})
    assert chat.status_code == 400 and "no chat template" in chat.json()["error"]["message"]
