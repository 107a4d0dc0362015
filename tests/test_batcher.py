"""The request batcher: concurrent requests decoded together, each row as it would be alone."""

from __future__ import annotations

import queue
import threading
from dataclasses import replace

import pytest
import torch
from conftest import SCALED_FAMILIES, random_switch
from tiny import held, judged_switch, run_together

import lmswitch as ls
from lmswitch.core.attention import batch_invariant
from lmswitch.core.generate import encode_prompts, generate_tokens
from lmswitch.core.options import SamplingOptions
from lmswitch.core.pause import add_layer_pauses
from lmswitch.core.steering import steer
from lmswitch.io.resources import shipped_switch_path
from lmswitch.serve import limits
from lmswitch.serve.batcher import Batcher, Busy, Row
from lmswitch.serve.compute import ComputeThread

WORDS = "alpha beta gamma delta"


def _judged(lm):
    return judged_switch(lm, seed=1, scale=20.0, judge_seed=0, name="a")


@pytest.mark.parametrize("rolling", [True, False], ids=["rows-join-a-running-decode", "one-whole-decode-per-batch"])
def test_requests_waiting_together_share_one_decode_and_each_gets_its_solo_tokens(llama_lm, rolling):
    a, b = random_switch(llama_lm, seed=1, scale=20.0, name="a"), random_switch(llama_lm, seed=2, scale=20.0, name="b")
    requests = [(WORDS, [(a, 4.0)], 1, 6), ("beta", [], 2, 3), (WORDS + " " + WORDS, [(b, -3.0), (a, 1.0)], 3, 8), ("gamma", [(a, 4.0)], 1, 1)]
    batcher = Batcher(llama_lm, ComputeThread())
    assert batcher.rolling is not None  # llama's cache can be merged
    if not rolling:
        batcher.rolling = None  # the path of models with sliding-window caches (Gemma 3)
    rows = run_together(batcher, requests)
    assert batcher.batches == 1 and batcher.rows == 4
    for row, (prompt, setting, seed, n) in zip(rows, requests, strict=True):
        solo = generate_tokens(llama_lm, [prompt], [setting], [seed], SamplingOptions(max_new_tokens=n))
        assert row.text == solo.texts[0] and len(row.new_ids) <= n
        assert row.new_ids == solo.new_ids[0][: int(solo.new_mask[0].sum())].tolist()


def test_adaptive_rows_drawn_together_each_spend_their_own_budget_as_alone(llama_lm):
    """One sampler draws all rows of a step; each row's steering budget is charged for its own token only, so a row
    whose budget runs out stops being steered at the same token as alone (budgets small enough to run out mid-way)."""
    a, b = random_switch(llama_lm, seed=1, scale=20.0, name="a"), random_switch(llama_lm, seed=2, scale=20.0, name="b")
    options = SamplingOptions(max_new_tokens=10, adaptive=True, generation_budget=0.05)
    requests = [(WORDS, [(a, 6.0)], 1), ("beta", [], 2), ("gamma delta", [(b, -4.0)], 3), (WORDS, [(a, 6.0)], 4)]
    batcher = Batcher(llama_lm, ComputeThread())
    release = held(batcher.compute)
    streams = [batcher.stream(p, s, seed=seed, options=options) for p, s, seed in requests]
    release.set()
    rows = [list(stream)[-1] for stream in streams]
    assert batcher.batches == 1
    for row, (prompt, setting, seed) in zip(rows, requests, strict=True):
        solo = generate_tokens(llama_lm, [prompt], [setting], [seed], options)
        assert row.new_ids == solo.new_ids[0][: int(solo.new_mask[0].sum())].tolist()
    plain = run_together(Batcher(llama_lm, ComputeThread()), [(p, s, seed, 10) for p, s, seed in requests])
    assert [r.new_ids for r in rows] != [r.new_ids for r in plain]  # the budgets did change the steered rows


def unsteered_logprobs(lm, prompt: str, new_ids: list[int]) -> list[float]:
    """Each new token's log-probability under the unsteered model, from one full forward pass of prompt + tokens."""
    ids, _ = encode_prompts(lm, [prompt], SamplingOptions(max_new_tokens=len(new_ids)))
    full = torch.cat([ids, torch.tensor([new_ids])], dim=1)
    with torch.no_grad():
        logp = torch.log_softmax(lm.model(input_ids=full).logits[0].float(), -1)
    P = ids.shape[1]
    return [float(logp[P - 1 + i, t]) for i, t in enumerate(new_ids)]


