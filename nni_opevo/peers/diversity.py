"""AutoTVM's diversity-aware batch selection (Chen et al. 2018, sec. 3.3, eq. 3).

From a pool of candidates (the top lambda*b of the annealer) pick b maximizing

    L(S) = sum_{s in S} score(s) + alpha * sum_j |{s_j : s in S}|,

the predicted quality plus alpha per distinct value of each parameter j the batch covers (the
paper writes -f for a cost; we predict a score, higher is better). L is submodular, so the
greedy choice, one candidate at a time with the largest gain, is within 1 - 1/e of the best.
Scores are rescaled to [0, 1] over the pool, so ``alpha`` reads as "one newly covered value is
worth alpha times the whole spread of predicted quality".
"""
from __future__ import annotations

import numpy as np

from ..space.search_space import Config


def diverse_batch(pool: list[Config], scores: np.ndarray, n: int, alpha: float) -> list[int]:
    """Indices into ``pool`` of the greedy eq. 3 batch of ``n``, in the order picked."""
    if len(pool) <= n:
        return list(range(len(pool)))
    spread = float(scores.max() - scores.min())
    quality = (scores - scores.min()) / spread if spread > 0 else np.zeros(len(pool))
    covered: set[tuple] = set()
    remaining = list(range(len(pool)))
    picked: list[int] = []
    for _ in range(n):
        gains = [quality[i] + alpha * sum((k, v) not in covered for k, v in pool[i].items()) for i in remaining]
        best = remaining.pop(int(np.argmax(gains)))
        picked.append(best)
        covered.update(pool[best].items())
    return picked
