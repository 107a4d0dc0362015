"""Generation on tiny models: reproducible seeded sampling, greedy parity with
``model.generate``, coupled sweeps, streaming, prompt truncation and bad options."""

from __future__ import annotations

import math
import threading
import time

import pytest
import torch
from conftest import CONTEXT, random_switch

import lmswitch as ls
from lmswitch import generate, stream_generate, sweep
from lmswitch.core import generate as generate_module
from lmswitch.core.budget import Budget
from lmswitch.core.generate import CoupledSampler, finished_text, generate_tokens
from lmswitch.core.options import SamplingOptions
from lmswitch.core.steering import active_hook_count

PROMPT = "the happy one was in a"


@pytest.fixture(autouse=True)
def no_hooks_left(tiny_lm):
    assert active_hook_count(tiny_lm) == 0
    yield
    assert active_hook_count(tiny_lm) == 0


def test_seeded_samples_are_reproducible(tiny_lm):
    first = generate(tiny_lm, PROMPT, [], samples=3, seed=5, max_new_tokens=8)
    again = generate(tiny_lm, PROMPT, [], samples=3, seed=5, max_new_tokens=8)
    other = generate(tiny_lm, PROMPT, [], samples=3, seed=6, max_new_tokens=8)
    assert len(first) == 3 and all(isinstance(t, str) for t in first) and any(first)
    assert first == again
    assert first != other
    assert len(set(first)) > 1  # the samples of one call differ from each other


def test_sample_k_uses_seed_plus_k(tiny_lm):
    batch = generate(tiny_lm, PROMPT, [], samples=3, seed=5, max_new_tokens=8)
    singles = [generate(tiny_lm, PROMPT, [], seed=5 + k, max_new_tokens=8)[0] for k in range(3)]
    assert batch == singles
    # and so the seed-6 call above starts at sample 1 of the seed-5 call
    assert generate(tiny_lm, PROMPT, [], samples=2, seed=6, max_new_tokens=8) == batch[1:]


def test_several_prompts_are_prompt_major(tiny_lm):
    prompts = [PROMPT, "she was not"]
    out = generate(tiny_lm, prompts, [], samples=2, seed=0, max_new_tokens=6, temperature=0)
    assert len(out) == 4
    for i, prompt in enumerate(prompts):
        alone = generate(tiny_lm, prompt, [], seed=0, max_new_tokens=6, temperature=0)[0]
        assert out[2 * i] == out[2 * i + 1] == alone  # left padding does not change greedy text


@torch.no_grad()
def hf_greedy(lm, prompt: str, max_new_tokens: int) -> str:
    enc = lm.tokenizer(prompt, return_tensors="pt")
    out = lm.model.generate(
        input_ids=enc.input_ids,
        attention_mask=enc.attention_mask,
        do_sample=False,
        max_new_tokens=max_new_tokens,
        pad_token_id=lm.tokenizer.pad_token_id,
        eos_token_id=lm.tokenizer.eos_token_id,
    )
    return lm.tokenizer.decode(out[0, enc.input_ids.shape[1] :], skip_special_tokens=True)


def test_greedy_at_eps_zero_equals_plain_model_generate(tiny_lm):
    expected = hf_greedy(tiny_lm, PROMPT, 12)
    assert expected.strip()
    assert generate(tiny_lm, PROMPT, [], temperature=0, max_new_tokens=12) == [expected]
    s = random_switch(tiny_lm, seed=1, scale=10)
    assert generate(tiny_lm, PROMPT, [(s, 0.0)], temperature=0, max_new_tokens=12, seed=3) == [expected]
    # a strong switch does change the greedy text
    assert generate(tiny_lm, PROMPT, [(s, 200.0)], temperature=0, max_new_tokens=12) != [expected]