def test_rows_decoded_together_carry_their_tokens_unsteered_log_probabilities(llama_lm):
    """Scored while decoding (no body pass afterwards): each token's log-probability under the unsteered model, as a
    full forward pass of the prompt and the tokens gives it; steered or not, whoever shared the decode."""
    a = random_switch(llama_lm, seed=1, scale=20.0, name="a")
    requests = [(WORDS, [(a, 4.0)], 1, 8), ("beta", [], 2, 6), (WORDS + " " + WORDS, [(a, -3.0)], 3, 5)]
    batcher = Batcher(llama_lm, ComputeThread())
    rows = run_together(batcher, requests)
    scored = batcher.logprobs(rows)  # all rows in one head pass
    for row, logprobs, (prompt, *_) in zip(rows, scored, requests, strict=True):
        assert row.hidden is not None and len(logprobs) == len(row.hidden) == len(row.text_ids) > 0
        assert logprobs == pytest.approx(unsteered_logprobs(llama_lm, prompt, row.text_ids), abs=1e-4)
        assert batcher.logprobs([row]) == [logprobs]  # alone: the same
    with steer(llama_lm, [(a, 4.0)]):  # what a hook that saw the steered head input would have recorded
        steered = unsteered_logprobs(llama_lm, WORDS, rows[0].text_ids)
    assert max(abs(x - y) for x, y in zip(scored[0], steered, strict=True)) > 0.01  # 100× the tolerance above
    assert [row.logprobs is not None for row in rows] == [False, True, False]  # only the unsteered row's came free
    recomputed = batcher.logprobs([replace(rows[1], logprobs=None)])[0]  # from its head inputs instead
    assert list(rows[1].logprobs) == recomputed  # bit for bit: the same logits, the same log-softmax
    whole = Batcher(llama_lm, ComputeThread())
    whole.rolling = None  # a whole decode (sliding-window caches, best of n) records none: its rows are scored by text
    assert run_together(whole, requests[:1])[0].hidden is None


def test_streams_grow_token_by_token_and_end_with_the_row(llama_lm):
    batcher = Batcher(llama_lm, ComputeThread())
    items = list(batcher.stream(WORDS, [], seed=0, options=SamplingOptions(max_new_tokens=5)))
    *partial, row = items
    assert isinstance(row, Row) and all(isinstance(t, str) for t in partial) and 1 <= len(partial) <= 5
    assert partial[-1] == row.text and row.prompt_tokens == 4


def test_different_sampling_settings_go_to_different_batches(llama_lm):
    batcher = Batcher(llama_lm, ComputeThread())
    release = held(batcher.compute)
    hot = batcher.stream(WORDS, [], seed=0, options=SamplingOptions(max_new_tokens=3, temperature=1.0))
    greedy = batcher.stream(WORDS, [], seed=0, options=SamplingOptions(max_new_tokens=3, temperature=0.0))
    release.set()
    rows = [list(hot)[-1], list(greedy)[-1]]
    assert batcher.batches == 2
    assert rows[1].text == generate_tokens(llama_lm, [WORDS], [[]], [0], SamplingOptions(max_new_tokens=3, temperature=0.0)).texts[0]


def test_over_capacity_busy_at_once_and_bad_values_refused_before_queueing(llama_lm):
    batcher = Batcher(llama_lm, ComputeThread(), max_waiting=2)
    release = held(batcher.compute)
    streams = [batcher.stream(WORDS, [], seed=k, options=SamplingOptions(max_new_tokens=2)) for k in range(2)]
    with pytest.raises(Busy, match="busy.*retry"):
        batcher.stream(WORDS, [], seed=9, options=SamplingOptions(max_new_tokens=2))
    with pytest.raises(ValueError, match="max_new_tokens must be an integer from 1 to 1,024 on this server"):
        batcher.stream(WORDS, [], seed=0, options=SamplingOptions(max_new_tokens=0))
    with pytest.raises(ValueError, match="seed"):
        batcher.stream(WORDS, [], seed=-1, options=SamplingOptions(max_new_tokens=2))
    release.set()
    assert all(isinstance(list(s)[-1], Row) for s in streams)
    assert isinstance(batcher.generate(WORDS, [], seed=9, options=SamplingOptions(max_new_tokens=2)), Row)  # serving again


