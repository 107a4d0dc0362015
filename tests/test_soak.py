"""Soak and fuzz (issue 17): the launched app under steady load for a minute, and generated bad input thrown at the
OpenAI-compatible endpoints."""

from __future__ import annotations

import json
import string
import threading
import time

import httpx
import openai
import pytest
from conftest import API_KEY, random_switch
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lmswitch.webapp.backend import Backend
from lmswitch.webapp.openai_api import OpenAIApi

SOAK_SECONDS = 60


@pytest.mark.real_model
@pytest.mark.slow
def test_a_minute_of_four_clients_gives_no_errors_and_no_memory_growth(app_server):
    """Four clients send steered completions for a minute; the server's memory after the first quarter may not grow by
    more than 10 % (the hour-long version: benchmarks/load.py --clients 4 --seconds 3600)."""
    app_server.wait_ready()
    status = httpx.get(f"{app_server.url}/v1/models", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30).json()["lmswitch"]
    assert status["in_flight"] == 0, status  # no earlier test left a request counted in
    errors: list[str] = []
    done = [0]
    deadline = time.monotonic() + SOAK_SECONDS
    settings_ = [{"sentiment": 6}, {"formality": -2}, {"detox": 4}, {}]

    def client(k: int) -> None:
        c = openai.OpenAI(base_url=f"{app_server.url}/v1", api_key=API_KEY, max_retries=0, timeout=60)
        n = 0
        while time.monotonic() < deadline:
            try:
                response = c.completions.create(model="smollm2-135m", prompt="My weekend was", max_tokens=12,
                                                seed=k * 10_000 + n, stream=n % 2 == 0, extra_body={"switches": settings_[k]})
                if n % 2 == 0:
                    list(response)  # a stream is read to its end, as a client does
                done[0] += 1
            except Exception as err:
                errors.append(f"{type(err).__name__}: {err}"[:200])
            n += 1

    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    time.sleep(SOAK_SECONDS / 4)
    warm = app_server.rss_bytes()
    for t in threads:
        t.join()
    grown = app_server.rss_bytes() / warm - 1
    print(f"soak: {done[0]} requests in {SOAK_SECONDS} s, {len(errors)} errors, memory after warm-up {grown:+.1%}")
    assert not errors and done[0] > 20, errors[:3]
    assert grown <= 0.10, f"the server's memory grew {grown:.1%} after warm-up"


@pytest.fixture(scope="module")
def api(llama_lm, tmp_path_factory):
    folder = tmp_path_factory.mktemp("switches")
    random_switch(llama_lm, seed=1, scale=20.0, name="mood").save(folder / "mood.safetensors")
    app = FastAPI()
    app.include_router(OpenAIApi(Backend.with_model(llama_lm, folder), api_key="k").router())
    return TestClient(app, raise_server_exceptions=False), folder


junk = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                 st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40),
                 st.text(alphabet=string.printable + "\x00\x07\ud7ff", max_size=20), st.lists(st.integers(), max_size=3),
                 st.dictionaries(st.text(max_size=8), st.integers(), max_size=3))
names = st.one_of(st.sampled_from(["mood", "../mood", "/etc/passwd", "mood.safetensors", "", "CON", "a" * 300]), st.text(max_size=30))
bodies = st.fixed_dictionaries({}, optional={
    "prompt": st.one_of(junk, st.text(max_size=200)), "max_tokens": junk, "temperature": junk, "top_p": junk, "seed": junk,
    "stream": junk, "n": junk, "stop": junk, "model": junk, "adaptive": junk, "kl_budget": junk,
    "switches": st.one_of(junk, st.dictionaries(names, st.one_of(junk, st.floats(-1e6, 1e6)), max_size=20)),
    "messages": st.one_of(junk, st.lists(st.fixed_dictionaries({"role": junk, "content": junk}), max_size=3)),
})


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(body=bodies, chat=st.booleans(), raw=st.one_of(st.none(), st.binary(max_size=64)))
def test_generated_bad_input_gets_a_clear_error_and_the_server_keeps_serving(api, body, chat, raw):
    client, folder = api
    before = sorted(p.name for p in folder.iterdir())
    path = "/v1/chat/completions" if chat else "/v1/completions"
    headers = {"Authorization": "Bearer k", "Content-Type": "application/json"}
    # encoded here: httpx refuses NaN and infinities, which a careless client sends as the literals NaN and Infinity
    r = client.post(path, content=raw if raw is not None else json.dumps(body).encode(), headers=headers)
    assert r.status_code in (200, 400, 404, 413, 503), r.text[:300]
    if r.status_code != 200:
        error = r.json()["error"]
        assert error["message"] and error["type"]
    elif body.get("stream") is not True:
        assert "choices" in r.json()
    assert sorted(p.name for p in folder.iterdir()) == before  # nothing written beside the switch library
    ok = client.post("/v1/completions", json={"prompt": "alpha beta", "max_tokens": 2, "seed": 0}, headers=headers)
    assert ok.status_code == 200  # still serving