def test_sweep_row_at_eps_zero_equals_unsteered_generate(tiny_lm):
    strong = random_switch(tiny_lm, seed=2, scale=10)
    rows = sweep(tiny_lm, PROMPT, strong, [0, 150, -150], seed=4, max_new_tokens=12)
    assert [eps for eps, _ in rows] == [0.0, 150.0, -150.0]
    plain = generate(tiny_lm, PROMPT, [], seed=4, max_new_tokens=12)[0]
    assert rows[0][1] == plain
    assert rows[1][1] != plain and rows[2][1] != plain
    assert rows[1][1] != rows[2][1]
    # each row equals generating that setting alone with the same seed
    assert rows[1][1] == generate(tiny_lm, PROMPT, [(strong, 150.0)], seed=4, max_new_tokens=12)[0]


def test_sweep_rows_share_their_noise(tiny_lm):
    """With coupled sampling a negligible eps gives the same text as eps 0; independent noise would not."""
    weak = random_switch(tiny_lm, seed=3, scale=1e-4)
    rows = sweep(tiny_lm, PROMPT, weak, [0.0, 0.01, -0.01], seed=11, max_new_tokens=16)
    assert rows[0][1] == rows[1][1] == rows[2][1]
    assert rows[0][1] != generate(tiny_lm, PROMPT, [], seed=12, max_new_tokens=16)[0]


def test_sweep_keeps_other_switches_fixed(tiny_lm):
    s = random_switch(tiny_lm, seed=5, scale=10)
    other = random_switch(tiny_lm, seed=6, scale=10)
    rows = sweep(tiny_lm, PROMPT, s, [0.0], seed=2, others=[(other, 120.0)], max_new_tokens=10, temperature=0)
    assert rows[0][1] == generate(tiny_lm, PROMPT, [(other, 120.0)], max_new_tokens=10, temperature=0)[0]
    assert rows[0][1] != generate(tiny_lm, PROMPT, [], max_new_tokens=10, temperature=0)[0]


# --- streaming ----------------------------------------------------------------------------------


def test_stream_generate_grows_to_the_generate_result(tiny_lm):
    s = random_switch(tiny_lm, seed=7, scale=10)
    options = dict(seed=2, max_new_tokens=10, temperature=0.8, top_p=0.95)
    texts = list(stream_generate(tiny_lm, PROMPT, [(s, 30.0)], **options))
    final = generate(tiny_lm, PROMPT, [(s, 30.0)], **options)[0]
    assert 1 <= len(texts) <= 10
    assert texts[-1] == final
    for before, after in zip(texts, texts[1:], strict=False):
        assert after.startswith(before) and len(after) >= len(before)
    assert len(texts[-1]) > len(texts[0])


def _worker_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t is not threading.current_thread() and t.daemon]


def test_breaking_out_of_a_stream_stops_it_cleanly(tiny_lm):
    s = random_switch(tiny_lm, seed=8, scale=10)
    before = set(_worker_threads())
    head_calls = []

    def slow_head(module, args, output):  # ~10 ms per token, so 40 tokens would take a while
        head_calls.append(1)
        time.sleep(0.01)

    handle = tiny_lm.head.register_forward_hook(slow_head)
    received = []
    try:
        for text in stream_generate(tiny_lm, PROMPT, [(s, 20.0)], seed=1, max_new_tokens=40):
            received.append(text)
            if len(received) == 2:
                break
    finally:
        handle.remove()
    assert len(received) == 2
    assert len(head_calls) < 10, "generation went on after the stream was closed"
    assert active_hook_count(tiny_lm) == 0
    assert set(_worker_threads()) <= before  # the generation thread has finished
    # the model is usable and unsteered afterwards
    assert generate(tiny_lm, PROMPT, [], temperature=0, max_new_tokens=5) == [hf_greedy(tiny_lm, PROMPT, 5)]


def test_closing_a_stream_explicitly(tiny_lm):
    s = random_switch(tiny_lm, seed=9, scale=10)
    stream = stream_generate(tiny_lm, PROMPT, [(s, 20.0)], seed=1, max_new_tokens=40)
    first = next(stream)
    assert isinstance(first, str)
    stream.close()
    assert active_hook_count(tiny_lm) == 0
    with pytest.raises(StopIteration):
        next(stream)


# --- prompts and options -------------------------------------------------------------------------