def test_a_request_dropped_before_its_batch_is_skipped_and_others_are_served(llama_lm):
    batcher = Batcher(llama_lm, ComputeThread())
    release = held(batcher.compute)
    dropped = batcher.stream(WORDS, [], seed=0, options=SamplingOptions(max_new_tokens=4))
    kept = batcher.stream("beta", [], seed=1, options=SamplingOptions(max_new_tokens=4))
    dropped.close()  # the client went away before its batch
    release.set()
    assert isinstance(list(kept)[-1], Row) and list(dropped) == []
    assert batcher.rows == 1  # the dropped request was never decoded


@pytest.mark.real_model
def test_the_embedded_model_batched_in_float32_gives_every_request_its_solo_text(lm32):
    sw = {n: ls.load_switch(shipped_switch_path(n), lm32) for n in ("sentiment", "detox", "formality")}
    requests = [("My weekend was", [(sw["sentiment"], 6.0)], 1, 20), ("The new library opened", [(sw["formality"], 2.0)], 2, 20),
                ("I think that", [(sw["detox"], 4.0)], 3, 12), ("Yesterday the mayor said", [], 4, 20),
                ("My weekend was", [(sw["sentiment"], -6.0)], 5, 16), ("Honestly,", [(sw["sentiment"], 3.0), (sw["formality"], -2.0)], 6, 20)]
    batcher = Batcher(lm32, ComputeThread())
    rows = run_together(batcher, requests)
    assert batcher.batches == 1
    for row, (prompt, setting, seed, n) in zip(rows, requests, strict=True):
        with batch_invariant():  # the batcher's arithmetic, for the library's plain decode of the request alone
            assert row.text == generate_tokens(lm32, [prompt], [setting], [seed], SamplingOptions(max_new_tokens=n)).texts[0]


@pytest.mark.real_model
def test_the_embedded_model_in_the_dtype_it_serves_gives_every_request_beside_others_its_text_alone(lm):
    """bfloat16 where the CPU is fast at it: prompts of different lengths (so rows are left-padded), steered rows and
    their unsteered twins, 8 rows decoded together; each text equals the same request served alone (a fresh server)."""
    sw = {n: ls.load_switch(shipped_switch_path(n), lm) for n in ("sentiment", "detox", "formality")}
    prompts = ["My weekend was", "The new library on the corner of our street opened", "I think that the mayor", "Honestly,"]
    settings = [[(sw["sentiment"], 6.0)], [(sw["formality"], 2.0)], [(sw["detox"], 4.0)], [(sw["sentiment"], 3.0), (sw["formality"], -2.0)]]
    requests = [(p, s, 10 + k, 20) for k, (p, s) in enumerate(zip(prompts, settings, strict=True))]
    requests += [(p, [], seed, n) for p, _, seed, n in requests]  # the twins, as /generate asks for them
    together = Batcher(lm, ComputeThread())
    rows = run_together(together, requests)
    assert together.batches == 1  # the 8 rows were decoded together
    alone = Batcher(lm, ComputeThread())
    for row, (prompt, setting, seed, n) in zip(rows, requests, strict=True):
        assert row.new_ids == alone.generate(prompt, setting, seed=seed, options=SamplingOptions(max_new_tokens=n)).new_ids, prompt


def test_a_request_joins_a_running_decode_instead_of_waiting_for_it(llama_lm):
    batcher = Batcher(llama_lm, ComputeThread())
    options = SamplingOptions(max_new_tokens=40, temperature=0.0)
    long = batcher.stream(WORDS, [], seed=0, options=options)
    assert isinstance(next(long), str)  # its decode is running
    short = batcher.generate("beta", [(random_switch(llama_lm, seed=1, scale=20.0), 3.0)], seed=1,
                             options=SamplingOptions(max_new_tokens=3, temperature=0.0))
    rest = list(long)
    assert len(rest) > 5 and batcher.batches == 2  # the long one was still running when the short one was done
    solo = generate_tokens(llama_lm, [WORDS], [[]], [0], options)
    assert rest[-1].text == solo.texts[0]
    assert short.text == generate_tokens(llama_lm, ["beta"], [[(random_switch(llama_lm, seed=1, scale=20.0), 3.0)]], [1],
                                         SamplingOptions(max_new_tokens=3, temperature=0.0)).texts[0]


