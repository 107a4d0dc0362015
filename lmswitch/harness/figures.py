"""Plotly figures for evaluation results, and export to HTML or PNG."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lmswitch.harness.evaluate import Evaluation
from lmswitch.harness.options import METRICS

if TYPE_CHECKING:  # the lenses pull in scipy and the SVD code; the figures only read their results
    from lmswitch.harness.frontier import Frontier
    from lmswitch.lenses.meter import Measurement
    from lmswitch.lenses.svd import WordMap, WordPoint

METHOD_COLORS = {"switch": "#1f77b4", "switch+adaptive": "#2ca02c", "prompting": "#ff7f0e"}


def _check_metric(metric: str) -> str:
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; choose from {', '.join(METRICS)}")
    return metric


def sweep_figure(evals: Sequence[Evaluation], switch: str, metrics: Sequence[str] = ("positive_share", "toxicity_prob"),
                 fluent: tuple[float, float] | None = None) -> go.Figure:
    """Scores vs ε of one switch (left axis) and perplexity (right axis); ``fluent``: the switch's calibrated fluent
    range (its card's ``fluent_eps``), shaded, so that ε values past it read as such."""
    if not evals:
        raise ValueError("no evaluations to plot")
    eps = [ev.setting.get(switch, 0.0) for ev in evals]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    for metric in metrics:
        _check_metric(metric)
        fig.add_trace(go.Scatter(x=eps, y=[getattr(ev, metric) for ev in evals], mode="lines+markers", name=METRICS[metric][0]))
    fig.add_trace(
        go.Scatter(x=eps, y=[ev.perplexity for ev in evals], mode="lines+markers", name="perplexity", line={"dash": "dot", "color": "gray"}),
        secondary_y=True,
    )
    if fluent is not None:
        fig.add_vrect(x0=fluent[0], x1=fluent[1], fillcolor="#2ca02c", opacity=0.08, line_width=0, layer="below",
                      annotation_text="fluent range", annotation_position="top left")
    fig.update_layout(title=f"ε sweep of '{switch}'", xaxis_title=f"ε of {switch} (ε0 units)", legend={"orientation": "h", "y": -0.2},
                      template="plotly_white", margin={"t": 50})
    fig.update_yaxes(title_text="share", range=[0, 1.02], secondary_y=False)
    fig.update_yaxes(title_text="perplexity", secondary_y=True)
    return fig


def grid_figure(grid: Sequence[Sequence[Evaluation]], first: str, second: str, metrics: Sequence[str]) -> go.Figure:
    """One heatmap per metric over the (ε of ``first``, ε of ``second``) grid; hover shows a sample text."""
    if not grid or not grid[0]:
        raise ValueError("no grid to plot")
    eps_a = [row[0].setting.get(first, 0.0) for row in grid]
    eps_b = [ev.setting.get(second, 0.0) for ev in grid[0]]
    fig = make_subplots(rows=1, cols=len(metrics), subplot_titles=[METRICS[_check_metric(m)][0] for m in metrics], horizontal_spacing=0.12)
    sample = [[(ev.texts[0].prompt + ev.texts[0].text)[:90] if ev.texts else "" for ev in row] for row in grid]
    for k, metric in enumerate(metrics):
        z = [[getattr(ev, metric) for ev in row] for row in grid]
        lo_hi = METRICS[metric][1]
        fig.add_trace(
            go.Heatmap(
                x=eps_b, y=eps_a, z=z, customdata=sample, colorscale="RdBu" if "sent" in metric or "positive" in metric else "Reds",
                zmin=lo_hi[0] if lo_hi else None, zmax=lo_hi[1] if lo_hi else None, texttemplate="%{z:.2f}",
                colorbar={"x": fig.layout[f"xaxis{k + 1 if k else ''}"].domain[1] + 0.01, "len": 0.9, "thickness": 14},
                hovertemplate=f"{first} ε=%{{y}}<br>{second} ε=%{{x}}<br>{metric}=%{{z:.3f}}<br>%{{customdata}}<extra></extra>",
            ),
            row=1, col=k + 1,
        )
        fig.update_xaxes(title_text=f"ε of {second}", tickvals=eps_b, row=1, col=k + 1)  # ticks on the cells, at their ε
        fig.update_yaxes(tickvals=eps_a, row=1, col=k + 1)
    fig.update_yaxes(title_text=f"ε of {first}", row=1, col=1)  # the others' would sit on the colour bar to their left
    fig.update_layout(title=f"composition: '{first}' × '{second}'", template="plotly_white", margin={"t": 70})
    return fig


def loss_figure(train_losses: Sequence[float], heldout: Sequence[tuple[int, float]] = (), total_steps: int | None = None) -> go.Figure:
    """Training loss per step (line) and held-out loss (markers) vs step.

    With ``total_steps`` the x axis is fixed to [1, total_steps], so a curve redrawn
    during training does not rescale on every update. No losses yet: just the axes.
    """
    if total_steps is not None and (not isinstance(total_steps, int) or total_steps < 1):
        raise ValueError(f"total_steps must be a positive integer or None; got {total_steps!r}")
    fig = go.Figure()
    if len(train_losses):
        fig.add_trace(go.Scatter(x=list(range(1, len(train_losses) + 1)), y=[float(x) for x in train_losses], mode="lines",
                                 name="training loss (minibatch)"))
    if len(heldout):
        fig.add_trace(go.Scatter(x=[int(s) for s, _ in heldout], y=[float(h) for _, h in heldout], mode="markers",
                                 name="held-out loss", marker={"size": 8, "color": "#d62728"}))
    fig.update_layout(title="training loss", xaxis_title="step", yaxis_title="loss (nats per token)", template="plotly_white",
                      legend={"orientation": "h", "y": -0.2}, margin={"t": 50})
    if total_steps is not None:
        fig.update_xaxes(range=[1, max(total_steps, 2)])
    return fig


def spectrum_figure(singular_values: Sequence[float], top: int = 40) -> go.Figure:
    """The ``top`` largest singular values of ``W`` (bars) and their cumulative share of ‖W‖² = Σσ² (right axis)."""
    if not isinstance(top, int) or top < 1:
        raise ValueError(f"top must be a positive integer; got {top!r}")
    values = sorted((float(x) for x in singular_values), reverse=True)
    if not values:
        raise ValueError("no singular values to plot")
    total = sum(x * x for x in values)
    shown = values[:top]
    cumulative, acc = [], 0.0
    for x in shown:
        acc += x * x
        cumulative.append(acc / total if total else 0.0)
    index = list(range(1, len(shown) + 1))
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Bar(x=index, y=shown, name="singular value σ"))
    fig.add_trace(go.Scatter(x=index, y=cumulative, mode="lines+markers", name="cumulative share of ‖W‖² (σ²)",
                             line={"color": "gray", "dash": "dot"}), secondary_y=True)
    fig.update_layout(title=f"spectrum of W: top {len(shown)} of {len(values)} directions", xaxis_title="direction",
                      template="plotly_white", legend={"orientation": "h", "y": -0.2}, margin={"t": 50})
    fig.update_yaxes(title_text="singular value σ", secondary_y=False)
    fig.update_yaxes(title_text="cumulative share of ‖W‖²", range=[0, 1.02], secondary_y=True)
    return fig


