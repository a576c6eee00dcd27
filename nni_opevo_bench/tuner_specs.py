"""What a ``--tuners`` spec names, checked before anything runs or is written: a catalog tuner
with its classArg overrides, ``kt:STRATEGY``, ``optuna:SAMPLER`` or ``metaschedule[:options]``,
and whether it tunes the objective asked for. ``nni-opevo benchmark`` and ``nni-opevo hub`` both
refuse a spec through it, so an unknown name, a bad override, a peer on an objective it cannot
tune and a peer whose optional package is missing read the same in each: one line."""
from __future__ import annotations

from nni_opevo import catalog

from . import kernel_tuner_strategies, metaschedule, optuna_peers


def check(spec: str, objective: str) -> None:
    """ValueError, one line that starts with the spec and names the rule, where ``spec`` cannot
    tune ``objective`` (``live``, ``synthetic``, ``recorded``, ``cache`` or ``network``); a
    missing optional package (Kernel Tuner, Optuna, PyTorch for Optuna's GP) is one of those
    lines, with its pip command."""
    try:
        _check(spec, objective)
    except (ValueError, ImportError) as e:
        raise ValueError(f"{spec}: {str(e).removeprefix(f'{spec}: ')}") from None


def _check(spec: str, objective: str) -> None:
    if kernel_tuner_strategies.is_strategy(spec):
        if objective != "cache":
            raise ValueError("Kernel Tuner's strategies run on --objective cache only")
        kernel_tuner_strategies.check(spec)
    elif optuna_peers.is_peer(spec):
        if objective == "network":
            raise ValueError("Optuna's samplers tune one space, not a network's layers")
        optuna_peers.check(spec)
    elif metaschedule.is_peer(spec):
        if objective not in ("live", "network"):
            raise ValueError("MetaSchedule tunes live kernels and networks only (--objective live or network)")
        metaschedule.options(spec)
    elif objective == "network":
        catalog.network_class_args(spec, {})
    else:
        catalog.class_args(spec)