def test_a_decode_that_never_empties_keeps_its_cache_no_longer_than_its_longest_live_row(llama_lm):
    """Under steady load rows keep joining before the last one leaves: the columns that were padding for every row left
    are cut, so the cache (and each step's cost) follows the live rows instead of growing for as long as the server runs."""
    from lmswitch.serve.batcher import _Request, _Rolling

    options = SamplingOptions(max_new_tokens=6, temperature=0.0)
    rolling = _Rolling(llama_lm)
    rows: list = []
    for k in range(6):  # a new request joins every 3 steps; each lives 6 tokens
        request = _Request(" ".join([WORDS] * (3 - k % 3)), [], k, options)
        rows += [r for _, r in rolling.admit([request])]
        for _ in range(3):
            rows += [r for _, r in rolling.step()]
        longest = max(p + len(ids) - 1 for p, ids in zip(rolling.prompt_tokens, rolling.ids, strict=True))  # last token: next step
        assert rolling.mask.shape[1] == longest and rolling.cache.layers[0].keys.shape[-2] == longest
    solo = generate_tokens(llama_lm, [" ".join([WORDS] * 3)], [[]], [0], options)
    assert rows[0].text == solo.texts[0]  # the first request, decoded beside the others, is still its solo text


def test_a_running_decode_forms_its_steering_once_per_change_of_rows_and_twins_share_a_stream(llama_lm):
    """The rows' steering matrices are formed when rows join or leave, not at every step; a steered row and its
    unsteered twin admitted together share one noise stream; each row still gets its solo tokens."""
    from lmswitch.serve.batcher import _Request, _Rolling

    a, b = random_switch(llama_lm, seed=1, scale=20.0, name="a"), random_switch(llama_lm, seed=2, scale=20.0, name="b")
    options = SamplingOptions(max_new_tokens=5)
    requests = [_Request(WORDS, [(a, 4.0)], 3, options), _Request(WORDS, [], 3, options), _Request("beta", [(b, -3.0)], 4, options)]
    rolling = _Rolling(llama_lm)
    rows = rolling.admit(requests[:2])
    assert rolling.samplers[0].generators[0] is rolling.samplers[1].generators[0]
    rows += rolling.step()
    formed = rolling.steering
    rows += rolling.step()
    assert formed is not None and rolling.steering is formed  # the same rows: not formed again
    rows += rolling.admit(requests[2:])
    rows += rolling.step()
    assert rolling.steering is not formed and rolling.samplers[2].generators[0] is not rolling.samplers[0].generators[0]
    while rolling.requests:
        rows += rolling.step()
    for request, row in rows:
        solo = generate_tokens(llama_lm, [request.prompt], [request.setting], [request.seed], options)
        assert row.new_ids == solo.new_ids[0][: int(solo.new_mask[0].sum())].tolist()
    assert len(rows) == 3


def test_a_prompt_is_read_once_for_every_request_of_it_whatever_its_steering_and_seed(llama_lm):
    """Steering acts on the head alone, so a steered row and its twin, and a later request of the same prompt (a slider
    dragged), start from one read of the prompt; each still gets its solo tokens, and another prompt is read anew."""
    from lmswitch.serve.batcher import _Request, _Rolling

    a, b = random_switch(llama_lm, seed=1, scale=20.0, name="a"), random_switch(llama_lm, seed=2, scale=20.0, name="b")
    options = SamplingOptions(max_new_tokens=5)
    rolling, rows = _Rolling(llama_lm), []
    rows += rolling.admit([_Request(WORDS, [(a, 4.0)], 3, options), _Request(WORDS, [], 3, options)])
    assert rolling.prompts.reads == 1
    (kept,) = rolling.prompts.kept.values()
    before = [t.clone() for t in (*kept.keys, *kept.values, kept.head)]
    rows += rolling.step()
    rows += rolling.admit([_Request(WORDS, [(b, -3.0), (a, 1.0)], 7, options), _Request("beta " + WORDS, [(a, 2.0)], 8, options)])
    assert rolling.prompts.reads == 2  # only the new prompt
    while rolling.requests:
        rows += rolling.step()
    rows += rolling.admit([_Request(WORDS, [(b, 5.0)], 9, replace(options, adaptive=True))])  # after the decode emptied
    while rolling.requests:
        rows += rolling.step()
    assert rolling.prompts.reads == 2 and len(rows) == 5
    assert all(torch.equal(x, y) for x, y in zip(before, (*kept.keys, *kept.values, kept.head), strict=True))  # never written
    for request, row in rows:
        solo = generate_tokens(llama_lm, [request.prompt], [request.setting], [request.seed], request.options)
        assert row.new_ids == solo.new_ids[0][: int(solo.new_mask[0].sum())].tolist()


