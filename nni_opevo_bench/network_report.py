"""A network's latency against its total trials (the OpEvo paper's figure 6), from the CSV.

After each trial of a run, the network's latency is the sum over its layers of count x the
best latency measured for the layer so far, a layer without a working kernel yet counting at
TVM's default schedule (measured once per network and target at the start of the benchmark,
``defaults.json``). A layer's latency is its FLOPs over the TFLOPS its trial reported.

* ``network_vs_trials.png`` / ``network_vs_time.png``: mean ± sample std over seeds, one panel
  per network, the latency axis logarithmic (the first trials start from the default schedule).
* ``networks.md``: mean ± sample std network latency after a quarter, half and all of the
  budget per tuner, the lowest mean in bold; then, where ``end_to_end.csv`` has them
  (``network_end_to_end``), the whole network built with each run's final kernels and timed as
  one program, beside that run's sum.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from trial_code import networks
from trial_code.files import replace_text
from trial_code.templates import for_workload

from .figures import band, legend, panels, sample_std, save

DEFAULTS = "defaults.json"


def record_defaults(out: Path, network: str, target: str, latencies: dict[str, float | None]) -> None:
    """Keep ``network``'s layers' latencies at TVM's default schedule on ``target`` (merged)."""
    path = out / DEFAULTS
    known = json.loads(path.read_text()) if path.exists() else {}
    known.setdefault(network, {})[target] = latencies
    replace_text(path, json.dumps(known, indent=2, sort_keys=True) + "\n")


def recorded_defaults(out: Path, network: str, target: str) -> dict[str, float | None] | None:
    path = out / DEFAULTS
    known = json.loads(path.read_text()) if path.exists() else {}
    return known.get(network, {}).get(target)


def latency_curve(rows: list[dict[str, str]], network: str, defaults: dict[str, float | None]) -> np.ndarray:
    """The network's latency (ms) after each row of one run (inf while a layer has none)."""
    layers = networks.lookup(network)
    flops = {x.name: for_workload(x.workload).flops(x.workload) for x in layers}
    best = {x.name: defaults.get(x.name) or math.inf for x in layers}
    out = []
    for row in rows:
        tflops = float(row["tflops"])
        name = networks.split(json.loads(row["configuration"]))[0]
        if tflops > 0:
            best[name] = min(best[name], flops[name] / tflops / 1e9)
        out.append(sum(x.count * best[x.name] for x in layers))
    return np.array(out)


def _curves(seeds: dict[str, list[dict[str, str]]], network: str, defaults: dict[str, float | None]) -> np.ndarray:
    """seeds x trials; a shorter run keeps its last latency."""
    curves = [latency_curve(rows, network, defaults) for rows in seeds.values()]
    length = max(len(c) for c in curves)
    return np.array([np.concatenate([c, np.full(length - len(c), c[-1])]) for c in curves])


