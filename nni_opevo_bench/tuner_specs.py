"""What a ``--tuners`` spec names, checked before anything runs or is written: a catalog tuner
with its classArg overrides, or one of the peers (``PEERS``: Kernel Tuner's strategies, Optuna's
samplers, TVM MetaSchedule), and whether it tunes the objective asked for. Each peer family is
declared once here, with the objectives it tunes: ``nni-opevo benchmark`` and ``nni-opevo hub``
refuse a spec through ``check`` and describe the specs they take through ``help_text``, so an
unknown name, a bad override, a peer on an objective it cannot tune and a peer whose optional
package is missing read the same in each: one line."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nni_opevo import catalog

from . import kernel_tuner_strategies, metaschedule, optuna_peers

OBJECTIVES = ("synthetic", "live", "recorded", "cache", "network")
"""What a benchmark can tune (``objectives``): ``nni-opevo benchmark --objective``."""


@dataclass(frozen=True)
class Peer:
    """A family of peer tuners: how a spec names one, the objectives it tunes (and why not the
    others), its own check of a spec, and the pip extra its package comes with."""

    family: str
    form: str
    objectives: tuple[str, ...]
    rule: str
    names: Callable[[str], bool]
    check: Callable[[str], Any]
    extra: str = ""

    def describe(self, objectives: bool = True) -> str:
        """The family as ``--tuners`` help lists it (with the objectives it tunes, where a
        command takes more than one)."""
        tunes = f", for --objective {_either(self.objectives)}" if objectives else ""
        install = f" (pip install '.[{self.extra}]')" if self.extra else ""
        return f"{self.family} as {self.form}{tunes}{install}"


PEERS = (
    Peer("Kernel Tuner's strategies", f"kt:NAME ({', '.join(kernel_tuner_strategies.STRATEGIES)})", ("cache",),
         "replay a brute-forced cache only", kernel_tuner_strategies.is_strategy, kernel_tuner_strategies.check,
         "kerneltuner"),
    Peer("Optuna's samplers", f"optuna:{{{','.join(optuna_peers.SAMPLERS)}}}[:key=value,...]", ("cache",),
         "take NNI's parameter types, not factor or perm, so the caches' spaces only", optuna_peers.is_peer,
         optuna_peers.check, "optuna"),
    Peer("TVM MetaSchedule", f"{metaschedule.NAME}[:num_trials_per_iter=N]", ("live", "network"),
         "tunes live kernels and networks only", metaschedule.is_peer, metaschedule.options),
)


def check(spec: str, objective: str) -> None:
    """ValueError, one line that starts with the spec and names the rule, where ``spec`` cannot
    tune ``objective`` (one of ``OBJECTIVES``); a missing optional package (Kernel Tuner,
    Optuna, PyTorch for Optuna's GP) is one of those lines, with its pip command."""
    try:
        _check(spec, objective)
    except (ValueError, ImportError) as e:
        raise ValueError(f"{spec}: {str(e).removeprefix(f'{spec}: ')}") from None


def help_text(objectives: tuple[str, ...] = OBJECTIVES) -> str:
    """What ``--tuners`` takes on these objectives: the catalog's names, and each peer family
    that tunes one of them."""
    peers = [peer.describe(len(objectives) > 1) for peer in PEERS if set(peer.objectives) & set(objectives)]
    return "; ".join([f"catalog names, optionally with overrides (name:key=value,...): {', '.join(catalog.CATALOG)}",
                      *peers])


def _check(spec: str, objective: str) -> None:
    peer = next((peer for peer in PEERS if peer.names(spec)), None)
    if peer is not None:
        if objective not in peer.objectives:
            raise ValueError(f"{peer.family} {peer.rule}: --objective {_either(peer.objectives)}")
        peer.check(spec)
    elif objective == "network":
        catalog.network_class_args(spec, {})
    else:
        catalog.class_args(spec)


def _either(words: tuple[str, ...]) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    return " or ".join(filter(None, [", ".join(words[:-1]), words[-1]]))