@pytest.mark.parametrize("family", SCALED_FAMILIES)
def test_a_model_that_scales_its_logits_after_the_head_gets_its_solo_tokens_in_the_rolling_decode(make_lm, family):
    """A kept prompt's first token comes from the head alone; Granite and Cohere scale their logits after the head,
    which ``after_head`` applies, so they decode rolling and every row gets its solo tokens."""
    lm = make_lm(family, init=0.2)  # peaked enough that a first token drawn unscaled differs
    batcher = Batcher(lm, ComputeThread())
    assert batcher.rolling is not None
    switch = random_switch(lm, seed=1, scale=20.0)
    requests = [(WORDS, [(switch, 4.0)], 1, 4), (WORDS, [], 1, 4), ("beta", [(switch, -2.0)], 2, 3)]
    requests += [(WORDS, [(switch, eps)], seed, 2) for seed, eps in ((3, 1.0), (4, -3.0), (5, 6.0), (6, 0.0), (7, 2.0))]
    rows = run_together(batcher, requests)
    for row, (prompt, setting, seed, n) in zip(rows, requests, strict=True):
        solo = generate_tokens(lm, [prompt], [setting], [seed], SamplingOptions(max_new_tokens=n))
        assert row.new_ids == solo.new_ids[0][: int(solo.new_mask[0].sum())].tolist()


def test_a_model_whose_logits_are_not_its_heads_decodes_whole_batches(make_lm, monkeypatch):
    """A family whose after-head change the head's maths does not know (here Granite's scale, forgotten) fails the
    one-token check, so its batches decode whole, through the model's own forward."""
    from lmswitch.core import models

    monkeypatch.delitem(models._AFTER_HEAD_SCALE, "granite")
    assert Batcher(make_lm("granite"), ComputeThread()).rolling is None
    assert Batcher(make_lm("llama"), ComputeThread()).rolling is not None


def test_prompts_kept_for_later_requests_stay_within_their_bytes_least_recently_used_leaving_first():
    from lmswitch.serve.batcher import _Prompt, _Prompts

    def prompt(tokens: int) -> _Prompt:  # two layers of (1, 1, tokens, 4) float32 keys and values: 64 bytes a token
        return _Prompt([torch.zeros(1, 1, tokens, 4)] * 2, [torch.zeros(1, 1, tokens, 4)] * 2, torch.zeros(8))

    kept = _Prompts(budget=64 * 10)
    kept.put((1,), prompt(4))
    kept.put((2,), prompt(4))
    assert kept.get((1,)) is not None  # now the most recently used
    kept.put((3,), prompt(4))  # 12 tokens > 10: the least recently used (2) leaves
    assert list(kept.kept) == [(1,), (3,)] and kept.nbytes == 64 * 8 and kept.get((2,)) is None
    kept.put((4,), prompt(11))  # larger than the whole budget: not kept, nothing else leaves for it
    assert list(kept.kept) == [(1,), (3,)] and kept.nbytes == 64 * 8


def test_best_of_requests_decode_whole_beside_the_running_rows_and_equal_their_solo_choice(llama_lm):
    """A best-of-n request cannot join the rolling decode (its likeliest candidate is known only at the end): it is
    decoded whole, with the other best-of requests of its settings, and gets the same text as alone; plain requests
    waiting beside it still get their solo tokens."""
    a = random_switch(llama_lm, seed=1, scale=20.0, name="a")
    batcher = Batcher(llama_lm, ComputeThread())
    best = [(WORDS, [(a, 4.0)], 1, SamplingOptions(max_new_tokens=6, best_of=3)),
            ("beta", [], 2, SamplingOptions(max_new_tokens=6, best_of=3))]
    plain = [(WORDS, [(a, 4.0)], 3, SamplingOptions(max_new_tokens=5))]
    release = held(batcher.compute)
    streams = [batcher.stream(p, s, seed=seed, options=o) for p, s, seed, o in best + plain]
    release.set()
    rows = [list(stream) for stream in streams]
    assert batcher.batches == 2 and batcher.rows == 3  # the two best-of requests together, the plain one apart
    for got, (prompt, setting, seed, options) in zip(rows, best + plain, strict=True):
        solo = generate_tokens(llama_lm, [prompt], [setting], [seed], options)
        assert got[-1].text == solo.texts[0] and got[-1].new_ids == solo.new_ids[0][: int(solo.new_mask[0].sum())].tolist()
    assert all(len(r) == 1 for r in rows[:2])  # best of n: no partial text, only the finished row