WORD_GROUP_COLORS = {"promoted 1": "#2ca02c", "suppressed 1": "#d62728", "promoted 2": "#1f77b4", "suppressed 2": "#ff7f0e"}


def _uncrowded(points: list[WordPoint], chars_across: float = 50, lines_up: float = 14) -> set[int]:
    """The ``id`` of each point whose word can be written above it without covering a label already placed, the points
    taken in order (a word map lists each group's strongest words first); the others keep their marker and hover. A
    label is taken to be ``1 / chars_across`` of the x range wide per character and ``1 / lines_up`` of the y range high
    (the app's Inspect tab draws the map about 420 × 200 pixels)."""
    xs, ys = [p.x for p in points], [p.y for p in points]
    char = (max(xs, default=0) - min(xs, default=0)) / chars_across or 1.0
    line = (max(ys, default=0) - min(ys, default=0)) / lines_up or 1.0
    placed: list = []
    for p in points:
        if all(abs(p.x - q.x) > char * (len(p.word) + len(q.word)) / 2 or abs(p.y - q.y) > line for q in placed):
            placed.append(p)
    return {id(p) for p in placed}


def word_map_figure(data: WordMap) -> go.Figure:
    """Scatter of a :func:`~lmswitch.lenses.svd.word_map`'s points, one trace per non-empty group, labelled with the words
    where a label does not cover another (:func:`_uncrowded`); every point names its word on hover."""
    fig = go.Figure()
    labelled = _uncrowded(list(data.points))
    for group, color in WORD_GROUP_COLORS.items():
        points = [p for p in data.points if p.group == group]
        if points:
            fig.add_trace(go.Scatter(
                x=[p.x for p in points], y=[p.y for p in points], text=[p.word if id(p) in labelled else "" for p in points],
                customdata=[p.word for p in points], mode="markers+text", textposition="top center", name=group,
                marker={"color": color, "size": 7},
                hovertemplate="%{customdata}<br>x=%{x:.3f}<br>y=%{y:.3f}<extra>" + group + "</extra>",
            ))
    sigma = [ax.singular_value for ax in data.axes]
    fig.add_hline(y=0, line={"color": "lightgray", "width": 1})
    fig.add_vline(x=0, line={"color": "lightgray", "width": 1})
    fig.update_layout(
        # on two lines: one was cut at the plot's edge for a long switch name ("… (positive = p")
        title=f"words of '{data.switch}' on its top two directions<br><sup>positive = pushed up at ε > 0</sup>",
        xaxis_title=f"direction 1 (σ={sigma[0]:.3g})", yaxis_title=f"direction 2 (σ={sigma[1]:.3g})",
        template="plotly_white", legend={"orientation": "h", "y": -0.2}, margin={"t": 50},
    )
    return fig