def test_long_prompt_is_truncated_from_the_left_with_a_warning(tiny_lm):
    words = ("the a and of to in is was it that " * 10).split()  # 100 tokens > the 64-token context
    prompt = " ".join(words)
    max_new = 6
    with pytest.warns(UserWarning, match="truncated from the left"):
        out = generate(tiny_lm, prompt, [], temperature=0, max_new_tokens=max_new)
    kept = " ".join(words[-(CONTEXT - max_new) :])
    assert out == [hf_greedy(tiny_lm, kept, max_new)]
    assert out != [hf_greedy(tiny_lm, " ".join(words[: CONTEXT - max_new]), max_new)]


@pytest.mark.parametrize(
    ("option", "match"),
    [
        ({"top_p": -0.1}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"temperature": -1}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"max_new_tokens": CONTEXT}, "max_new_tokens"),
        ({"seed": -1}, "seed"),
        ({"seed": 2**32}, r"seed must be an integer from 0 to 4,294,967,295 .* repeat a smaller one's text\); got 4294967296"),
        ({"samples": 0}, "samples"),
    ],
)
def test_bad_options_are_refused(tiny_lm, option, match):
    with pytest.raises(ValueError, match=match):
        generate(tiny_lm, PROMPT, [], **option)


def test_wrong_arguments_say_what_to_pass(tiny_lm):
    s = random_switch(tiny_lm, seed=13)
    with pytest.raises(ValueError, match="prompt must be a string or a list of prompts .* got NoneType"):
        generate(tiny_lm, None, [(s, 1.0)])
    with pytest.raises(ValueError, match=r"switches must be a list of \(switch, ε\) pairs, e.g. \[\(sentiment, 4\)\]; got Switch"):
        generate(tiny_lm, PROMPT, s)
    with pytest.raises(ValueError, match=r"the ε values for \S+ must be a list of numbers, e.g. \[-4, 0, 4\]; got 2"):
        sweep(tiny_lm, PROMPT, s, 2)
    with pytest.raises(ValueError, match="must be finite numbers; got 'a'"):  # (was float's "could not convert string")
        sweep(tiny_lm, PROMPT, s, ["a"])
    with pytest.raises(TypeError, match="sweep continues one prompt; got a list of 2"):
        sweep(tiny_lm, [PROMPT, PROMPT], s, [1.0])
    with pytest.raises(TypeError, match="stream_generate\\(\\) got an unexpected keyword argument 'top_k'"):
        next(stream_generate(tiny_lm, PROMPT, [(s, 1.0)], top_k=5))
    assert generate(tiny_lm, PROMPT, None, seed=3, max_new_tokens=4) == generate(tiny_lm, PROMPT, [], seed=3, max_new_tokens=4)


def test_top_p_zero_keeps_the_most_likely_token(tiny_lm):
    s = random_switch(tiny_lm, seed=12)
    for switches in ([], [(s, 2.0)]):
        greedy = generate(tiny_lm, PROMPT, switches, temperature=0, max_new_tokens=12)
        assert generate(tiny_lm, PROMPT, switches, top_p=0, seed=5, max_new_tokens=12) == greedy
        assert generate(tiny_lm, PROMPT, switches, top_p=0, seed=6, max_new_tokens=12) == greedy


@pytest.mark.parametrize(
    ("option", "match"), [({"top_p": -0.1}, "top_p"), ({"temperature": -1}, "temperature"), ({"max_new_tokens": 0}, "max_new_tokens")]
)
def test_bad_options_are_refused_by_sweep_and_stream(tiny_lm, option, match):
    s = random_switch(tiny_lm, seed=10)
    with pytest.raises(ValueError, match=match):
        sweep(tiny_lm, PROMPT, s, [0, 1], **option)
    with pytest.raises(ValueError, match=match):
        next(stream_generate(tiny_lm, PROMPT, [(s, 1.0)], **option))