def test_a_best_of_request_with_more_candidates_than_the_batch_holds_is_still_served(llama_lm):
    batcher = Batcher(llama_lm, ComputeThread(), max_batch=2)
    options = SamplingOptions(max_new_tokens=4, best_of=5)
    row = batcher.generate(WORDS, [], seed=0, options=options)
    assert row.text == generate_tokens(llama_lm, [WORDS], [[]], [0], options).texts[0]
    assert row.text != generate_tokens(llama_lm, [WORDS], [[]], [0], replace(options, best_of=1)).texts[0]  # not one sample


def test_a_guided_request_decodes_whole_and_equals_its_solo_run(llama_lm):
    """Guided decoding chooses among candidates every few tokens: like best of n it is decoded whole, and gets the same
    text as alone; an unsteered request beside it is the plain decode."""
    a = _judged(llama_lm)
    batcher = Batcher(llama_lm, ComputeThread())
    options = SamplingOptions(max_new_tokens=8, guide=3)
    requests = [(WORDS, [(a, 4.0)], 1), ("beta", [], 2)]
    release = held(batcher.compute)
    streams = [batcher.stream(p, s, seed=seed, options=options) for p, s, seed in requests]
    release.set()
    rows = [list(stream) for stream in streams]
    assert batcher.batches == 1 and all(len(r) == 1 for r in rows)  # one whole decode, no partial text
    for got, (prompt, setting, seed) in zip(rows, requests, strict=True):
        assert got[-1].text == generate_tokens(llama_lm, [prompt], [setting], [seed], options).texts[0]
    assert rows[1][-1].text == generate_tokens(llama_lm, ["beta"], [[]], [2], replace(options, guide=1)).texts[0]


CANDIDATES = [SamplingOptions(max_new_tokens=48, guide=3), SamplingOptions(max_new_tokens=48, best_of=3)]


class _Finished(queue.Queue):
    """A request's queue that logs its name when its finished row is put (on the compute thread, in the order of work)."""

    def __init__(self, log: list[str], name: str) -> None:
        super().__init__()
        self.log, self.name = log, name

    def put(self, item, *args, **kwargs) -> None:
        if isinstance(item, Row):
            self.log.append(self.name)
        super().put(item, *args, **kwargs)


@pytest.mark.parametrize("options", CANDIDATES, ids=["guided", "best-of"])
def test_a_request_decoded_among_candidates_runs_as_background_work_and_other_rows_stream_meanwhile(llama_lm, options):
    """A guided or best-of-n decode takes seconds on a real model. Run inline on the compute thread it held every other
    user's stream until it ended (one user's 40 guided tokens stalled another's plain stream for 1.8 s on the embedded
    model); as background work, the running rows take their steps at its pause points. Both get their solo texts."""
    add_layer_pauses(llama_lm.decoder_layers())
    a = _judged(llama_lm)
    batcher = Batcher(llama_lm, ComputeThread(quantum=0.0))
    plain, finished = SamplingOptions(max_new_tokens=4), []
    release = held(batcher.compute)
    long_stream = batcher.stream(WORDS, [(a, 4.0)], seed=1, options=options)
    short_stream = batcher.stream("beta", [(a, -2.0)], seed=2, options=plain)
    long_stream.request.out, short_stream.request.out = _Finished(finished, "long"), _Finished(finished, "short")
    release.set()
    short, long = list(short_stream)[-1], list(long_stream)[-1]
    assert finished == ["short", "long"]  # the plain request ended while the candidates were still being decoded
    assert batcher.compute.pauses >= 1
    assert short.text == generate_tokens(llama_lm, ["beta"], [[(a, -2.0)]], [2], plain).texts[0]
    assert long.text == generate_tokens(llama_lm, [WORDS], [[(a, 4.0)]], [1], options).texts[0]


@pytest.mark.parametrize("how", ["closed", "cancelled"])
@pytest.mark.parametrize("options", CANDIDATES, ids=["guided", "best-of"])
def test_a_request_decoded_among_candidates_stops_once_nobody_wants_it(llama_lm, options, how):
    """A slider moved during a guided decode drops the request: closed by its reader, or (in the app, whose reader waits
    for the end of such a decode) by the stop flag a newer request of the same user sets. Its decode stops, at the next
    piece or step, instead of running to its end as background work, and the reader gets what there was."""
    add_layer_pauses(llama_lm.decoder_layers())
    a = _judged(llama_lm)
    batcher = Batcher(llama_lm, ComputeThread(quantum=0.0))
    cancel = threading.Event()
    release = held(batcher.compute)
    stream = batcher.stream(WORDS, [(a, 4.0)], seed=3, options=options, cancel=cancel)
    release.set()
    batcher.compute.submit(stream.close if how == "closed" else cancel.set)  # at the decode's first pause point
    row = stream.request.out.get(timeout=60)
    assert isinstance(row, Row) and len(row.new_ids) < 6
    assert int(generate_tokens(llama_lm, [WORDS], [[(a, 4.0)]], [3], options).new_mask[0].sum()) == 48  # alone: all 48


