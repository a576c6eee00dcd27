"""A cheap NNI trial: the synthetic tiled-MatMul objective, reported like a kernel trial (through
the kernel trial's own channel to NNI, which spares each trial the 2.5 s of importing nni)."""
import functools
from collections.abc import Callable
from typing import Any

from nni_opevo.testing.landscapes import tiled_matmul
from trial_code import nni_channel

SHAPE = dict(n=256, m=256, k=256, seed=0)


def space() -> dict:
    s, _ = tiled_matmul(**SHAPE)
    return {**s, "unroll": {"_type": "choice", "_value": [0, 1]}}


@functools.cache
def _landscape() -> Callable[[dict[str, Any]], float]:
    """Built once per process: the tests score thousands of configurations with it."""
    return tiled_matmul(**SHAPE)[1]


def objective(params: dict) -> float:
    return _landscape()(params) * (1.0 if params["unroll"] else 0.8)


if __name__ == "__main__":
    params = nni_channel.next_parameters()
    nni_channel.report_final({"default": objective(params), "status": "ok"})
