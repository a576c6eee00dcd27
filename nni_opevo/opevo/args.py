"""OpEvo's classArgs, declared once (``class_args``); their defaults come from ``settings``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..class_args import SearchArgs, arg, one_of, open_unit, positive_int, unit
from . import settings


def non_negative_int(name: str, value: Any) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
        raise ValueError(f"classArg '{name}' must be an integer >= 0, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class OpEvoArgs(SearchArgs):
    parents_size: int = arg(settings.PARENTS_SIZE, positive_int, "lambda, the top configurations recombined (paper: 8)")
    offspring_size: int = arg(settings.OFFSPRING_SIZE, positive_int, "rho, the children bred from one selection of "
                                                                     "parents (paper: 8; the paper variant)")
    mutate_rate: float = arg(settings.MUTATE_RATE, open_unit, "q of the q-random walk: the probability of each further "
                                                              "step (paper: 0.5); near 0 children stay close to their "
                                                              "parents")
    variant: str = arg("screened", one_of("screened", "paper"), "'screened': children screened by a surrogate's "
                       "expected improvement, sizes stepping by doubling too, restarts (see docs/tuners.md); "
                       "'paper': Algorithm 1 exactly as published")
    screen: int = arg(settings.SCREEN, positive_int, "children bred per proposal and ranked by the surrogate, beside the "
                                                     "epoch best's neighbours (screened)")
    explore: float = arg(settings.EXPLORE, unit, "share of the screened candidates drawn uniformly at random instead "
                                                 "of bred (screened)")
    restart: int = arg(settings.RESTART, non_negative_int, "measurements without improving the current epoch's best "
                                                           "before a restart (screened; 0: never)")
    local: float = arg(settings.LOCAL, unit, "share of the proposals (screened, past each random start) that measure an "
                                             "unmeasured neighbour of the epoch's best, the one the surrogate is least "
                                             "sure of, instead of its expected improvement's pick (0: none)")
    migrants: int = arg(settings.MIGRANTS, non_negative_int, "inside a network with transfer: each kin layer's best "
                                                             "kernels, carried into this layer's space, screened beside "
                                                             "its children (0: none)")