def test_requests_decoded_among_candidates_wait_their_turn_and_count_towards_the_queue(llama_lm):
    """One decode among candidates at a time: the others wait in the queue (so a full queue refuses more at once, and
    the waiting ones share the next decode), with no tick spinning meanwhile."""
    add_layer_pauses(llama_lm.decoder_layers())
    a = _judged(llama_lm)
    batcher = Batcher(llama_lm, ComputeThread(quantum=0.0), max_waiting=2)
    options, ticks, tick = CANDIDATES[0], [], batcher._tick
    batcher._tick = lambda: (ticks.append(1), tick())[1]
    release = held(batcher.compute)
    first = batcher.stream(WORDS, [(a, 4.0)], seed=1, options=options)
    release.set()

    def while_it_runs():  # at the first decode's first pause point
        later = [batcher.stream(p, [(a, e)], seed=s, options=options) for p, e, s in (("beta", 2.0, 2), ("gamma", -2.0, 3))]
        with pytest.raises(Busy):
            batcher.stream("delta", [], seed=4, options=options)
        return later

    later = batcher.compute.submit(while_it_runs).result(timeout=60)
    rows = [list(stream)[-1] for stream in [first, *later]]
    assert batcher.batches == 2 and batcher.rows == 3  # the first alone, the two that waited together
    assert len(ticks) <= 4, len(ticks)  # no tick spun while they waited for the decode (one to start each, maybe one more)
    for row, (p, setting, seed) in zip(rows, [(WORDS, [(a, 4.0)], 1), ("beta", [(a, 2.0)], 2), ("gamma", [(a, -2.0)], 3)], strict=True):
        assert row.text == generate_tokens(llama_lm, [p], [setting], [seed], options).texts[0]


def test_a_request_dropped_while_it_waits_ends_its_stream(llama_lm):
    """A request whose user moved on (its stop flag set) while it waited for a decode of its kind: its reader, waiting
    for a first token that will never come, gets the end of its stream, and ``generate`` returns None. (A reader left
    waiting there holds a server thread, and an OpenAI request's slot, for good.)"""
    batcher = Batcher(llama_lm, ComputeThread())
    cancel, result = threading.Event(), {}
    release = held(batcher.compute)
    running = batcher.stream(WORDS, [], seed=1, options=SamplingOptions(max_new_tokens=8))
    other_kind = SamplingOptions(max_new_tokens=8, temperature=0.5)  # waits: a rolling decode takes requests of its key
    reader = threading.Thread(target=lambda: result.update(row=batcher.generate("beta", [], seed=2, options=other_kind,
                                                                               cancel=cancel)))
    reader.start()
    cancel.set()
    release.set()
    reader.join(timeout=30)
    assert not reader.is_alive() and result == {"row": None}
    assert isinstance(list(running)[-1], Row)  # the decode under way is served as before


@pytest.mark.parametrize("prompt", [None, 5, [{"role": "user"}], "nul\x00byte"], ids=["none", "number", "bad-message", "nul"])
def test_a_bad_prompt_is_refused_before_queueing_and_a_running_decode_goes_on(llama_lm, prompt):
    batcher = Batcher(llama_lm, ComputeThread())
    options = SamplingOptions(max_new_tokens=12, temperature=0.0)
    running = batcher.stream(WORDS, [], seed=0, options=options)
    assert isinstance(next(running), str)  # another user's decode is under way
    with pytest.raises((TypeError, ValueError)):
        batcher.stream(prompt, [], seed=1, options=options)
    assert list(running)[-1].text == generate_tokens(llama_lm, [WORDS], [[]], [0], options).texts[0]


def test_a_guided_request_with_a_switch_without_a_judge_is_refused_before_queueing(llama_lm):
    batcher = Batcher(llama_lm, ComputeThread())
    with pytest.raises(ValueError, match="no judge"):
        batcher.stream(WORDS, [(random_switch(llama_lm, seed=1), 2.0)], seed=0, options=SamplingOptions(max_new_tokens=5, guide=2))


