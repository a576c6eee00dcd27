"""The proposal fingerprint: proof that a change to the code left every tuner's search unchanged.

For each tuner of the catalog, each seed and each landscape (the brute-forced caches and the
synthetic tiled-MatMul landscapes), the tuner is driven through NNI's calls one trial at a time
for ``budget`` evaluations, and the SHA-256 of its proposals (the trial parameters, in order, as
canonical JSON) is recorded. A refactor must reproduce every hash; a change that is meant to
alter a search re-records the file in a commit of its own that says so. The network tuner is
fingerprinted on a network whose layers are the synthetic landscapes.

    python -m nni_opevo_bench.fingerprint record   # writes nni_opevo_bench/fingerprint.json
    python -m nni_opevo_bench.fingerprint check    # exits 1 naming every run whose proposals changed

Caches come from ``--hub`` (the four of ``../shared/data/benchmark_hub``) and ``--held-out`` (the
fifth, ``docs/benchmark.md`` says how to fetch it); a missing one is left out
of a check and said so, and a record needs them all.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nni_opevo import catalog
from nni_opevo.testing.dispatch import drive
from trial_code.cli import add_number, description

from .objectives import SYNTHETIC, Cache, Objective, Synthetic
from .tuning_cache import cache_name

RECORD = Path(__file__).with_name("fingerprint.json")
HUB = Path(__file__).resolve().parents[2] / "shared" / "data" / "benchmark_hub"
HUB_CACHES = ("gemm/RTX_2080_Ti.json.gz", "gemm/RTX_Titan.json.gz", "convolution/MI250X.json.gz",
              "convolution/W6600.json.gz")
HELD_OUT = Path("/tmp/held-out/convolution_kt/RTX_2080_Ti.json")
"""Where ``docs/benchmark.md`` puts the held-out cache."""
NETWORK = "network:" + "+".join(SYNTHETIC)
"""The landscape name of the network run: one layer per synthetic landscape."""
UNSEEDED = ("evolution",)
"""Catalog tuners left out: NNI's Evolution draws from a ``RandomState`` it seeds from the OS, so
its proposals differ from run to run whatever the seed (ChoiceView, which carries it, is
fingerprinted with TPE and Random)."""
NETWORK_TUNER = "opevo"
"""The layers' tuner of the network run (the one that learns across layers)."""


@dataclass(frozen=True)
class Job:
    landscape: str  # a synthetic workload, a cache file, or NETWORK
    tuner: str  # a catalog spec
    seed: int
    budget: int

    @property
    def label(self) -> str:
        """The landscape's name: a synthetic one's, or a cache's ``<folder>/<file>``, wherever the file lies."""
        return self.landscape if self.landscape in SYNTHETIC or self.landscape == NETWORK else cache_name(self.landscape)

    @property
    def name(self) -> str:
        return f"{self.label} {self.tuner} seed {self.seed}"


def _synthetic_network() -> tuple[dict[str, Any], Callable[[dict[str, Any]], Any]]:
    """The network tuner's space whose layers are the synthetic landscapes, and its objective."""
    layers = {name: Synthetic(name) for name in SYNTHETIC}
    space = {"layer": {"_type": "choice", "_value": [{"_name": name, **o.space} for name, o in layers.items()]}}

    def objective(params: dict[str, Any]) -> dict[str, Any]:
        inner = dict(params["layer"])
        return layers[inner.pop("_name")](inner)

    return space, objective


def proposals(job: Job) -> tuple[str, int]:
    """(SHA-256 of the job's proposals, how many there were)."""
    logging.getLogger("nni").setLevel(logging.WARNING)  # NNI's built-ins log every trial's end
    if job.landscape == NETWORK:
        space, objective = _synthetic_network()
        tuner = catalog.build_network(job.tuner, {name: 1.0 for name in SYNTHETIC}, job.seed)
    else:
        problem: Objective = Synthetic(job.landscape) if job.landscape in SYNTHETIC else Cache(job.landscape)
        space, objective = problem.space, problem
        tuner = catalog.build(job.tuner, job.seed, extra=problem.constraint)
    run = drive(tuner, space, objective, job.budget, concurrency=1, seed=job.seed, charge_tuner_time=False)
    digest = hashlib.sha256()
    for trial in run.trials:
        digest.update(json.dumps(trial.parameters, sort_keys=True).encode())
        digest.update(b"\n")
    return digest.hexdigest(), len(run.trials)


