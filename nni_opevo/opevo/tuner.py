"""OpEvoTuner: OpEvo (Gao et al., "OpEvo: An Evolutionary Method for Tensor Operator
Optimization", AAAI 2021) as a steady-state NNI 3.0 tuner, in two variants: ``paper``, Algorithm 1
as published (``paper``), and ``screened``, the default, which screens the paper's children with
a surrogate and adds restarts and local steps (``screened``).

In both variants no configuration is proposed twice (sec. 4.4): a child that is evaluated or in
flight is mutated again (``Variant.variations``), then the base finds the nearest unseen one. The
NNI plumbing (history, failures, unknown ids, resume, no repeats, the constraint hook) is the
base's (``base.PopulationTuner``).
"""
from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Any

from ..base import PopulationTuner
from ..space.search_space import Config, ConfigKey
from .args import OpEvoArgs
from .paper import Paper
from .screened import Screened
from .variant import Variant

VARIANTS: dict[str, type[Variant]] = {"paper": Paper, "screened": Screened}
"""The ``variant`` classArg's values."""


class OpEvoTuner(PopulationTuner):
    """OpEvo for NNI (Gao et al. 2021; see the module docstring)."""

    algorithm = "OpEvo"
    Args = OpEvoArgs
    args: OpEvoArgs

    def __init__(self, **class_args: Any) -> None:
        super().__init__(**class_args)
        self.search: Variant = VARIANTS[self.args.variant](self, self.args)
        """The variant that proposes."""

    def kinship(self) -> Hashable | None:
        return self.search.kinship()

    def learn_from(self, kin: list[PopulationTuner]) -> None:
        self.search.learn_from([k.search for k in kin if isinstance(k, OpEvoTuner) and k is not self])

    def _rebuild(self) -> None:
        self.search.rebuild()

    def _observe(self, key: ConfigKey) -> None:
        self.search.observe(key)

    def _propose(self) -> Config:
        return self.search.propose()

    def _variations(self, config: Config) -> Iterator[Config]:
        return self.search.variations(config)