def test_requests_that_fail_to_join_a_running_decode_fail_alone(llama_lm, monkeypatch):
    """A failure while new requests join (past the checks at the door) is theirs: the running rows go on."""
    batcher = Batcher(llama_lm, ComputeThread())
    options = SamplingOptions(max_new_tokens=12, temperature=0.0)
    running = batcher.stream(WORDS, [], seed=0, options=options)
    assert isinstance(next(running), str)
    monkeypatch.setattr(batcher.rolling, "_read", lambda tokens: (_ for _ in ()).throw(RuntimeError("reading failed")))
    with pytest.raises(RuntimeError, match="reading failed"):
        batcher.generate("beta", [], seed=1, options=options)
    assert list(running)[-1].text == generate_tokens(llama_lm, [WORDS], [[]], [0], options).texts[0]


def test_a_request_with_other_sampling_settings_is_served_in_its_turn_while_others_keep_arriving(llama_lm):
    """Requests join a running decode only up to the first waiting one with other settings: that one goes next, however
    many requests of the running settings arrive after it."""
    batcher = Batcher(llama_lm, ComputeThread())
    hot = SamplingOptions(max_new_tokens=6)
    first = batcher.stream(WORDS, [], seed=0, options=hot)
    assert isinstance(next(first), str)
    release = held(batcher.compute)
    other = batcher.stream("beta", [], seed=1, options=SamplingOptions(max_new_tokens=3, temperature=0.0))
    later = [batcher.stream(WORDS, [], seed=k, options=hot) for k in range(2, 5)]
    release.set()
    done: list[str] = []
    threads = [threading.Thread(target=lambda s=s, name=name: (list(s), done.append(name)))
               for s, name in [(other, "other"), *((s, f"later-{k}") for k, s in enumerate(later))]]
    for t in threads:
        t.start()
    list(first)
    for t in threads:
        t.join(30)
    assert done[0] == "other", done  # before it, the later requests of the running settings would all have joined first


def test_a_request_that_ends_within_the_running_decode_joins_it_past_one_with_other_settings(llama_lm):
    """Behind a waiting request with other settings, a short one of the running settings still joins the running decode
    (it ends before the decode would anyway, so the waiting one waits no longer) instead of waiting for a decode of its own."""
    batcher = Batcher(llama_lm, ComputeThread())
    first = batcher.stream(WORDS, [], seed=0, options=SamplingOptions(max_new_tokens=30))
    assert isinstance(next(first), str)
    release = held(batcher.compute)
    other = batcher.stream("beta", [], seed=1, options=SamplingOptions(max_new_tokens=3, temperature=0.0))
    short = batcher.stream(WORDS, [], seed=2, options=SamplingOptions(max_new_tokens=3))
    release.set()
    done: list[str] = []
    threads = [threading.Thread(target=lambda s=s, name=name: (list(s), done.append(name))) for s, name in [(other, "other"), (short, "short")]]
    for t in threads:
        t.start()
    list(first)
    for t in threads:
        t.join(30)
    assert done == ["short", "other"]  # without joining, short would wait for the running decode to drain and for other


def test_a_request_over_the_servers_caps_is_refused_at_once(llama_lm, monkeypatch):
    """A server never cuts a prompt silently (the library does, with a warning nobody on the other side would see), and
    no request holds the compute thread for minutes: too many new tokens, or a prompt longer than the server reads."""
    batcher = Batcher(llama_lm, ComputeThread())
    options = SamplingOptions(max_new_tokens=4, temperature=0.0)
    long = " ".join(["alpha beta gamma delta"] * llama_lm.context_length)  # longer than the context
    with pytest.raises(ValueError, match=f"context \\({llama_lm.context_length:,}\\) leaves room for"):
        batcher.stream(long, [], seed=1, options=options)
    monkeypatch.setattr(limits, "MAX_PROMPT_TOKENS", 8)
    monkeypatch.setattr(limits, "MAX_NEW_TOKENS", 4)
    with pytest.raises(ValueError, match="the prompt has 12 tokens; this server reads at most 8 per request"):
        batcher.stream("alpha beta gamma delta " * 3, [], seed=1, options=options)
    with pytest.raises(ValueError, match="max_new_tokens 5 is more than this server generates per request"):
        batcher.stream("beta", [], seed=1, options=SamplingOptions(max_new_tokens=5, temperature=0.0))
    row = batcher.generate("alpha beta gamma", [], seed=1, options=options)  # within both: served
    assert row.text == generate_tokens(llama_lm, ["alpha beta gamma"], [[]], [1], options).texts[0]
