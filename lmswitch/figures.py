"""Plotly figures for evaluation results, and export to HTML or PNG."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .evaluate import Evaluation

# metric key -> (axis title, range or None)
METRICS: dict[str, tuple[str, tuple[float, float] | None]] = {
    "positive_share": ("share positive (vader)", (0, 1)),
    "negative_share": ("share negative (vader)", (0, 1)),
    "mean_sentiment": ("mean vader compound", (-1, 1)),
    "toxicity_prob": ("toxicity probability", (0, 1)),
    "avg_max_toxicity": ("average max toxicity", (0, 1)),
    "formal_share": ("share formal", (0, 1)),
    "perplexity": ("perplexity (unsteered model)", None),
    "dist3": ("Dist-3", (0, 1)),
}


def _check_metric(metric: str) -> str:
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; choose from {', '.join(METRICS)}")
    return metric


def sweep_figure(evals: Sequence[Evaluation], switch: str, metrics: Sequence[str] = ("positive_share", "toxicity_prob")) -> go.Figure:
    """Scores vs ε of one switch (left axis) and perplexity (right axis)."""
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
    sample = [[(ev.texts[0]["prompt"] + ev.texts[0]["text"])[:90] if ev.texts else "" for ev in row] for row in grid]
    for k, metric in enumerate(metrics):
        z = [[getattr(ev, metric) for ev in row] for row in grid]
        lo_hi = METRICS[metric][1]
        fig.add_trace(
            go.Heatmap(
                x=eps_b, y=eps_a, z=z, customdata=sample, colorscale="RdBu" if "sent" in metric or "positive" in metric else "Reds",
                zmin=lo_hi[0] if lo_hi else None, zmax=lo_hi[1] if lo_hi else None, texttemplate="%{z:.2f}",
                colorbar={"x": (k + 1) / len(metrics) - 0.02, "len": 0.9},
                hovertemplate=f"{first} ε=%{{y}}<br>{second} ε=%{{x}}<br>{metric}=%{{z:.3f}}<br>%{{customdata}}<extra></extra>",
            ),
            row=1, col=k + 1,
        )
        fig.update_xaxes(title_text=f"ε of {second}", row=1, col=k + 1)
        fig.update_yaxes(title_text=f"ε of {first}", row=1, col=k + 1)
    fig.update_layout(title=f"composition: '{first}' × '{second}'", template="plotly_white", margin={"t": 70})
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
