"""The constraint hook on every tuner: a configuration the constraint refuses never becomes a
trial, is learnt as a failure and never proposed again; a tuner still ends with
NoMoreTrialError once every feasible configuration is used; a constraint that misbehaves ends
the experiment with its error. And the trial code's static check as such a constraint."""
from __future__ import annotations

import functools
import json

import constraints
import pytest
from nni import NoMoreTrialError

from nni_opevo import AutoTVMTuner, ChoiceViewTuner, GBFSTuner, NA2CTuner, NoSETuner, OpEvoTuner, SearchSpace, testing
from nni_opevo.constraint import ConstraintError
from nni_opevo.testing.landscapes import tiled_matmul
from trial_code import constraint as trial_constraint
from trial_code import targets, workloads
from trial_code.templates import for_workload

# Deterministic runs: the simulated clock ignores the tuners' real time, which varies with
# the machine's load and would reorder which trial finishes first.
drive = functools.partial(testing.drive, charge_tuner_time=False)

LIMITS = {"constraint": "constraints:tiled_limits"}
TUNERS = {
    "OpEvo": lambda **kw: OpEvoTuner(parents_size=4, offspring_size=4, **kw),
    "OpEvo-paper": lambda **kw: OpEvoTuner(parents_size=4, offspring_size=4, variant="paper", **kw),
    "GBFS": lambda **kw: GBFSTuner(**kw),
    "NA2C": lambda **kw: NA2CTuner(**kw),
    "AutoTVM": lambda **kw: AutoTVMTuner(plan_size=16, sa_chains=32, sa_steps=60, **kw),
    "NoSE": lambda **kw: NoSETuner(population_size=16, **kw),
    "TPE": lambda seed=0, **kw: ChoiceViewTuner(tuner="TPE", tuner_args={"optimize_mode": "maximize", "seed": seed},
                                                **kw),
    "Random": lambda seed=0, **kw: ChoiceViewTuner(tuner="Random", tuner_args={"seed": seed}, **kw),
}


def key_of(params):
    return json.dumps(params, sort_keys=True)


@pytest.mark.parametrize("name", TUNERS)
def test_an_infeasible_configuration_never_becomes_a_trial(name):
    """About 92 % of this space breaks the launch limits; none of them may be proposed, and the
    tuner's measurements are all of valid kernels."""
    space, f = tiled_matmul(256, 256, 256, seed=1)
    tuner = TUNERS[name](seed=0, **LIMITS)
    run = drive(tuner, space, f, 80, concurrency=4, seed=0)
    assert len(run.trials) == 80 and len({key_of(t.parameters) for t in run.trials}) == 80
    assert all(constraints.tiled_limits(t.parameters) for t in run.trials)
    assert all(t.result > 0 for t in run.trials), "every measured kernel is valid"
    assert tuner.constraint.rejected > 0


@pytest.mark.parametrize("name", [n for n in TUNERS if n not in ("TPE", "Random")])
def test_refused_configurations_are_learnt_as_failures_and_never_proposed_again(name):
    space, f = tiled_matmul(256, 256, 256, seed=2)
    tuner = TUNERS[name](seed=1, **LIMITS)
    run = drive(tuner, space, f, 60, concurrency=2, seed=1)
    population = tuner.population
    refused = [k for k, r in population.records.items() if r.rejected]
    assert len(refused) == population.n_rejected > 0
    # AutoTVM's annealer also asks about candidates it screens out of a plan, without recording them.
    assert tuner.constraint.rejected >= population.n_rejected
    assert all(population.records[k].evaluated and population.records[k].objective is None for k in refused)
    proposed = {key_of(t.parameters) for t in run.trials}
    parsed = SearchSpace(space)
    assert not proposed & {key_of(parsed.to_trial(population.records[k].config)) for k in refused}
    assert population.n_measured == 60


@pytest.mark.parametrize("name", TUNERS)
def test_exhaustion_with_a_constraint_ends_cleanly(name):
    """Factor (64, 3) has 28 factorizations, 18 of them with a first entry of at most 4: exactly
    those are proposed, then the tuner has no more trials."""
    space = {"f": {"_type": "factor", "_value": [64, 3]}}
    feasible = [c for c in SearchSpace(space).enumerate() if c[("f",)][0] <= 4]
    assert len(feasible) == 18
    tuner = TUNERS[name](seed=0, constraint="constraints:first_factor_at_most",
                         constraint_args={"most": 4})
    run = drive(tuner, space, lambda p: float(sum(p["f"][1:])), 40, concurrency=2, seed=0)
    if name in ("TPE", "Random"):  # NNI's built-ins may repeat themselves; the view only filters what they pick
        assert all(t.parameters["f"][0] <= 4 for t in run.trials)
        return
    assert run.exhausted and len(run.trials) == 18 == len({key_of(t.parameters) for t in run.trials})
    assert all(t.parameters["f"][0] <= 4 for t in run.trials)
    with pytest.raises(NoMoreTrialError):
        tuner.generate_parameters(999)


