"""Plots for the reports: a titled figure carrying the machine's banner, saved atomically as PNG."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def figure(title: str, banner_text: str, **kw):
    import matplotlib
    matplotlib.use("Agg")  # files only: no display here, and none needed
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(**kw)
    fig.suptitle(title, fontsize=11)
    fig.text(0.01, 0.005, banner_text, fontsize=6, wrap=True, va="bottom")
    return plt, fig, ax


def legend(ax, **kw) -> None:
    # A smoke run's plots can have nothing labelled (no fio, no successful run): no empty legend box then.
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, **kw)


def save(plt, fig, path: Path) -> None:
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)


def overlaid_bars(title: str, banner_text: str, names: list[str], wide: tuple[str, list[float]],
                  narrow: tuple[str, list[float]], xlabel: str):
    """One horizontal bar per name, top down: `wide` (label, values) at full height, `narrow` at half height
    over it; the figure for the caller to add to, then save."""
    plt, fig, ax = figure(title, banner_text, figsize=(8, 4.5))
    ax.barh(names, wide[1], label=wide[0])
    ax.barh(names, narrow[1], height=0.4, label=narrow[0])
    ax.set_xlabel(xlabel)
    ax.invert_yaxis()
    return plt, fig, ax


def with_figure(markdown: Path, stem: str, alt: str, draw: Callable[[Path], None], body: str) -> str:
    """Draws a figure into bench/STEM.png beside `markdown`; the section body that shows it above `body`."""
    (markdown.parent / "bench").mkdir(parents=True, exist_ok=True)
    draw(markdown.parent / "bench" / f"{stem}.png")
    return f"![{alt}](bench/{stem}.png)\n\n{body}"
