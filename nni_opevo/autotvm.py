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
from typing import Any

import numpy as np
from nni import ClassArgsValidator

from . import class_args
from .annealing import Annealer
from .base import PopulationTuner
from .cost_model import OBJECTIVES, XGBoostCostModel, import_xgboost
from .diversity import diverse_batch
from .search_space import Config, ConfigKey

_logger = logging.getLogger(__name__)


def _validate(kwargs: dict[str, Any]) -> dict[str, Any]:
    known = {"optimize_mode", "plan_size", "epsilon", "diversity_ratio", "diversity_weight", "loss",
             "sa_chains", "sa_steps", "sa_early_stop", "seed"}
    class_args.reject_unknown(known, kwargs)
    loss = kwargs.get("loss", "rank")
    if loss not in OBJECTIVES:
        raise ValueError(f"classArg 'loss' must be one of {', '.join(map(repr, OBJECTIVES))}, got {loss!r}")
    ratio = kwargs.get("diversity_ratio", 2.0)
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not ratio >= 1:
        raise ValueError(f"classArg 'diversity_ratio' must be a number >= 1 (1 turns diversity off), got {ratio!r}")
    weight = kwargs.get("diversity_weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight >= 0:
        raise ValueError(f"classArg 'diversity_weight' must be a number >= 0, got {weight!r}")
    return {
        "optimize_mode": class_args.optimize_mode(kwargs.get("optimize_mode", "maximize")),
        "plan_size": class_args.positive_int("plan_size", kwargs.get("plan_size", 64)),
        "epsilon": class_args.unit("epsilon", kwargs.get("epsilon", 0.05)),
        "diversity_ratio": float(ratio),
        "diversity_weight": float(weight),
        "loss": loss,
        "sa_chains": class_args.positive_int("sa_chains", kwargs.get("sa_chains", 128)),
        "sa_steps": class_args.positive_int("sa_steps", kwargs.get("sa_steps", 500)),
        "sa_early_stop": class_args.positive_int("sa_early_stop", kwargs.get("sa_early_stop", 50)),
        "seed": class_args.seed(kwargs.get("seed")),
    }


class AutoTVMClassArgsValidator(ClassArgsValidator):
    def validate_class_args(self, **kwargs: Any) -> None:
        _validate(kwargs)
        import_xgboost()


class AutoTVMTuner(PopulationTuner):
    """AutoTVM's XGBoost + simulated annealing tuner for NNI.

    Parameters
    ----------
    optimize_mode
        'maximize' (default) or 'minimize'.
    plan_size
        b, the batch planned per model fit (AutoTVM: 64).
    epsilon
        Share of each batch drawn at random (0.05).
    diversity_ratio
        lambda: eq. 3 picks the batch from the top lambda*b of the annealer (2; 1 = plain top-b).
    diversity_weight
        alpha of eq. 3, per newly covered parameter value, against predicted quality scaled to [0, 1].
    loss
        'rank' (pairwise rank objective, the paper's default) or 'reg' (squared error).
    sa_chains, sa_steps, sa_early_stop
        The annealer's parallel chains (128), steps (500) and patience (50).
    seed
        Seeds the annealer, the random draws and XGBoost; drawn and logged when omitted.
    """

    algorithm = "AutoTVM"

    def __init__(
        self,
        optimize_mode: str = "maximize",
        plan_size: int = 64,
        epsilon: float = 0.05,
        diversity_ratio: float = 2.0,
        diversity_weight: float = 1.0,
        loss: str = "rank",
        sa_chains: int = 128,
        sa_steps: int = 500,
        sa_early_stop: int = 50,
        seed: int | None = None,
    ) -> None:
        args = _validate(dict(optimize_mode=optimize_mode, plan_size=plan_size, epsilon=epsilon,
                              diversity_ratio=diversity_ratio, diversity_weight=diversity_weight, loss=loss,
                              sa_chains=sa_chains, sa_steps=sa_steps, sa_early_stop=sa_early_stop, seed=seed))
        super().__init__(args["optimize_mode"], args["seed"])
        for name in ("plan_size", "epsilon", "diversity_ratio", "diversity_weight", "loss",
                     "sa_chains", "sa_steps", "sa_early_stop"):
            setattr(self, name, args[name])
        self.model = XGBoostCostModel(self.loss, self.plan_size, self.seed)
        self.annealer: Annealer | None = None
        self.plan: list[Config] = []
        self.last_pool: list[tuple[float, Config]] = []  # the annealer's candidates behind the plan
        self._plan_pt = 0
        self._fits = 0
        self._features: dict[ConfigKey, np.ndarray] = {}

    def _rebuild(self) -> None:
        space, _ = self.require_space()
        self.annealer = Annealer(space, self.sa_chains, self.sa_steps, self.sa_early_stop, self.rng)
        self.plan, self._plan_pt, self._fits, self._features = [], 0, 0, {}

    def _observe(self, key: ConfigKey) -> None:
        _, population = self.require_space()
        if population.n_evaluated >= self.plan_size * (self._fits + 1):
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
        space, population = self.require_space()
        assert self.annealer is not None
        for k in keys:
            if k not in self._features:
                self._features[k] = space.features(population.records[k].config)
        self.model.fit(np.stack([self._features[k] for k in keys]), y)
        self._fits = population.n_evaluated // self.plan_size

        def score(configs: list[Config]) -> np.ndarray:
            return self.model.predict(np.stack([space.features(c) for c in configs]))

        n_model = self.plan_size - int(self.epsilon * self.plan_size)
        pool_size = int(round(self.diversity_ratio * n_model))
        self.last_pool = self.annealer.best(score, pool_size, self.seen)
        configs = [c for _, c in self.last_pool]
        picked = diverse_batch(configs, np.array([s for s, _ in self.last_pool]), n_model, self.diversity_weight)
        self.plan = [configs[i] for i in picked]
        self._plan_pt = 0
        _logger.info("AutoTVM: model fitted on %d results; planned %d of %d candidates",
                     len(keys), len(self.plan), len(configs))
