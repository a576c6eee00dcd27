"""OpEvo's classArgs, declared once (``class_args``); their defaults come from ``settings``."""
from __future__ import annotations

from dataclasses import dataclass

from ..class_args import SearchArgs, arg, int_in, one_of, open_unit, unit
from . import settings


@dataclass(frozen=True)
class OpEvoArgs(SearchArgs):
    parents_size: int = arg(settings.PARENTS_SIZE, int_in(1, 256), "lambda, the top configurations recombined (paper: 8)")
    offspring_size: int = arg(settings.OFFSPRING_SIZE, int_in(1, 10_000), "rho, the children bred from one selection of "
                                                                     "parents (paper: 8; the paper variant)")
    mutate_rate: float = arg(settings.MUTATE_RATE, open_unit, "q of the q-random walk: the probability of each further "
                                                              "step (paper: 0.5); near 0 children stay close to their "
                                                              "parents")
    variant: str = arg("screened", one_of("screened", "paper"), "'screened': children screened by a surrogate's "
                       "expected improvement, sizes stepping by doubling too, restarts (see docs/tuners.md); "
                       "'paper': Algorithm 1 exactly as published")
    screen: int = arg(settings.SCREEN, int_in(1, 1024), "children bred per proposal and ranked by the surrogate, beside the "
                                                     "epoch best's neighbours (screened)")
    explore: float = arg(settings.EXPLORE, unit, "share of the screened candidates drawn uniformly at random instead "
                                                 "of bred (screened)")
    restart: int = arg(settings.RESTART, int_in(0, 100_000), "measurements without improving the current epoch's best "
                                                           "before a restart (screened; 0: never)")
    local: float = arg(settings.LOCAL, unit, "share of the proposals (screened, past each random start) that measure an "
                                             "unmeasured neighbour of the epoch's best, the one the surrogate is least "
                                             "sure of, instead of its expected improvement's pick (0: none)")
    migrants: int = arg(settings.MIGRANTS, int_in(0, 16), "inside a network with transfer: each kin layer's best "
                                                             "kernels, carried into this layer's space, screened beside "
                                                             "its children (0: none)")