def jobs(landscapes: list[str], seeds: int, budget: int) -> Iterator[Job]:
    for landscape in landscapes:
        for tuner in (t for t in catalog.CATALOG if t not in UNSEEDED):
            for seed in range(seeds):
                yield Job(landscape, tuner, seed, budget)
    for seed in range(seeds):
        yield Job(NETWORK, NETWORK_TUNER, seed, budget)


def landscapes(hub: Path, held_out: Path, need_all: bool) -> list[str]:
    caches = [hub / name for name in HUB_CACHES] + [held_out]
    missing = [str(path) for path in caches if not path.is_file()]
    if missing and need_all:
        raise SystemExit(f"a record needs every cache; missing: {', '.join(missing)}")
    for path in missing:
        print(f"left out (missing): {path}", file=sys.stderr)
    return [*(str(path) for path in caches if path.is_file()), *SYNTHETIC]


def key(job: Job) -> str:
    return f"{job.label}|{job.tuner}|{job.seed}"


def compute(todo: list[Job], workers: int) -> dict[str, dict[str, Any]]:
    out = {}
    with ProcessPoolExecutor(workers) as pool:
        for job, (digest, n) in zip(todo, pool.map(proposals, todo)):
            out[key(job)] = {"sha256": digest, "proposals": n}
            print(f"{job.name}: {n} proposals {digest[:12]}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nni-opevo fingerprint", description=description(__doc__))
    parser.add_argument("action", choices=("record", "check"))
    parser.add_argument("--hub", type=Path, default=HUB, help="folder of the four benchmark-hub caches")
    parser.add_argument("--held-out", type=Path, default=HELD_OUT, help="the held-out convolution cache")
    add_number(parser, "--seeds", int, 1, 100, "record: seeds 0..N-1 (default 5); check: the first N of the record's")
    add_number(parser, "--budget", int, 1, 100_000, "record: evaluations per run (a check uses the record's)",
               default=200)
    add_number(parser, "--workers", int, 1, 64, "processes running runs", default=2)
    parser.add_argument("--only", nargs="+", help="only the runs whose landscape|tuner|seed holds one of these "
                                                   "(SYN1, W6600, network, '|opevo|', ...); record: the others keep "
                                                   "their record, so a change to one tuner re-records that tuner alone")
    args = parser.parse_args(argv)
    names = landscapes(args.hub, args.held_out, need_all=args.action == "record")

    def chosen(job: Job) -> bool:
        return not args.only or any(o in key(job) for o in args.only)

    if args.action == "record":
        if args.only:  # a partial record keeps the record's seeds and budget
            record = json.loads(RECORD.read_text())
            todo = [j for j in jobs(names, record["seeds"], record["budget"]) if chosen(j)]
            record["runs"].update(compute(todo, args.workers))
        else:
            seeds = args.seeds or 5
            todo = list(jobs(names, seeds, args.budget))
            record = {"seeds": seeds, "budget": args.budget, "runs": compute(todo, args.workers)}
        RECORD.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        print(f"recorded {len(todo)} of {len(record['runs'])} runs in {RECORD}")
        return 0
    recorded = json.loads(RECORD.read_text())
    todo = [j for j in jobs(names, min(args.seeds or recorded["seeds"], recorded["seeds"]), recorded["budget"])
            if chosen(j)]
    unknown = [key(j) for j in todo if key(j) not in recorded["runs"]]
    if unknown:
        print(f"not in the record: {', '.join(unknown)}", file=sys.stderr)
        return 1
    now = compute(todo, args.workers)
    changed = [k for k, v in now.items() if v != recorded["runs"][k]]
    for k in changed:
        print(f"CHANGED {k}: recorded {recorded['runs'][k]}, now {now[k]}", file=sys.stderr)
    print(f"{len(now) - len(changed)} of {len(now)} runs propose as recorded")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
