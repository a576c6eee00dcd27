"""The trial code's static feasibility check as a tuner constraint, without TVM.

Every generated experiment sets ``constraint: trial_code.constraint:feasible`` with
``constraint_args: {workload: MM1, target: cuda}`` (a custom shape passes ``family``, ``shape``
and ``name`` instead of ``workload``), so a configuration that breaks the launch limits
(threads per block, threadIdx.z, virtual threads, shared memory, grid) or the CPU vector width
is refused by the tuner in microseconds, before NNI spends a trial on it. The trial keeps the
same check, for configurations that reach it any other way.

The limits are those of the machine the tuner runs on: for a local experiment the GPU the
trials use; where none is visible, an H100's, as for build-only trials.
"""
from __future__ import annotations

import functools
import itertools
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

from . import networks, targets, workloads
from .targets import Target
from .templates import Infeasible, NotInSpace, Template, for_workload
from .workloads import Workload


@functools.cache
def _problem(workload: str | None, target: str, family: str | None, shape: tuple, name: str | None
             ) -> tuple[Workload, Template, Target]:
    chosen = workloads.lookup(workload) if workload else workloads.make(family or "", name=name, **dict(shape))
    return chosen, for_workload(chosen), targets.resolve(target)


@functools.cache
def _network_layer(network: str, layer: str, target: str) -> tuple[Workload, Template, Target]:
    chosen = networks.layer(network, layer).workload
    return chosen, for_workload(chosen), targets.resolve(target)


def feasible(params: dict[str, Any], workload: str | None = None, target: str = "auto", family: str | None = None,
             shape: dict[str, Any] | None = None, name: str | None = None, network: str | None = None,
             layer: str | None = None) -> bool:
    """Whether ``params`` pass the template's static checks for the workload on the target.

    For a network (the network tuner, ``nni_opevo.network.tuner``), ``network`` is set in ``constraint_args`` and
    the tuner adds each layer's ``layer``: the layer's workload is the one checked.

    Parameters that are not of the workload's space at all raise ValueError rather than return
    False: the experiment's search space and its ``constraint_args`` disagree, and refusing every
    candidate would end it with "no feasible configuration" instead of the cause."""
    if network is not None:
        if layer is None:
            raise ValueError("constraint_args name a network but no layer: give the constraint to the network tuner, "
                             "which adds each layer's name")
        chosen, template, resolved = _network_layer(network, layer, target)
    else:
        chosen, template, resolved = _problem(workload, target, family, tuple(sorted((shape or {}).items())), name)
    try:
        template.check(chosen, params, resolved)
    except NotInSpace as exc:
        raise ValueError(f"constraint_args name workload {chosen.name} on target {resolved.kind}, but the search "
                         f"space is not theirs: {exc}") from None
    except Infeasible:
        return False
    return True


def class_args(workload: Workload, target_kind: str) -> dict[str, Any]:
    """The classArgs that set this constraint for a workload and target kind."""
    if workloads.NAMED.get(workload.name) == workload:
        args: dict[str, Any] = {"workload": workload.name}
    else:
        args = {"family": workload.family, "shape": dict(workload.shape), "name": workload.name}
    return {"constraint": "trial_code.constraint:feasible", "constraint_args": {**args, "target": target_kind}}


def _checked_samples(workload: Workload, target: Target, seed: int) -> Iterator[tuple[dict[str, Any], str]]:
    """Uniform random configurations of the workload's space, each with the static check's
    refusal ("" when it admits it), from the seed's generator."""
    import numpy as np

    from nni_opevo import SearchSpace  # here: the tuners' package costs a second to import

    template = for_workload(workload)
    space = SearchSpace(template.space(workload, target.kind))
    rng = np.random.default_rng(seed)
    while True:
        params = space.to_trial(space.sample(rng))
        try:
            template.check(workload, params, target)
        except NotInSpace:
            raise
        except Infeasible as exc:
            yield params, str(exc) or type(exc).__name__
        else:
            yield params, ""


def draw(workload: Workload, target: Target, seed: int, refused_by: tuple[str, ...] = (), tries: int = 200_000
         ) -> tuple[dict[str, Any] | None, str]:
    """A random configuration of the workload's space that the static check admits; with
    ``refused_by``, instead one it refuses by one of those rules (words of the rule's message),
    with that message. (None, "") when ``tries`` draws find none. Tests draw real kernels this
    way, and the GPU campaign its probes of the limits."""
    for params, refusal in itertools.islice(_checked_samples(workload, target, seed), tries):
        if (any(rule in refusal for rule in refused_by) if refused_by else not refusal):
            return params, refusal
    return None, ""


def rule(refusal: str) -> str:
    """The rule a refusal's message states, without the values that broke it: the words before
    "exceeds the limit" (``limit``'s messages), else the message with its numbers as ``#``.
    Refusals of one rule by different values share it."""
    if " exceeds" in refusal:
        return refusal.split(" exceeds")[0].rstrip("0123456789 ")
    return re.sub(r"\d+(?:[.,]\d+)*", "#", refusal)


def commonest_refusal(workload: Workload, target: Target, seed: int, tries: int) -> tuple[str, int]:
    """Why a space admits little: the static check's rule that refuses most of ``tries`` random
    draws (``rule``), as one of its messages, and how many draws it refused (("", 0) when it
    refuses none)."""
    rules: Counter[str] = Counter()
    example: dict[str, str] = {}
    for _, refusal in itertools.islice(_checked_samples(workload, target, seed), tries):
        if refusal:
            rules[rule(refusal)] += 1
            example.setdefault(rule(refusal), refusal)
    if not rules:
        return "", 0
    commonest, count = rules.most_common(1)[0]
    return example[commonest], count


def admitted_share(workload: Workload, target: Target, samples: int, seed: int = 0) -> float:
    """The share of ``samples`` uniform random configurations of the workload's space that the
    static check admits: how much of the space a tuner may measure."""
    if samples < 1:
        raise ValueError(f"samples must be at least 1, not {samples}")
    checked = itertools.islice(_checked_samples(workload, target, seed), samples)
    return sum(not refusal for _, refusal in checked) / samples
