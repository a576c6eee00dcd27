"""AutoTVM's statistical cost model (Chen et al. 2018, sec. 3.1-3.2): gradient boosted trees
(XGBoost) over configuration features, trained with the rank objective (eq. 2), or with
squared error for ``loss="reg"``.

Boosting rounds stop early, as in AutoTVM, when the average recall curve over the top
``plan_size`` configurations of the training data (how many of the true top-i are in the
predicted top-i, averaged over i = 1..plan_size) stops improving for ``EARLY_STOP`` rounds.
The hyper-parameters are AutoTVM's XGBoost defaults. xgboost is an optional dependency
(``pip install nni-opevo[xgboost]``); it is imported only when a model is built.
"""
from __future__ import annotations

from typing import Any

import numpy as np

MAX_ROUNDS = 8000
EARLY_STOP = 20
XGB_PARAMS = {"max_depth": 8, "gamma": 1e-4, "min_child_weight": 1, "subsample": 1.0, "eta": 0.3,
              "lambda": 1.0, "alpha": 0.0, "verbosity": 0, "disable_default_eval_metric": 1}
OBJECTIVES = {"rank": "rank:pairwise", "reg": "reg:squarederror"}


def import_xgboost() -> Any:
    try:
        import xgboost
    except ImportError as e:
        raise ImportError(
            "the AutoTVM tuner needs xgboost: pip install 'nni-opevo[xgboost]' (or xgboost / xgboost-cpu)"
        ) from e
    return xgboost


def average_recall(predicted: np.ndarray, actual: np.ndarray, top: int) -> float:
    """Mean over i = 1..top of |true top-i  intersect  predicted top-i| / i."""
    n = min(top, len(actual))
    if n == 0:
        return 0.0
    true_rank = np.empty(len(actual), dtype=int)
    true_rank[np.argsort(-actual, kind="stable")] = np.arange(len(actual))
    ranks = true_rank[np.argsort(-predicted, kind="stable")[:n]]
    i = np.arange(n)
    hits = (ranks[None, :] <= i[:, None]) & (i[None, :] <= i[:, None])
    return float(np.mean(hits.sum(axis=1) / (i + 1)))


class XGBoostCostModel:
    """Fit on (features, fitness) and predict a score whose order follows fitness."""

    def __init__(self, loss: str, plan_size: int, seed: int) -> None:
        self.xgb = import_xgboost()
        self.params = {**XGB_PARAMS, "objective": OBJECTIVES[loss], "seed": seed, "nthread": 1}
        self.plan_size = plan_size
        self._booster: Any = None

    @property
    def trained(self) -> bool:
        return self._booster is not None

    def fit(self, x: np.ndarray, y: np.ndarray) -> None:
        train = self.xgb.DMatrix(x, y, nthread=1)

        def recall(predicted: np.ndarray, data: Any) -> tuple[str, float]:
            return f"a-recall@{self.plan_size}", average_recall(predicted, data.get_label(), self.plan_size)

        self._booster = self.xgb.train(
            self.params, train, num_boost_round=MAX_ROUNDS, evals=[(train, "tr")], custom_metric=recall,
            maximize=True, early_stopping_rounds=EARLY_STOP, verbose_eval=False,
        )

    def predict(self, x: np.ndarray) -> np.ndarray:
        assert self._booster is not None
        best = self._booster.best_iteration
        # One thread, for the matrices as for the booster: the tuner shares the cores with the
        # trials, and XGBoost's thread pool spinning on busy cores costs more than it saves.
        return self._booster.predict(self.xgb.DMatrix(x, nthread=1), iteration_range=(0, best + 1))
