"""AutoTVM's tuner (Chen et al., "Learning to Optimize Tensor Programs", NeurIPS 2018, sec. 3,
Algorithm 1) over NNI search spaces: an XGBoost cost model, simulated annealing over it, and
diversity-aware, epsilon-greedy batch selection.

* Until ``plan_size`` (b = 64) results exist, proposals are uniform random.
* Whenever b more results have arrived (b, 2b, 3b, ...), the cost model (``cost_model``,
  rank objective) is refitted on every result, features being ``SearchSpace.features`` (the
  tuner cannot see TVM's loop AST, so these are AutoTVM's configuration-space "knob"
  features), and the parallel annealer (``annealing``: 128 chains, 500 steps, persistent
  states) collects the lambda*b best unsampled configurations by predicted score. Eq. 3
  (``diversity``) picks (1 - epsilon)*b of them, the plan; the last epsilon*b proposals of each
  plan (epsilon = 0.05) are random draws.
* Proposals follow the plan in order; when it runs out before the next refit (results still
  running), further proposals are random, as in AutoTVM.

The fitness the model learns is the population's eq. 2 weight (TFLOPS as measured, 0 for a
failure, as AutoTVM scores a failed build); only its order matters to the rank objective.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..base import PopulationTuner
from ..class_args import SearchArgs, arg, at_least, int_in, one_of, unit
from ..space.search_space import Config, ConfigKey
from .annealing import Annealer
from .cost_model import OBJECTIVES, XGBoostCostModel, import_xgboost
from .diversity import diverse_batch
from .features import Features

_logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AutoTVMArgs(SearchArgs):
    plan_size: int = arg(64, int_in(1, 4096), "b, the batch planned per model fit (AutoTVM: 64)")
    epsilon: float = arg(0.05, unit, "share of each batch drawn at random")
    diversity_ratio: float = arg(2.0, at_least(1, " (1 turns diversity off)", high=100),
                                 "lambda: eq. 3 picks the batch from the top lambda*b of the annealer")
    diversity_weight: float = arg(1.0, at_least(0), "alpha of eq. 3, per newly covered parameter value, against "
                                                    "predicted quality scaled to [0, 1]")
    loss: str = arg("rank", one_of(*OBJECTIVES), "'rank' (pairwise rank objective, AutoTVM's default) or "
                                                 "'reg' (squared error)")
    sa_chains: int = arg(128, int_in(1, 4096), "parallel chains of the simulated annealer")
    sa_steps: int = arg(500, int_in(1, 100_000), "steps of the annealer per plan")
    sa_early_stop: int = arg(50, int_in(1, 100_000), "the annealer stops after this many steps without a new best")

    def check(self) -> None:
        import_xgboost()



class AutoTVMTuner(PopulationTuner):
    """AutoTVM's XGBoost + simulated annealing tuner for NNI (see the module docstring)."""

    algorithm = "AutoTVM"
    Args = AutoTVMArgs
    args: AutoTVMArgs

    def __init__(self, **class_args: Any) -> None:
        super().__init__(**class_args)
        self.model = XGBoostCostModel(self.args.loss, self.args.plan_size, self.seed)
        self.annealer: Annealer | None = None
        self.plan: list[Config] = []
        self.last_pool: list[tuple[float, Config]] = []  # the annealer's candidates behind the plan
        self._plan_pt = 0
        self._fits = 0
        self._features: dict[ConfigKey, np.ndarray] = {}
        self.features: Features | None = None

    def _rebuild(self) -> None:
        space, _ = self.require_space()
        self.features = Features(space)
        self.annealer = Annealer(space, self.args.sa_chains, self.args.sa_steps, self.args.sa_early_stop, self.rng)
        self.plan, self._plan_pt, self._fits, self._features = [], 0, 0, {}

    def _observe(self, key: ConfigKey) -> None:
        if not self.importing:  # an import fits once, at its end (``_imported``)
            self._fit_when_due()

    def _imported(self) -> None:
        self._fit_when_due()

    def _fit_when_due(self) -> None:
        """Refit and replan once ``plan_size`` more results are in (an import of 10,000 records
        fitting every ``plan_size`` of them took minutes)."""
        _, population = self.require_space()
        if population.n_measured >= self.args.plan_size * (self._fits + 1):
            keys = list(population.evaluated())
            y = np.array([population.weight(k) for k in keys])
            if y.max() > 0:  # as AutoTVM: nothing to learn from before a first valid result
                self._replan(keys, y)

    def _propose(self) -> Config:
        space, _ = self.require_space()
        if self._plan_pt < len(self.plan):
            self._plan_pt += 1
            return self.plan[self._plan_pt - 1]
        return space.sample(self.rng)

    # ------------------------------------------------------------------ model and plan

    def _replan(self, keys: list[ConfigKey], y: np.ndarray) -> None:
        _, population = self.require_space()
        assert self.annealer is not None and self.features is not None
        features = self.features
        for k in keys:
            if k not in self._features:
                self._features[k] = features(population.records[k].config)
        self.model.fit(np.stack([self._features[k] for k in keys]), y)
        self._fits = population.n_measured // self.args.plan_size

        def score(configs: list[Config]) -> np.ndarray:
            return self.model.predict(np.stack([features(c) for c in configs]))

        n_model = self.args.plan_size - int(self.args.epsilon * self.args.plan_size)
        pool_size = int(round(self.args.diversity_ratio * n_model))
        # Seen or infeasible candidates never enter the plan (screened without recording each refusal).
        self.last_pool = self.annealer.best(score, pool_size, lambda c: self.seen(c) or not self.feasible(c, learn=False))
        configs = [c for _, c in self.last_pool]
        picked = diverse_batch(configs, np.array([s for s, _ in self.last_pool]), n_model, self.args.diversity_weight)
        self.plan = [configs[i] for i in picked]
        self._plan_pt = 0
        _logger.info("AutoTVM: model fitted on %d results; planned %d of %d candidates",
                     len(keys), len(self.plan), len(configs))