def test_bad_eps_is_refused_before_generating(tiny_lm):
    s = random_switch(tiny_lm, seed=11)
    with pytest.raises(ValueError, match="ε for 'random11' must be a finite number"):
        generate(tiny_lm, PROMPT, [(s, float("nan"))])
    with pytest.raises(ValueError, match="ε 5000 for 'random11' is out of range"):
        sweep(tiny_lm, PROMPT, s, [0.0, 5000.0])
    with pytest.raises(ValueError, match="no prompt"):
        generate(tiny_lm, [], [])


@pytest.mark.parametrize("spread", [0.1, 3.0, 30.0, "mixed"])  # flat rows need k to grow past 256; "mixed": only some rows do
def test_nucleus_sampler_equals_a_full_sort(spread):
    """The top-k nucleus shortcut picks exactly the token the textbook full-sort nucleus sampler picks."""
    V, B = 5000, 16
    scale = torch.logspace(-1, 1.5, B)[:, None] if spread == "mixed" else spread
    logits = torch.randn(B, V, generator=torch.Generator().manual_seed(1)) * scale
    fast = CoupledSampler(list(range(B)), temperature=0.8, top_p=0.9)
    got = fast(None, logits).argmax(-1)
    noise = torch.stack([torch.rand(V, generator=torch.Generator().manual_seed(b)) for b in range(B)])
    logp = torch.log_softmax(logits / 0.8, dim=-1)
    sorted_logp, order = logp.sort(dim=-1, descending=True)
    cum = sorted_logp.exp().cumsum(-1)
    drop = torch.zeros(B, V, dtype=torch.bool).scatter(-1, order, (cum - sorted_logp.exp()) >= 0.9)
    expect = (logp.masked_fill(drop, -math.inf) - torch.log(-torch.log(noise))).argmax(-1)
    assert torch.equal(got, expect)


def test_a_rows_sample_does_not_depend_on_the_other_rows_of_its_batch():
    """Where words tie at the nucleus edge (common in bfloat16), which tied words are kept must not depend on how far
    the other rows of the batch made the candidate search grow: a row samples the same alone as beside a flat row."""
    V = 5000
    peaky = torch.full((V,), -1e4)
    peaky[0], peaky[1:301] = math.log(0.7), math.log(0.001)  # 300 tied words; the nucleus keeps 200 of them
    flat = torch.zeros(V)  # needs thousands of candidates
    for seed in range(40):
        alone = CoupledSampler([seed], temperature=1.0, top_p=0.9)(None, peaky[None]).argmax(-1)
        beside = CoupledSampler([seed, seed + 1], temperature=1.0, top_p=0.9)(None, torch.stack([peaky, flat])).argmax(-1)
        assert int(alone[0]) == int(beside[0]), seed


def test_joined_samplers_draw_each_row_from_its_own_stream_and_advance_it():
    """A running decode keeps one sampler per row and draws them together: the tokens equal each sampler's own, step
    after step (the joined draw advances the rows' own streams); samplers that do not share settings are refused."""
    logits = torch.randn(3, 700, generator=torch.Generator().manual_seed(0)) * 3
    rows = [CoupledSampler([seed], temperature=0.8, top_p=0.9) for seed in (5, 6, 7)]
    alone = [CoupledSampler([seed], temperature=0.8, top_p=0.9) for seed in (5, 6, 7)]
    for _ in range(3):
        together = CoupledSampler.joined(rows)(None, logits).argmax(-1).tolist()
        assert together == [int(s(None, logits[k : k + 1]).argmax(-1)) for k, s in enumerate(alone)]
    with pytest.raises(ValueError, match="share their temperature"):
        CoupledSampler.joined([rows[0], CoupledSampler([1], temperature=1.0, top_p=0.9)])
    with pytest.raises(ValueError, match="steering budget"):
        CoupledSampler.joined([rows[0], CoupledSampler([1], temperature=0.8, top_p=0.9, budget=Budget(1, 4.0))])


