"""The constraint hook's classArgs, and the trial code's static check as such a constraint. What
every tuner does with a constraint (refusals never proposed, learnt as failures, exhaustion, a
misbehaving constraint) is the shared contract's: tests/test_contract.py."""
from __future__ import annotations

import pytest

from nni_opevo import ChoiceViewTuner, OpEvoTuner, SearchSpace
from nni_opevo.constraint import ConstraintError
from trial_code import constraint as trial_constraint
from trial_code import targets, workloads
from trial_code.templates import for_workload


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


@pytest.mark.parametrize("workload,kind", [("MM1", "cuda"), ("BMM2", "cuda"), ("C2", "cuda"),
                                           ("MM_small", "cpu"), ("C_small", "cpu")])
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
    small = workloads.lookup("MM_small")
    space = SearchSpace(for_workload(small).space(small, "cpu"))
    params, _ = trial_constraint.draw(small, targets.cpu(), seed=0)
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