def meter_figure(result: Measurement) -> go.Figure:
    """Style meter curves of a :func:`~lmswitch.lenses.meter.measure`: mean log-likelihood per token vs ε,
    one line per switch, a marker at its best ε (alone)."""
    if not result.switches:
        raise ValueError("no switches in the meter result to plot")
    fig = go.Figure()
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
    for i, row in enumerate(result.switches):
        color = palette[i % len(palette)]
        best = float(row.best_eps_alone)
        name = f"{row.name} (best ε {best:+.2f})"
        xs, ys = [float(x) for x in row.grid], [float(y) for y in row.loglik]
        order = np.argsort(xs)
        at_best = float(np.interp(best, np.asarray(xs)[order], np.asarray(ys)[order]))
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=name, legendgroup=row.name, line={"color": color}))
        fig.add_trace(go.Scatter(
            x=[best], y=[at_best], mode="markers", name=f"best ε of {row.name}", legendgroup=row.name, showlegend=False,
            marker={"color": color, "size": 11, "symbol": "star"},
            hovertemplate=f"{row.name}: best ε %{{x:+.2f}}<br>{row.evidence_nats:.2f} nats of evidence<extra></extra>",
        ))
    fig.update_layout(title="style meter: how well each ε explains the text", xaxis_title="ε (ε0 units)",
                      yaxis_title="mean log-likelihood per token (nats)", template="plotly_white",
                      legend={"orientation": "h", "y": -0.2}, margin={"t": 50})
    return fig


def _find_chrome() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def export(fig: go.Figure, path: str | Path, width: int = 1000, height: int = 500) -> Path:
    """Write ``fig`` as ``.html`` (self-contained, interactive) or ``.png`` (rendered by kaleido in Chromium)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".html":
        fig.write_html(path, include_plotlyjs=True, full_html=True)
    elif path.suffix == ".png":
        if not os.environ.get("BROWSER_PATH"):
            chrome = _find_chrome()
            if chrome is None:
                raise ValueError("PNG export renders the figure in Chrome/Chromium, and none was found: "
                                 "install it (Debian: apt-get install chromium) or export .html instead")
            os.environ["BROWSER_PATH"] = chrome
        fig.write_image(path, width=width, height=height, scale=1)
    else:
        raise ValueError(f"figures are exported as .html or .png; got '{path.name}'")
    return path


def frontier_figure(frontier: Frontier) -> go.Figure:
    """Effect vs perplexity on the dev prompts, one curve per method and side; filled markers are fluent settings."""
    spec = frontier.spec
    fig = go.Figure()
    for row in frontier.rows:
        base = row.dev_base
        fluent = [not spec.rules.problems(ev, base) for _, ev in row.dev]
        fig.add_trace(go.Scatter(
            x=[ev.perplexity / base.perplexity for _, ev in row.dev], y=[getattr(ev, spec.metric) for _, ev in row.dev],
            mode="lines+markers", name=f"{row.method} {'+' if row.side > 0 else '−'}",
            line={"color": METHOD_COLORS.get(row.method), "dash": "solid" if row.side > 0 else "dot"},
            marker={"size": 9, "symbol": ["circle" if f else "circle-open" for f in fluent]},
            text=[f"strength {s:+g}; Dist-3 {ev.dist3 / base.dist3:.2f}×; looping {ev.repetition:.0%}" for s, ev in row.dev],
            hovertemplate="%{text}<br>perplexity %{x:.2f}×<br>" + spec.metric + " %{y:.2f}<extra></extra>"))
    fig.add_vline(x=spec.rules.perplexity_ratio, line_dash="dash", line_color="grey", annotation_text="perplexity bound")
    title, span = METRICS.get(spec.metric, (spec.metric, None))
    fig.update_layout(title=f"{spec.switch}: fluent frontier on dev prompts (filled = fluent)", xaxis_title="perplexity ÷ unsteered",
                      yaxis_title=title, yaxis_range=span, template="plotly_white")
    return fig
