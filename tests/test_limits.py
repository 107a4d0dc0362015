"""A shared server's caps (lmswitch.serve.limits) are the ones its MCP tools describe to their callers."""

from __future__ import annotations

import pytest

from lmswitch.core.options import GENERATION_BUDGET, SAMPLING, SEED, SamplingOptions
from lmswitch.serve.limits import MAX_METER_CHARS, MAX_NEW_TOKENS, MAX_PROMPT_TOKENS, MAX_TRAIN_STEPS, check_new_tokens
from lmswitch.webapp.mcp_tools import McpTools


def test_the_mcp_tools_describe_the_servers_caps_and_defaults():
    steer, measure, train = McpTools.steer_text.__doc__, McpTools.measure_style.__doc__, McpTools.train_from_text.__doc__
    assert f"at most {MAX_PROMPT_TOKENS:,} tokens" in steer and f"1 to {MAX_NEW_TOKENS:,} ({SAMPLING.max_new_tokens} by default)" in steer
    assert f"({SEED} by default)" in steer and f"{GENERATION_BUDGET:g} nats of steering" in steer
    assert f"at most {MAX_METER_CHARS:,} characters" in measure
    assert f"up to {MAX_TRAIN_STEPS:,}" in train


@pytest.mark.parametrize(("tokens", "said"), [(0, "from 1 to 1,024 on this server; got 0"), (-3, "from 1 to 1,024 on this server"),
                                              (MAX_NEW_TOKENS + 1, "more than this server generates per request \\(1,024\\)")])
def test_new_tokens_outside_the_servers_range_name_its_range(tokens, said):
    """Not the library's range, which is the model's context (MCP's steer_text said "from 1 to 8191" for 0)."""
    with pytest.raises(ValueError, match=said):
        check_new_tokens(SamplingOptions(max_new_tokens=tokens))
    check_new_tokens(SamplingOptions(max_new_tokens=MAX_NEW_TOKENS))
