"""What every figure and table of the harness shares: panels, a tuner's mean +- std band in a
colour it keeps in every panel, the legend, and the sample standard deviation over seeds."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np


def panels(n: int) -> tuple[object, list]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def save(fig: object, path: Path) -> None:
    """Write and close the figure (pyplot keeps every open figure alive)."""
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=110)
    plt.close(fig)


def sample_std(values: np.ndarray | list[float], axis: int | None = None) -> np.ndarray | float:
    """Standard deviation over seeds with ddof = 1; 0 for a single seed."""
    values = np.asarray(values, dtype=float)
    n = values.shape[axis] if axis is not None else values.size
    return values.std(axis=axis, ddof=1) if n > 1 else np.zeros_like(values.mean(axis=axis))


PRODUCT = "opevo"
"""The catalog name of the tuner this project ships, drawn on top of its peers."""


def band(ax, x: np.ndarray, curves: np.ndarray, label: str, tuners: list[str]) -> None:
    """Mean ± sample std over seeds. Each tuner keeps one colour in every panel (20 distinct ones,
    enough for 18 tuners), and the product is drawn thick, black and on top; with many tuners the
    bands fade, so that the means stay readable."""
    import matplotlib

    curves = np.where(np.isfinite(curves).all(axis=0), curves, np.nan)  # a seed with nothing yet: no point there
    mean, std = curves.mean(axis=0), sample_std(curves, axis=0)
    ours = label == PRODUCT
    colour = "black" if ours else matplotlib.colormaps["tab20"](tuners.index(label) % 20)
    ax.plot(x, mean, label=label, color=colour, linewidth=2.4 if ours else 1.1, zorder=3 if ours else 2)
    ax.fill_between(x, mean - std, mean + std, color=colour, alpha=0.2 if ours or len(tuners) <= 6 else 0.06,
                    linewidth=0)


def legend(fig: object, axes: list) -> None:
    """In an empty panel where the grid has one, else on the first panel."""
    handles, labels = axes[0].get_legend_handles_labels()
    spare = [ax for ax in fig.axes if not ax.get_visible()]
    if spare:
        spare[0].set_visible(True)
        spare[0].axis("off")
        spare[0].legend(handles, labels, loc="center", fontsize=8, ncol=2 if len(labels) > 9 else 1)
    else:
        axes[0].legend(fontsize=7)
