"""The MCP tools of the real app (``python app.py --mcp``), driven with the official ``mcp`` client."""

from __future__ import annotations

import asyncio
import json

import pytest
from conftest import EXAMPLES, lines
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

import lmswitch as ls
from lmswitch.core.options import SAMPLING, TrainConfig
from lmswitch.serve.limits import MAX_NEW_TOKENS, MAX_TRAIN_STEPS

pytestmark = [pytest.mark.real_model, pytest.mark.slow]  # a launched app.py on the embedded model


def call(server, steps: list[tuple[str, dict]]) -> tuple[list, list[tuple[bool, object]]]:
    """List the server's tools, then call each ``(tool, arguments)`` in turn in one MCP session."""

    async def run():
        async with streamablehttp_client(f"{server.url}/gradio_api/mcp/") as (read, write, _), ClientSession(read, write) as session:
            await session.initialize()
            tools = (await session.list_tools()).tools
            results = []
            for name, arguments in steps:
                r = await session.call_tool(name, arguments)
                text = r.content[0].text
                try:
                    value = json.loads(text)
                except ValueError:
                    value = text
                results.append((r.isError, value))
            return tools, results

    server.wait_ready()
    return asyncio.run(run())


def test_the_tools_are_typed_and_described(app_server):
    tools, _ = call(app_server, [])
    by_name = {t.name: t for t in tools}
    assert set(by_name) == {"list_switches", "steer_text", "train_from_text", "highlight_text", "measure_style"}  # page endpoints hidden
    steer = by_name["steer_text"].inputSchema
    assert steer["required"] == ["prompt"]
    assert {k: v["type"] for k, v in steer["properties"].items()} == {
        "prompt": "string", "switches": "string", "max_new_tokens": "integer", "seed": "integer", "adaptive": "boolean"}
    assert by_name["highlight_text"].inputSchema["properties"]["eps"]["type"] == "number"
    # the descriptions give this server's limits and defaults from their constants (they were written out by hand)
    assert f"1 to {MAX_NEW_TOKENS:,} ({SAMPLING.max_new_tokens} by default)" in steer["properties"]["max_new_tokens"]["description"]
    assert f"up to {MAX_TRAIN_STEPS:,}" in by_name["train_from_text"].inputSchema["properties"]["steps"]["description"]
    assert by_name["train_from_text"].inputSchema["properties"]["steps"]["default"] == TrainConfig().steps
    # Gradio's launch warning about tools with a gr.State input was about the page's endpoints, which are not tools
    assert "Launching MCP server" in app_server.log_path.read_text() and "gr.State" not in app_server.log_path.read_text()
    for tool in tools:
        assert len(tool.description) > 40 and ",," not in tool.description  # (Gradio joins a docstring's lines with ",")
        assert all(len(p.get("description", "")) > 10 for p in tool.inputSchema["properties"].values()), tool.name


def test_steer_highlight_and_measure_over_mcp(app_server, lm32):
    _, results = call(app_server, [
        ("list_switches", {}),
        ("steer_text", {"prompt": "My weekend was", "switches": "sentiment=6", "max_new_tokens": 12, "seed": 1}),
        ("highlight_text", {"text": "The staff were friendly, but you are a stupid idiot.", "switch": "detox", "eps": -4}),
        ("measure_style", {"text": "What a wonderful, kind and generous host she was!", "switches": "sentiment"}),
        ("steer_text", {"prompt": "x", "switches": "no-such-switch=3"}),
        ("highlight_text", {"text": "x", "switch": "detox", "spans": 0}),
        # over the server's caps (lmswitch.serve.limits): refused at once, not minutes of the compute thread
        ("steer_text", {"prompt": "x", "max_new_tokens": 2000}),
        ("steer_text", {"prompt": "word " * 3000}),
        ("measure_style", {"text": "Nice. " * 2000}),
    ])
    (e0, listed), (e1, steered), (e2, spans), (e3, meter), (e4, unknown), (e5, bad), *capped = results
    assert not any((e0, e1, e2, e3))
    assert {s["name"] for s in listed["switches"]} >= {"sentiment", "detox", "formality"} and listed["model"] == lm32.name
    assert steered["steered"] != steered["unsteered"] and steered["setting"] == {"sentiment": 6.0}
    sentiment = ls.load_switch("sentiment", lm32)  # the switch and ε applied, not only echoed
    assert steered["steered"] == ls.generate(lm32, "My weekend was", [(sentiment, 6.0)], seed=1, max_new_tokens=12)[0]
    assert steered["unsteered"] == ls.generate(lm32, "My weekend was", seed=1, max_new_tokens=12)[0]
    assert "idiot" in spans["spans"][0]["text"] and spans["label"] == "toxic"
    assert meter["switches"][0]["best_eps"] > 0
    assert e4 and "no-such-switch" in unknown and "available" in unknown
    assert e5 and "spans must be an integer from 1" in bad and "n_spans" not in bad  # the tool's own parameter name
    assert all(x == round(x, 6) for x in meter["switches"][0]["grid"])  # not linspace's -3.1999999999999993
    assert not unknown.startswith(("'", '"'))  # the message as written, not its repr
    said = ["more than this server generates per request (1,024)", "this server reads at most 2,048", "reads at most 2,000"]
    assert [error for error, _ in capped] == [True] * 3 and all(s in text for s, (_, text) in zip(said, capped, strict=True))


def test_a_switch_trained_over_mcp_steers_in_the_next_call(app_server, lm32):
    pos, neg = lines(EXAMPLES / "sentiment_positive.txt")[:30], lines(EXAMPLES / "sentiment_negative.txt")[:30]
    _, results = call(app_server, [
        ("train_from_text", {"name": "mcp-mood", "positive": "\n".join(pos), "negative": "\n".join(neg), "steps": 60}),
        ("list_switches", {}),
        ("steer_text", {"prompt": "My weekend was", "switches": "mcp-mood=4", "max_new_tokens": 10, "seed": 2}),
        ("train_from_text", {"name": "bad", "positive": "one line", "mode": "poems"}),
        ("train_from_text", {"name": "bad", "positive": "one line", "negative": " "}),
        ("train_from_text", {"name": "bad", "positive": "one line", "negative": "another", "steps": -1}),
    ])
    (e0, trained), (_, listed), (e2, steered), (e3, refused), (e4, empty), (e5, steps) = results
    assert e4 and empty.startswith("negative is empty: give its text") and "upload" not in empty  # no page to upload to
    assert e5 and f"from 1 to {MAX_TRAIN_STEPS:,} on this server" in steps  # the server's cap, not the library's
    assert not e0 and trained["name"] == "mcp-mood" and trained["fluent_eps"] is not None and trained["promotes"]
    assert trained["heldout_gain"] is not None and "held-out" in trained["advice"] and isinstance(trained["may_not_generalise"], bool)
    assert "mcp-mood" in {s["name"] for s in listed["switches"]}
    assert not e2 and steered["steered"] != steered["unsteered"]
    # the switch trained, not only its name: the library trains the same switch from the same lines (a fixed seed) and
    # writes the same text with it at ε 4
    same = ls.train_switch(lm32, pos, neg, name="mcp-mood", config=TrainConfig(steps=60))
    assert steered["steered"] == ls.generate(lm32, "My weekend was", [(same, 4.0)], seed=2, max_new_tokens=10)[0]
    assert e3 and "mode must be one of" in refused