def test_rows_with_one_seed_share_one_stream_drawn_once_per_step():
    """A steered row and its unsteered twin have one seed: they share one noise stream, drawn once per step, and each
    still gets the tokens it would get alone (a stream drawn once per row would give the second row the next draw)."""
    logits = torch.randn(3, 700, generator=torch.Generator().manual_seed(1)) * 3
    shared = CoupledSampler([5, 5, 6], temperature=0.8, top_p=0.9)
    assert shared.generators[0] is shared.generators[1] and shared.generators[2] is not shared.generators[0]
    alone = [CoupledSampler([seed], temperature=0.8, top_p=0.9) for seed in (5, 5, 6)]
    for _ in range(4):
        assert shared(None, logits).argmax(-1).tolist() == [int(s(None, logits[k : k + 1]).argmax(-1)) for k, s in enumerate(alone)]


def test_rows_that_repeat_a_prompt_have_it_read_once_and_get_the_same_tokens(tiny_lm, monkeypatch):
    """Samples and sweep settings repeat prompts: the body reads each distinct prompt once (all but its last token),
    and every row gets the tokens, and records the head inputs, that reading each row's prompt itself gives."""
    strong = random_switch(tiny_lm, seed=2, scale=10)
    prompts = [PROMPT, "she was not", PROMPT, "she was not", "cold", PROMPT, "cold"]  # left-padded to three lengths, one a word
    settings = [[], [(strong, 100.0)], [(strong, -100.0)], [], [(strong, 50.0)], [(strong, 100.0)], []]
    seeds = [3, 3, 4, 5, 6, 7, 8]
    opts = SamplingOptions(max_new_tokens=10)
    read = []
    final_hidden = tiny_lm.final_hidden
    monkeypatch.setattr(tiny_lm, "final_hidden", lambda ids, *a, **k: read.append(ids.shape[0]) or final_hidden(ids, *a, **k))
    with tiny_lm.head_inputs() as seen:
        shared = generate_tokens(tiny_lm, prompts, settings, seeds, opts)
    assert read == [3]  # three distinct prompts
    monkeypatch.setattr(generate_module, "shared_prompts", lambda *a: None)
    with tiny_lm.head_inputs() as seen_alone:
        alone = generate_tokens(tiny_lm, prompts, settings, seeds, opts)
    assert torch.equal(shared.new_ids, alone.new_ids) and shared.texts == alone.texts
    assert len(seen) == len(seen_alone) == alone.new_ids.shape[1]
    for a, b in zip(seen, seen_alone, strict=True):  # the first pass: the last prompt token only, against the whole prompt
        torch.testing.assert_close(a[:, -1], b[:, -1], rtol=1e-5, atol=1e-5)


def test_prompts_read_once_only_where_one_repeats(tiny_lm, monkeypatch):
    ids, mask = generate_module.encode_prompts(tiny_lm, [PROMPT, "she was not"], SamplingOptions())
    assert generate_module.shared_prompts(tiny_lm, ids, mask) is None
    ids, mask = generate_module.encode_prompts(tiny_lm, [PROMPT, "she was not", PROMPT], SamplingOptions())
    cache = generate_module.shared_prompts(tiny_lm, ids, mask)
    assert cache.layers[0].keys.shape[0] == 3 and cache.get_seq_length() == ids.shape[1] - 1
    assert torch.equal(cache.layers[0].keys[0], cache.layers[0].keys[2])
    monkeypatch.setattr(tiny_lm.model.generation_config, "cache_implementation", "static")  # a cache of the model's own
    assert generate_module.shared_prompts(tiny_lm, ids, mask) is None


def test_a_model_saved_without_its_cache_still_reads_a_shared_prompt_once(tiny_lm, monkeypatch):
    """A checkpoint saved after gradient-checkpointed training often says use_cache: false; a shared prompt's cache
    must still be used (else every step would read the whole sequence on top of it)."""
    rows = dict(prompt=PROMPT, samples=3, seed=2, max_new_tokens=8)
    expected = generate(tiny_lm, **rows)
    monkeypatch.setattr(tiny_lm.model.generation_config, "use_cache", False)
    assert generate(tiny_lm, **rows) == expected


