"""Figures from harness/figures.py: the loss, spectrum, word-map and meter figures on known inputs and on real
lens results, and export to HTML and PNG."""

from __future__ import annotations

import shutil

import pytest
from conftest import random_switch

from lmswitch.harness.evaluate import Protocol, evaluate_sweep
from lmswitch.harness.figures import export, loss_figure, meter_figure, spectrum_figure, sweep_figure, word_map_figure
from lmswitch.lenses.meter import Measurement, MeterRow
from lmswitch.lenses.svd import Axis, WordMap, WordPoint

PROMPTS = ["the happy one", "she was", "they love the"]


@pytest.mark.browser  # PNG export renders in chromium
def test_export_html_png_and_bad_suffix(tmp_path, llama_lm):
    switch = random_switch(llama_lm, seed=4, scale=30.0, name="s")
    sweep = evaluate_sweep(llama_lm, switch, [0, 10], PROMPTS[:1], Protocol(samples=1, max_new_tokens=3))
    fig = sweep_figure(sweep, "s")
    html = export(fig, tmp_path / "f.html")
    assert html.read_text(encoding="utf-8").count("plotly") > 10
    assert shutil.which("chromium"), "PNG export needs Debian's chromium; `make test` installs it"
    png = export(fig, tmp_path / "f.png", width=400, height=300)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match=r"\.html or \.png"):
        export(fig, tmp_path / "f.pdf")


def test_loss_figure():
    fig = loss_figure([3.0, 2.5, 2.2], [(2, 2.8), (3, 2.6)], total_steps=10)
    assert len(fig.data) == 2
    assert list(fig.data[0].x) == [1, 2, 3] and list(fig.data[0].y) == [3.0, 2.5, 2.2] and fig.data[0].mode == "lines"
    assert list(fig.data[1].x) == [2, 3] and list(fig.data[1].y) == [2.8, 2.6] and fig.data[1].mode == "markers"
    assert list(fig.layout.xaxis.range) == [1, 10]
    assert fig.layout.xaxis.title.text == "step" and "nats" in fig.layout.yaxis.title.text
    empty = loss_figure([])
    assert len(empty.data) == 0 and empty.layout.xaxis.title.text == "step" and empty.layout.xaxis.range is None
    assert len(loss_figure([1.0]).data) == 1
    with pytest.raises(ValueError, match="total_steps"):
        loss_figure([1.0], total_steps=0)


def test_spectrum_figure():
    fig = spectrum_figure([1.0, 3.0, 2.0, 0.0], top=2)  # sorted: 3, 2, 1, 0; Σσ² = 14
    assert len(fig.data) == 2 and fig.data[0].type == "bar"
    assert list(fig.data[0].x) == [1, 2] and list(fig.data[0].y) == [3.0, 2.0]
    assert list(fig.data[1].y) == pytest.approx([9 / 14, 13 / 14])
    assert fig.data[1].yaxis == "y2"
    assert list(spectrum_figure([2.0, 1.0]).data[1].y) == pytest.approx([0.8, 1.0])
    with pytest.raises(ValueError, match="no singular values"):
        spectrum_figure([])
    with pytest.raises(ValueError, match="top"):
        spectrum_figure([1.0], top=0)


def test_word_map_figure():
    data = WordMap(
        switch="s", positive_label="p", negative_label="n",
        axes=[Axis(index=0, singular_value=12.345, share=0.99, flipped=False), Axis(index=1, singular_value=0.5, share=0.01, flipped=True)],
        points=[
            WordPoint(word="love", x=1.0, y=0.1, group="promoted 1"),
            WordPoint(word="joy", x=0.8, y=0.0, group="promoted 1"),
            WordPoint(word="lovely", x=0.99, y=0.1, group="promoted 1"),  # its label would cover "love"'s
            WordPoint(word="hate", x=-1.0, y=0.2, group="suppressed 1"),
            WordPoint(word="cold", x=0.1, y=-0.9, group="suppressed 2"),
        ],
        reference_contexts=10,
    )
    fig = word_map_figure(data)
    assert [t.name for t in fig.data] == ["promoted 1", "suppressed 1", "suppressed 2"]  # empty groups get no trace
    assert list(fig.data[0].x) == [1.0, 0.8, 0.99] and list(fig.data[0].y) == [0.1, 0.0, 0.1]
    assert list(fig.data[0].text) == ["love", "joy", ""]  # the crowded word is left to its marker's hover
    assert list(fig.data[0].customdata) == ["love", "joy", "lovely"] and "customdata" in fig.data[0].hovertemplate
    assert list(fig.data[2].text) == ["cold"] and "text" in fig.data[0].mode
    assert fig.layout.xaxis.title.text == "direction 1 (σ=12.3)" and fig.layout.yaxis.title.text == "direction 2 (σ=0.5)"


