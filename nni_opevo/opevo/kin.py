"""What a screened OpEvo layer of a network learns from its kin: the other layers of the same
template (``PopulationTuner.kinship``: their atoms mean the same).

* **Pooled training**: the surrogate trains on the kin's measurements too, each row ending in a
  code of the layer it belongs to (categorical, so the surrogate's fitted relevance of that atom
  says how far measurements carry from one layer to another), all weighed on one scale of the
  pooled objectives: a layer's scores scaled to its own best would, after its first two or three
  trials, call a poor kernel its best. TFLOPS, what the trials report, compare across layers of
  one template; the layer's own rows come last, the most recent, which the surrogate keeps first.
* **Migrants**: each kin's ``migrants`` best measured kernels, carried into this layer's space
  (``Atoms.project``), are screened beside the layer's own children. A layer past its random
  start breeds near its own parents, so a kernel one layer found would reach the others only by
  chance (the island model's migration; docs/tuners.md has the evidence).

A kin is seen through ``Relative``: its measurements, its atoms and its population, nothing else.
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from ..fitness import Fitness
from ..population import Population
from ..space.search_space import Config, ConfigKey
from .atoms import Atoms
from .surrogate import TrainingSet


class Relative(Protocol):
    """What a layer shows its kin."""

    measured: TrainingSet
    atoms: Atoms | None

    @property
    def population(self) -> Population | None: ...


class Kin:
    """A layer's kin (see the module docstring); falsy when it has none."""

    def __init__(self, others: Sequence[Relative] = (), migrants: int = 0) -> None:
        self.others = list(others)
        self.migrants = migrants
        self.projected: dict[tuple[int, ConfigKey], Config | None] = {}
        """Kin's kernels carried into this space, by (kin's place in ``others``, its key)."""

    def __bool__(self) -> bool:
        return bool(self.others)

    def __len__(self) -> int:
        return len(self.others)

    def have_measured(self) -> bool:
        return any(len(k.measured) for k in self.others)

    def ordinal(self, own: np.ndarray) -> np.ndarray:
        """The surrogate's atom kinds: the layer's own, and with kin one categorical atom more,
        the layer a measurement belongs to."""
        return np.append(own, False) if self else own

    def row(self, atoms: np.ndarray) -> np.ndarray:
        """A candidate of this layer as the pooled surrogate sees it: with kin, this layer's code."""
        return np.append(atoms, float(len(self.others))) if self else atoms

    def training(self, own: Relative, mode: str, width: int) -> tuple[np.ndarray, np.ndarray]:
        """(atoms with the layer codes, eq. 2 weights on the pooled scale) of every layer's
        measurements, this one's last; ``width`` is the row width with the code."""
        members = [(code, t) for code, t in enumerate((*self.others, own)) if len(t.measured)]
        if not members:
            return np.zeros((0, width)), np.zeros(0)
        pooled = Fitness(mode)  # type: ignore[arg-type]
        values = np.concatenate([t.measured.objectives for _, t in members])
        if np.isfinite(values).any():
            pooled.observe(float(np.nanmin(values)))
            pooled.observe(float(np.nanmax(values)))
        parts = [(code, *t.measured.arrays(pooled)) for code, t in members]
        rows = [np.column_stack([atoms, np.full(len(atoms), float(code))]) for code, atoms, _ in parts]
        return np.concatenate(rows), np.concatenate([weights for _, _, weights in parts])

    def reset(self) -> None:
        """This layer's space changed: projections into it are void."""
        self.projected = {}

    def migrants_into(self, atoms: Atoms) -> list[Config]:
        """Each kin's ``migrants`` best measured kernels, carried into the space of ``atoms``."""
        out = []
        for place, kin in enumerate(self.others):
            population = kin.population
            if kin.atoms is None or population is None:
                continue
            for key in itertools.islice(population.evaluated(), self.migrants):
                if population.weight(key) <= 0:
                    break
                if (place, key) not in self.projected:
                    self.projected[place, key] = atoms.project(population.records[key].config, kin.atoms)
                migrant = self.projected[place, key]
                if migrant is not None:
                    out.append(migrant)
        return out
