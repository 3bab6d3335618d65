"""Paired bootstrap confidence intervals over per-task values (pure functions: lists in, numbers out).

Two systems scored on the same tasks give pairs ``(a_i, b_i)``. The paired bootstrap (Efron & Tibshirani
1993, ch. 13; Koehn 2004 for system comparison) draws ``n`` task indices with replacement ``n_boot`` times
and takes, for each draw ``s``, the mean difference ``d*_s = (1/n) Σ_{i∈s} (b_i − a_i)``; the ``(1 − alpha)``
percentile interval is ``[q_{alpha/2}(d*), q_{1−alpha/2}(d*)]`` (numpy's linear-interpolation percentile).
Resampling tasks, not values, keeps each task's two scores together, so what the tasks share (their
difficulty) cancels out of the difference. :func:`bootstrap_ratio` gives the interval of
``mean(b*) / mean(a*)`` from the same draws (the relative change, ``1`` = no change).

Deterministic for a seed: draws come from ``numpy.random.default_rng(seed)`` in fixed blocks of
:data:`BLOCK` resamples, so the same inputs and seed give the same interval on every machine.

    .venv/bin/python -m pytest tests/eval/test_stats.py -q
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

BLOCK = 256
"""Resamples drawn at once (bounds memory at ``BLOCK * n`` indices; part of what makes a seed reproducible)."""


_UNBOUNDED = np.finfo(np.float64).max / 4
"""Stands for ±inf among resampled ratios (linear interpolation with inf gives nan; this stays finite)."""


class StatsError(ValueError):
    """Inputs a bootstrap cannot use (unpaired lengths, no values, a bad ``alpha`` or ``n_boot``)."""


def _pairs(a: Sequence[float], b: Sequence[float], n_boot: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.ndim != 1 or x.shape != y.shape:
        raise StatsError(f"paired values must be two flat lists of one length, got {x.shape} and {y.shape}")
    if not len(x):
        raise StatsError("no paired values: a bootstrap needs at least one task")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise StatsError("paired values must be finite numbers")
    if not 0 < alpha < 1:
        raise StatsError(f"alpha must be in (0, 1), got {alpha}")
    if n_boot < 1:
        raise StatsError(f"n_boot must be >= 1, got {n_boot}")
    return x, y


def _resampled_means(columns: np.ndarray, n_boot: int, seed: int) -> Iterator[np.ndarray]:
    """Blocks of ``(block, m)`` means of ``columns`` ``(n, m)`` over rows drawn with replacement."""
    rng = np.random.default_rng(seed)
    n = columns.shape[0]
    done = 0
    while done < n_boot:
        size = min(BLOCK, n_boot - done)
        idx = rng.integers(0, n, size=(size, n))  # (block, n) task indices
        yield columns[idx].mean(axis=1)  # (block, n, m) -> (block, m)
        done += size


def _interval(samples: np.ndarray, alpha: float) -> tuple[float, float]:
    lo, hi = np.percentile(samples, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return float(lo), float(hi)


def paired_bootstrap(a: Sequence[float], b: Sequence[float], n_boot: int = 2000, seed: int = 0,
                     alpha: float = 0.05) -> dict[str, float | int]:
    """Mean of each side, ``delta = mean(b − a)`` and its ``1 − alpha`` percentile interval ``[lo, hi]`` from
    ``n_boot`` resamples of the task indices; ``n`` = pairs. ``a[i]`` and ``b[i]`` are one task's two values."""
    x, y = _pairs(a, b, n_boot, alpha)
    d = (y - x)[:, None]  # (n, 1)
    means = np.concatenate([block[:, 0] for block in _resampled_means(d, n_boot, seed)])  # (n_boot,)
    lo, hi = _interval(means, alpha)
    return {"mean_a": float(x.mean()), "mean_b": float(y.mean()), "delta": float(d.mean()), "lo": lo, "hi": hi,
            "n": len(x)}


def bootstrap_ratio(a: Sequence[float], b: Sequence[float], n_boot: int = 2000, seed: int = 0,
                    alpha: float = 0.05) -> dict[str, float | int | None]:
    """``ratio = mean(b) / mean(a)`` and its percentile interval from the same resamples as
    :func:`paired_bootstrap` (same seed, same draws). ``ratio`` is None when ``mean(a)`` is 0; ``hi`` is None
    (unbounded) when so many resamples have ``mean(a*) = 0`` that the upper percentile falls among them.
    Meant for non-negative metrics (success, NDCG, reward), where ``ratio − 1`` is the relative change."""
    x, y = _pairs(a, b, n_boot, alpha)
    both = np.stack([x, y], axis=1)  # (n, 2)
    means = np.concatenate(list(_resampled_means(both, n_boot, seed)))  # (n_boot, 2)
    den, num = means[:, 0], means[:, 1]
    ratios = np.where(num == 0, 1.0, np.sign(num) * _UNBOUNDED)  # x / 0: unbounded; 0 / 0: no change
    np.divide(num, den, out=ratios, where=den != 0)
    finite = ratios[np.abs(ratios) < _UNBOUNDED]
    lo, hi = (_bounded(v, finite) for v in _interval(ratios, alpha))
    mean_a, mean_b = float(x.mean()), float(y.mean())
    return {"mean_a": mean_a, "mean_b": mean_b, "ratio": mean_b / mean_a if mean_a != 0 else None,
            "lo": lo, "hi": hi, "n": len(x)}


def _bounded(v: float, finite: np.ndarray) -> float | None:
    """``v`` if it lies among the finite resampled ratios, None where it reaches into the unbounded ones."""
    return v if len(finite) and finite.min() <= v <= finite.max() else None


def excludes_zero(lo: float | None, hi: float | None) -> bool:
    """Whether ``[lo, hi]`` lies wholly on one side of 0 (the difference is significant at that level)."""
    return lo is not None and hi is not None and (lo > 0 or hi < 0)