def test_stream_rows_can_run_on_a_given_executor(llama_lm):
    """A server keeps all model work on one long-lived thread: stream_rows submits its generation there."""
    from concurrent.futures import ThreadPoolExecutor

    switch = random_switch(llama_lm, seed=3, scale=20.0)
    settings = [[(switch, 4.0)], []]
    expected = list(ls.stream_rows(llama_lm, "the happy one", settings, seed=2, max_new_tokens=10))
    names = []
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="compute") as pool:
        pool.submit(lambda: names.append(threading.current_thread().name)).result()
        got = list(ls.stream_rows(llama_lm, "the happy one", settings, seed=2, max_new_tokens=10, executor=pool))
        stopped = ls.stream_rows(llama_lm, "the happy one", settings, seed=2, max_new_tokens=10, executor=pool)
        next(stopped)
        stopped.close()  # closing early stops the work on the executor, which is free again at once
        assert pool.submit(lambda: threading.current_thread().name).result(timeout=5) == names[0]
    assert got == expected and got[-1][0] != got[-1][1]


def test_a_conversation_is_a_prompt_only_with_the_chat_template(llama_lm):
    with pytest.raises(TypeError, match="needs the chat template"):
        generate(llama_lm, [[{"role": "user", "content": "a b"}]], max_new_tokens=2)


@pytest.mark.real_model
def test_a_character_cut_by_the_length_limit_is_left_out(lm):
    """Byte-level tokenizers spell an emoji in several tokens; a generation that stops inside one ends before it."""
    ids = lm.tokenizer("Nice 🌱", add_special_tokens=False).input_ids
    cut = next(k for k in range(1, len(ids)) if lm.tokenizer.decode(ids[:k]).endswith("\ufffd"))
    assert finished_text(lm.tokenizer, ids[:cut]) == "Nice "
    assert finished_text(lm.tokenizer, ids) == "Nice 🌱"


def test_best_of_keeps_the_candidate_its_steered_model_finds_likeliest(tiny_lm):
    """best_of=n samples each row n times (candidate j with seed candidate_seed(seed, j)) and keeps the candidate with
    the highest log-likelihood per token under the steered model, checked here with full steered forward passes."""
    from lmswitch.core.generate import candidate_seed, generate_tokens
    from lmswitch.core.options import SamplingOptions

    s = random_switch(tiny_lm, seed=4, scale=30.0)
    setting, opts = [(s, 3.0)], SamplingOptions(max_new_tokens=8)
    for seed in (0, 7):
        best = generate_tokens(tiny_lm, [PROMPT], [setting], [seed], SamplingOptions(max_new_tokens=8, best_of=3))
        means = []
        candidates = [generate_tokens(tiny_lm, [PROMPT], [setting], [candidate_seed(seed, j)], opts) for j in range(3)]
        for c in candidates:
            n = int(c.new_mask.sum())
            ids = torch.cat([c.prompt_ids, c.new_ids[:, :n]], 1)
            with torch.no_grad(), ls.steer(tiny_lm, setting):
                logp = torch.log_softmax(tiny_lm.model(ids).logits.float(), -1)[0, -n - 1 : -1]
            means.append(float(logp.gather(1, c.new_ids[0, :n, None]).mean()))
        assert candidates[0].texts == generate_tokens(tiny_lm, [PROMPT], [setting], [seed], opts).texts  # candidate 0 is today's sample
        assert len({c.texts[0] for c in candidates}) > 1  # the candidates differ, so the choice means something
        assert best.texts == candidates[max(range(3), key=means.__getitem__)].texts


@pytest.mark.parametrize("options, match", [({"best_of": 0}, "best_of"), ({"best_of": 17}, "best_of"), ({"best_of": 2.5}, "best_of"),
                                            ({"best_of": 2, "temperature": 0}, "greedy")])
def test_bad_best_of_is_refused(tiny_lm, options, match):
    with pytest.raises(ValueError, match=match):
        generate(tiny_lm, PROMPT, [], **options)


