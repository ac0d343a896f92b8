"""Runs repeated over seeds: accuracies summarised, and a setting's paired against a baseline's."""

from __future__ import annotations

import math

import numpy as np


def paired_delta(acc: dict, base: dict) -> tuple[float | None, float | None]:
    """The change of test accuracy against the baseline in points over the seeds both have (seed -> accuracy):
    its mean and the mean's standard error (None where undefined)."""
    seeds = sorted(set(acc) & set(base))
    if not seeds:
        return None, None
    diff = 100 * np.array([acc[s] - base[s] for s in seeds])
    return float(diff.mean()), float(diff.std(ddof=1) / math.sqrt(diff.size)) if diff.size > 1 else None


def stats(values: list[float]) -> dict:
    a = np.asarray(values, dtype=np.float64)
    return {"mean": float(a.mean()), "std": float(a.std(ddof=1)) if a.size > 1 else 0.0, "n": int(a.size)}


def pm(s: dict) -> str:
    return f"{100 * s['mean']:.2f} ± {100 * s['std']:.2f}"