@pytest.mark.parametrize("name", TUNERS)
@pytest.mark.parametrize("function,message", [
    ("raises", "the constraint constraints:raises raised KeyError: 'no such knob'"),
    ("not_a_bool", "the constraint constraints:not_a_bool must return True or False, returned 'yes'"),
])
def test_a_misbehaving_constraint_stops_the_tuner_with_its_error(name, function, message):
    tuner = TUNERS[name](seed=0, constraint=f"constraints:{function}")
    tuner.update_search_space({"f": {"_type": "factor", "_value": [64, 3]}})
    with pytest.raises(ConstraintError, match=message):
        tuner.generate_parameters(0)


@pytest.mark.parametrize("class_args,message", [
    ({"constraint": "no colon"}, "classArg 'constraint' must be \"package.module:function\""),
    ({"constraint": "no_such_module_x:f"}, "classArg 'constraint': cannot import 'no_such_module_x'"),
    ({"constraint": "constraints:no_such_function"}, "classArg 'constraint': 'constraints' has no function"),
    ({"constraint_args": {"most": 3}}, "classArg 'constraint_args' is given but no 'constraint'"),
    ({"constraint": "constraints:raises", "constraint_args": [1]}, "classArg 'constraint_args' must be a mapping"),
])
def test_bad_constraint_class_args_are_named(class_args, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        OpEvoTuner(**class_args)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ChoiceViewTuner(tuner="Random", **class_args)


# ------------------------------------------------------------------ the trial code's static check


@pytest.mark.parametrize("workload,kind", [("MM1", "cuda"), ("BMM2", "cuda"), ("C2", "cuda"), ("MM_small", "cpu"),
                                           ("C_small", "cpu")])
def test_what_the_constraint_accepts_builds_and_what_it_refuses_no_trial_builds(workload, kind):
    """Drawn at random from the workload's space: a configuration the constraint accepts is
    scheduled and compiled by TVM (CUDA C, or LLVM for the CPU) without an error, and one it
    refuses is stopped by the trial before any build (INSTANTIATION_ERROR, no build time). On the
    GPU spaces the launch limits refuse some and admit others. Whether the GPU itself accepts the
    admitted ones is the GPU campaign's correctness stage."""
    import numpy as np

    from trial_code import kernel
    from trial_code.evaluate import Limits, evaluate
    from trial_code.status import Status

    chosen = workloads.lookup(workload)
    space = SearchSpace(for_workload(chosen).space(chosen, kind))
    target = targets.resolve(kind)
    args = trial_constraint.class_args(chosen, kind)
    assert args["constraint"] == "trial_code.constraint:feasible"
    rng = np.random.default_rng(0)
    accepted, refused = [], []
    while len(accepted) < 4 or (kind == "cuda" and len(refused) < 2):
        params = space.to_trial(space.sample(rng))
        (accepted if trial_constraint.feasible(params, **args["constraint_args"]) else refused).append(params)
        assert len(accepted) + len(refused) < 2000, "the draws found too few of one kind"
    for params in accepted[:4]:
        kernel.build(kernel.scheduled(chosen, params, target), target)
    for params in refused[:2]:
        result = evaluate(chosen, params, target, Limits())
        assert result.status is Status.INSTANTIATION_ERROR and result.build_s is None, result


def test_trial_code_constraint_takes_custom_shapes():
    custom = workloads.make("matmul", name="FFN", n=256, m=768, k=3072)
    args = trial_constraint.class_args(custom, "cuda")["constraint_args"]
    assert args == {"family": "matmul", "shape": {"n": 256, "m": 768, "k": 3072, "batch": 1, "layout": "NN"},
                    "name": "FFN", "target": "cuda"}
    too_many_threads = {"tile_n": [1, 1, 64, 4], "tile_m": [1, 1, 32, 24], "tile_k": [1, 3072, 1, 1],
                        "inner_order": ["k", "n", "m"], "unroll": 0, "vector": 1, "stages": 1, "pad": 0,
                        "raster": 0}
    assert trial_constraint.feasible(too_many_threads, **args) is False


def test_trial_code_constraint_refuses_a_search_space_of_another_workload():
    """An experiment whose constraint_args name another workload or target than its search space
    gets the cause as an error, not "no feasible configuration is left"."""
    import numpy as np

    small = workloads.lookup("MM_small")
    space = SearchSpace(for_workload(small).space(small, "cpu"))
    params = space.to_trial(space.sample(np.random.default_rng(0)))
    assert trial_constraint.feasible(params, **trial_constraint.class_args(small, "cpu")["constraint_args"])
    with pytest.raises(ValueError, match="constraint_args name workload MM1 on target cuda, but the search space is "
                                         "not theirs: parameter 'tile_n'"):
        trial_constraint.feasible(params, workload="MM1", target="cuda")
    tuner = OpEvoTuner(constraint="trial_code.constraint:feasible", constraint_args={"workload": "MM1", "target": "cuda"})
    tuner.update_search_space(space.raw)
    with pytest.raises(ConstraintError, match="but the search space is not theirs"):
        tuner.generate_parameters(0)


def test_trial_code_constraint_never_imports_tvm():
    import subprocess
    import sys

    code = ("import sys; from trial_code import constraint; "
            "constraint.feasible({'tile_n': [512, 1, 1, 1]}, workload='MM1', target='cuda') if False else None; "
            "assert 'tvm' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