def _measurement(rows: list) -> Measurement:
    return Measurement(tokens=9, scored_tokens=8, windows=1, base_loglik=-2.0, best_loglik=-1.9, gain=0.1, switches=rows)


def test_meter_figure():
    result = _measurement([
        MeterRow(name="a", positive_label="positive", negative_label="negative", grid=[-2.0, 0.0, 2.0], loglik=[-3.0, -2.0, -2.5],
                 best_eps=0.5, best_eps_alone=1.0, evidence_nats=0.7, at_bound=False, label="positive"),
        MeterRow(name="b", positive_label="positive", negative_label="negative", grid=[-2.0, 0.0, 2.0], loglik=[-2.2, -2.1, -2.6],
                 best_eps=-1.0, best_eps_alone=-1.0, evidence_nats=0.1, at_bound=False, label="negative"),
    ])
    fig = meter_figure(result)
    assert len(fig.data) == 4  # a line and a best-ε marker per switch
    line, marker = fig.data[0], fig.data[1]
    assert list(line.x) == [-2.0, 0.0, 2.0] and list(line.y) == [-3.0, -2.0, -2.5]
    assert list(marker.x) == [1.0] and list(marker.y) == pytest.approx([-2.25])  # interpolated between ε 0 and 2
    assert list(fig.data[3].y) == pytest.approx([-2.15])
    assert "a" in line.name and "+1.00" in line.name and "-1.00" in fig.data[2].name
    assert marker.showlegend is False
    assert "ε" in fig.layout.xaxis.title.text and "nats" in fig.layout.yaxis.title.text
    with pytest.raises(ValueError, match="no switches"):
        meter_figure(_measurement([]))


def test_figures_accept_real_word_map_and_meter_results(gpt2_lm):
    from lmswitch.lenses.meter import measure
    from lmswitch.lenses.svd import word_map

    switch = random_switch(gpt2_lm, seed=0, scale=30.0, name="r")
    data = word_map(gpt2_lm, switch, words=3, reference=["the kind one was at the sea with all of them"])
    fig = word_map_figure(data)
    assert sum(len(t.x) for t in fig.data) == len(data.points) and len(fig.data) >= 2
    result = measure(gpt2_lm, [switch], "the happy one was kind to all of them", points=5)
    fig = meter_figure(result)
    assert len(fig.data) == 2 and list(fig.data[0].x) == result.switches[0].grid


def test_frontier_figure_has_a_curve_per_method_and_side_with_fluent_points_filled(llama_lm, tmp_path):
    from dataclasses import replace

    from conftest import random_switch

    from lmswitch.harness.evaluate import PROTOCOL
    from lmswitch.harness.figures import frontier_figure
    from lmswitch.harness.frontier import FluencyRules, FrontierSpec, run_frontier

    prompts = tmp_path / "p.txt"
    prompts.write_text("the happy one was\nthe sad one was\nshe was\nhe was\n")
    spec = FrontierSpec("s", str(prompts), "positive_share", (+1, -1), +1, FluencyRules(perplexity_ratio=1e9, dist3_ratio=0.0,
                        max_repetition=1.0, max_sprinkle_rise=1.0), strengths=(1.0, 2.0))
    frontier = run_frontier(llama_lm, random_switch(llama_lm, seed=2, name="s"), spec, methods=("switch",),
                            protocol=replace(PROTOCOL, samples=1, max_new_tokens=3))
    fig = frontier_figure(frontier)
    assert [t.name for t in fig.data] == ["switch +", "switch −"]
    assert all(symbol == "circle" for t in fig.data for symbol in t.marker.symbol)  # every point fluent under these rules