def test_numpy_numbers_steer_and_seed_like_python_numbers(tiny_lm):
    """``for eps in np.arange(-4, 5)``: NumPy's integers and floats are numbers too (not refused as "not a number")."""
    import numpy as np

    s = random_switch(tiny_lm, seed=2, scale=20.0)
    plain = generate(tiny_lm, PROMPT, [(s, 3)], samples=2, seed=5, max_new_tokens=6)
    assert generate(tiny_lm, PROMPT, [(s, np.arange(-4, 5)[7])], samples=np.int64(2), seed=np.int64(5), max_new_tokens=6) == plain
    assert generate(tiny_lm, PROMPT, [(s, np.float32(3.0))], samples=2, seed=5, max_new_tokens=6) == plain


def test_what_is_not_a_model_a_setting_or_an_option_is_refused_with_what_to_give(tiny_lm):
    """A user's likely slips, each refused before any work with the fix (they raised AttributeError, misread 'no' as on, or
    silently summed or ignored what was given)."""
    s = random_switch(tiny_lm, seed=13)
    with pytest.raises(TypeError, match=r"expected a LanguageModel; got str: load it first, lm = ls.load_model\('smollm2-135m'\)"):
        generate("smollm2-135m", PROMPT, [(s, 1.0)])
    with pytest.raises(TypeError, match=r"got \w+: wrap a transformers model with its tokenizer, ls.LanguageModel"):
        generate(tiny_lm.model, PROMPT)
    for call in (lambda: ls.train_switch("m", ["a"], ["b"]), lambda: list(stream_generate("m", PROMPT)),
                 lambda: ls.promoted_words("m", s), lambda: ls.calibrated_card("m", s), lambda: ls.steer("m", []).__enter__()):
        with pytest.raises(TypeError, match="expected a LanguageModel; got str"):
            call()
    settings = {"got one pair: put it in a list": (s, 2.0), "got the text 'x=2': load each switch first": "x=2"}
    for said, setting in settings.items():
        with pytest.raises(ValueError, match=said):
            generate(tiny_lm, PROMPT, setting)
    with pytest.raises(ValueError, match=f"got Switch '{s.name}' alone: give it with its ε"):
        ls.steer(tiny_lm, s).__enter__()
    with pytest.raises(ValueError, match=f"switch '{s.name}' is given twice \\(ε 2 and 2\\): give it once, at ε 4 for their sum"):
        generate(tiny_lm, PROMPT, [(s, 2.0), (s, 2.0)])
    with pytest.raises(ValueError, match="is given twice"):  # the swept switch among the others held fixed
        sweep(tiny_lm, PROMPT, s, [1.0], others=[(s, 2.0)])
    with pytest.raises(ValueError, match="adaptive must be True or False; got 'no'"):  # ("no" is truthy)
        generate(tiny_lm, PROMPT, [(s, 2.0)], adaptive="no")
    with pytest.raises(ValueError, match=r"generation_budget caps adaptive strength's .* give 0.5 with adaptive=True \(--adaptive\)"):
        generate(tiny_lm, PROMPT, [(s, 2.0)], generation_budget=0.5)  # (it was ignored)
    assert generate(tiny_lm, PROMPT, [(s, 2.0)], adaptive=True, generation_budget=0.5, max_new_tokens=3)
    with pytest.raises(TypeError, match=r"got one message \(a dict\): .* \[\[message, …\]\], with chat=True"):
        generate(tiny_lm, [{"role": "user", "content": "hi"}])  # (these tiny models have no chat template to try it with)
    with pytest.raises(ValueError, match=r"a sum of switches has none: give them side by side"):
        generate(tiny_lm, PROMPT, [(s + random_switch(tiny_lm, seed=14, name="t"), 2.0)], guide=2)


def test_a_switch_set_to_nan_after_it_was_made_is_refused_not_decoded_to_nothing(tiny_lm):
    s = random_switch(tiny_lm, seed=13)
    s.W = torch.full_like(s.W, float("nan"))
    with pytest.raises(ValueError, match=f"switch '{s.name}' has NaN or infinite entries"):
        generate(tiny_lm, PROMPT, [(s, 1.0)])