def table(runs: dict[str, dict[str, dict[str, list[dict[str, str]]]]], defaults: dict[str, dict],
          whole: dict[tuple[str, str, str, str], dict[str, str]] | None = None, target: str = "") -> str:

    lines = []
    for network, tuners in sorted(runs.items()):
        curves = {t: _curves(seeds, network, defaults[network]) for t, seeds in tuners.items()}
        length = max(c.shape[1] for c in curves.values())
        points = sorted({max(1, length // 4), max(1, length // 2), length})
        lines += [f"### {network}: latency (ms) as the sum of count x layer latency", "",
                  "| tuner | seeds | " + " | ".join(f"after {p} trials" for p in points) + " |",
                  "|---|---|" + "---|" * len(points)]
        means = {t: [float(np.mean(c[:, min(p, c.shape[1]) - 1])) for p in points] for t, c in curves.items()}
        lowest = [min(m[i] for m in means.values()) for i in range(len(points))]
        for tuner in sorted(curves, key=lambda t: means[t][-1]):
            cells = []
            for i, p in enumerate(points):
                column = curves[tuner][:, min(p, curves[tuner].shape[1]) - 1]
                cell = f"{np.mean(column):.4g} ± {sample_std(column):.2g}"
                cells.append(f"**{cell}**" if means[tuner][i] == lowest[i] else cell)
            lines.append(f"| {tuner} | {len(tuners[tuner])} | " + " | ".join(cells) + " |")
        lines.append("")
        lines += _whole_network(network, tuners, curves, defaults[network], whole or {}, target)
    return "\n".join(lines)


def _whole_network(network: str, tuners: dict[str, dict[str, list[dict[str, str]]]], curves: dict[str, np.ndarray],
                   defaults: dict[str, float | None], whole: dict[tuple[str, str, str, str], dict[str, str]],
                   target: str) -> list[str]:
    """The table of each run's sum after its last trial against its whole network built and timed."""
    from .network_end_to_end import DEFAULT

    measured = {k: r for k, r in whole.items() if k[0] == network and k[1] == target}
    if not measured:
        return []

    def cell(values: list[float]) -> str:
        return f"{np.mean(values):.4g} ± {sample_std(np.array(values)):.2g}" if values else "-"

    lines = [f"#### {network}: the whole network built with the final kernels and timed as one program (ms)", "",
             "| tuner | runs built | sum of count x layer latency | whole network | whole / sum | failed |",
             "|---|---|---|---|---|---|"]
    entries: list[tuple[str, list[float], list[float], list[str]]] = []
    default_row = measured.get((network, target, DEFAULT, ""))
    if default_row is not None and all(v is not None for v in defaults.values()):
        layers = networks.lookup(network)
        total = sum(x.count * defaults[x.name] for x in layers)  # type: ignore[operator]
        ok = not default_row["error"]
        entries.append(("TVM's default schedule (untuned)", [total] if ok else [],
                        [float(default_row["end_to_end_ms"])] if ok else [], [default_row["error"]] if not ok else []))
    for tuner in sorted(tuners, key=lambda t: float(np.mean(curves[t][:, -1]))):
        sums, times, errors = [], [], []
        for i, seed in enumerate(tuners[tuner]):
            row = measured.get((network, target, tuner, seed))
            if row is None:
                continue
            if row["error"]:
                errors.append(row["error"])
                continue
            sums.append(float(curves[tuner][i, len(tuners[tuner][seed]) - 1]))
            times.append(float(row["end_to_end_ms"]))
        entries.append((tuner, sums, times, errors))
    for name, sums, times, errors in entries:
        ratio = cell([t / s for s, t in zip(sums, times)])
        failed = "; ".join(sorted(set(errors))) or "-"
        lines.append(f"| {name} | {len(times)} | {cell(sums)} | {cell(times)} | {ratio} | {failed} |")
    return lines + ["", "Each whole-network time is one timing, taken when its run ended: on a machine whose speed "
                    "drifts, compare tuners with `nni-opevo profile --out <this folder>`, which times every run's "
                    "kernels again side by side.", ""]


def plot(runs: dict[str, dict[str, dict[str, list[dict[str, str]]]]], defaults: dict[str, dict], out: Path
         ) -> list[Path]:

    written = []
    for axis in ("trials", "time"):
        fig, axes = panels(len(runs))
        names = sorted({tuner for tuners in runs.values() for tuner in tuners})
        for ax, (network, tuners) in zip(axes, sorted(runs.items())):
            for tuner, seeds in sorted(tuners.items()):
                curves = _curves(seeds, network, defaults[network])
                if axis == "trials":
                    band(ax, np.arange(1, curves.shape[1] + 1), curves, tuner, names)
                    continue
                ends = [max(float(r["finished_s"]) for r in rows) for rows in seeds.values()]
                grid = np.linspace(0, max(ends), 200)
                at_time = []
                for rows, curve in zip(seeds.values(), curves):
                    finished = np.array([float(r["finished_s"]) for r in rows])
                    order = np.argsort(finished, kind="stable")
                    ordered = np.minimum.accumulate(curve[: len(rows)][order])
                    at = np.searchsorted(finished[order], grid, side="right") - 1
                    at_time.append(np.where(at >= 0, ordered[np.clip(at, 0, None)], np.inf))
                band(ax, grid, np.array(at_time), tuner, names)
            ax.set_yscale("log")
            ax.set_title(network)
            ax.set_xlabel("total trials" if axis == "trials" else "wall-clock seconds")
            ax.set_ylabel("network latency, ms (sum over layers)")
            ax.grid(alpha=0.3)
        legend(fig, axes)
        fig.tight_layout()
        path = out / f"network_vs_{axis}.png"
        save(fig, path)
        written.append(path)
    return written


def write(runs: dict[str, dict[str, dict[str, list[dict[str, str]]]]], out: Path, target: str) -> list[Path]:
    """The network figures and table for the networks in ``runs`` whose defaults are recorded."""
    defaults = {n: recorded_defaults(out, n, target) for n in runs}
    known = {n: t for n, t in runs.items() if defaults[n] is not None}
    if not known:
        return []
    from .network_end_to_end import read

    path = out / "networks.md"
    path.write_text(table(known, defaults, read(out), target))
    return [path, *plot(known, defaults, out)]
