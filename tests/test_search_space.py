"""Search-space parsing: every malformed-space rule raises a ValueError naming the parameter
and the rule; values handed to trials have the types and ranges NNI's own tuners give; and,
property-based, sampled values always lie in the space and nothing but ValueError escapes."""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nni.algorithms.hpo.random_tuner import RandomTuner

from nni_opevo import OpEvoTuner, SearchSpace, SpaceError
from nni_opevo.opevo.atoms import Atoms
from nni_opevo.opevo.operators import breed

MALFORMED = [
    ({"x": {"_type": "gaussian", "_value": [1]}}, "x", "unknown _type 'gaussian'"),
    ({"x": {"_value": [1]}}, "x", "missing _type"),
    ({"x": {"_type": "choice"}}, "x", "missing _value"),
    ({"x": 3}, "x", "must be an object"),
    ({"x": {"_type": "factor", "_value": [0, 2]}}, "x", "C must be >= 1"),
    ({"x": {"_type": "factor", "_value": [-8, 2]}}, "x", "C must be >= 1"),
    ({"x": {"_type": "factor", "_value": [8.5, 2]}}, "x", "C must be an integer"),
    ({"x": {"_type": "factor", "_value": [8, 2.0]}}, "x", "nu must be an integer"),
    ({"x": {"_type": "factor", "_value": [8, 0]}}, "x", "nu must be >= 1"),
    ({"x": {"_type": "factor", "_value": [8]}}, "x", "must be [C, nu]"),
    ({"x": {"_type": "factor", "_value": [2**41, 2]}}, "x", "C must be <= 2**40"),
    ({"x": {"_type": "factor", "_value": [True, 2]}}, "x", "C must be an integer"),
    ({"x": {"_type": "perm", "_value": [1, 2, 1]}}, "x", "items must be distinct"),
    ({"x": {"_type": "perm", "_value": 0}}, "x", "n must be >= 1"),
    ({"x": {"_type": "perm", "_value": []}}, "x", "empty"),
    ({"x": {"_type": "perm", "_value": "abc"}}, "x", "positive int n or a list"),
    ({"x": {"_type": "choice", "_value": []}}, "x", "must not be empty"),
    ({"x": {"_type": "choice", "_value": 3}}, "x", "must be a list"),
    ({"x": {"_type": "choice", "_value": [{"_name": "a"}, {"_name": "a"}]}}, "x", "names must be distinct"),
    ({"x": {"_type": "choice", "_value": [{"_name": 1}, {"_name": 2}]}}, "x", "_name must be a string"),
    ({"m": {"_type": "choice", "_value": [{"_name": "a", "y": {"_type": "randint", "_value": [3, 3]}}]}}, "m.y",
     "low must be < high"),
    ({"x": {"_type": "discrete", "_value": []}}, "x", "non-empty list"),
    ({"x": {"_type": "discrete", "_value": [1, "a"]}}, "x", "finite numbers"),
    ({"x": {"_type": "discrete", "_value": [1, 2, 1]}}, "x", "distinct"),
    ({"x": {"_type": "choice", "_value": [0, 0]}}, "x", "options must be distinct"),
    ({"x": {"_type": "choice", "_value": ["a", 2, 2.0]}}, "x", "options must be distinct"),
    ({"x": {"_type": "discrete", "_value": [1, float("nan")]}}, "x", "finite numbers"),
    ({"x": {"_type": "randint", "_value": [5, 5]}}, "x", "low must be < high"),
    ({"x": {"_type": "randint", "_value": [0.5, 5]}}, "x", "integers"),
    ({"x": {"_type": "uniform", "_value": [2, 1]}}, "x", "low must be < high"),
    ({"x": {"_type": "uniform", "_value": [0]}}, "x", "[low, high]"),
    ({"x": {"_type": "quniform", "_value": [0, 1, 0]}}, "x", "q must be > 0"),
    ({"x": {"_type": "quniform", "_value": [0, 1]}}, "x", "[low, high, q]"),
    ({"x": {"_type": "loguniform", "_value": [0, 1]}}, "x", "low must be > 0"),
    ({"x": {"_type": "qloguniform", "_value": [-1, 10, 1]}}, "x", "low must be > 0"),
    ({"x": {"_type": "normal", "_value": [0, 0]}}, "x", "sigma must be > 0"),
    ({"x": {"_type": "lognormal", "_value": [0, -1]}}, "x", "sigma must be > 0"),
    ({"x": {"_type": "qnormal", "_value": [0, 1, -1]}}, "x", "q must be > 0"),
    ({"x": {"_type": "qlognormal", "_value": [0, 1]}}, "x", "[mu, sigma, q]"),
    ({}, "<root>", "no parameters"),
    ([], "<root>", "JSON object"),
]


@pytest.mark.parametrize("space,path,rule", MALFORMED, ids=[f"{i}-{r}" for i, (_, _, r) in enumerate(MALFORMED)])
def test_malformed_space_names_parameter_and_rule(space, path, rule):
    tuner = OpEvoTuner(seed=0)
    with pytest.raises(ValueError) as info:
        tuner.update_search_space(space)
    assert isinstance(info.value, SpaceError)
    assert f"'{path}'" in str(info.value) and rule in str(info.value)


FULL_SPACE = {
    "f": {"_type": "factor", "_value": [1024, 4]},
    "p": {"_type": "perm", "_value": ["k", "rx", "ry"]},
    "d": {"_type": "discrete", "_value": [0, 125, 256]},
    "c": {"_type": "choice", "_value": [0, 1, "x", [1, 2], {"a": 1}]},
    "r": {"_type": "randint", "_value": [-3, 7]},
    "qu": {"_type": "quniform", "_value": [0.5, 9.5, 2]},
    "ql": {"_type": "qloguniform", "_value": [1, 1000, 5]},
    "qn": {"_type": "qnormal", "_value": [0, 10, 3]},
    "qln": {"_type": "qlognormal", "_value": [1, 1, 2]},
    "u": {"_type": "uniform", "_value": [-1, 1]},
    "lu": {"_type": "loguniform", "_value": [1e-4, 1e-1]},
    "n": {"_type": "normal", "_value": [5, 2]},
    "ln": {"_type": "lognormal", "_value": [0, 1]},
    "nest": {"_type": "choice", "_value": [
        {"_name": "conv", "k": {"_type": "choice", "_value": [3, 5]}, "f": {"_type": "factor", "_value": [64, 2]}},
        {"_name": "pool"},
    ]},
}


def nni_random_values(space, n=400):
    """What NNI's own Random tuner hands trials for this space."""
    tuner = RandomTuner(seed=3)
    tuner.update_search_space(space)
    return [tuner.generate_parameters(i) for i in range(n)]


def standard_only(space):
    """The parameters NNI's own tuners understand (no factor/perm/discrete, no nesting of them)."""
    return {k: v for k, v in space.items() if v["_type"] not in ("factor", "perm", "discrete") and k != "nest"}


def test_trial_values_have_nni_types_and_grids():
    space = SearchSpace(FULL_SPACE)
    rng = np.random.default_rng(0)
    ours = [space.to_trial(space.sample(rng)) for _ in range(400)]
    theirs = nni_random_values(standard_only(FULL_SPACE))
    for name in standard_only(FULL_SPACE):
        our_types = {type(p[name]) for p in ours}
        their_types = {type(p[name]) for p in theirs}
        assert our_types == their_types, name
    for name in ("r", "qu", "ql"):  # finite grids: NNI's values lie on ours and vice versa
        assert {p[name] for p in theirs} <= {p[name] for p in ours} | set(_grid(space, name)), name
        assert {p[name] for p in ours} <= set(_grid(space, name)), name
    assert set(_grid(space, "r")) == set(range(-3, 7))
    assert all(isinstance(p["f"], list) and math.prod(p["f"]) == 1024 for p in ours)
    assert all(sorted(p["p"]) == ["k", "rx", "ry"] for p in ours)
    assert all(p["qn"] % 3 == 0 and p["qln"] % 2 == 0 and p["qln"] >= 0 for p in ours)
    assert all(-1 <= p["u"] <= 1 and 1e-4 <= p["lu"] <= 1e-1 and p["ln"] > 0 for p in ours)
    nested = [p["nest"] for p in ours]
    assert {n["_name"] for n in nested} == {"conv", "pool"}
    assert all(set(n) == ({"_name", "k", "f"} if n["_name"] == "conv" else {"_name"}) for n in nested)
    shown = {p["c"] if not isinstance(p["c"], (list, dict)) else str(p["c"]) for p in ours}
    assert shown == {0, 1, "x", "[1, 2]", "{'a': 1}"}


def _grid(space, name):
    param = space.by_key[(name,)].param
    return [param.to_trial(k) for k in param.enumerate()]


def test_nested_choice_matches_nni_shape():
    space = {"m": {"_type": "choice", "_value": [
        {"_name": "conv", "k": {"_type": "choice", "_value": [3, 5]}, "w": {"_type": "quniform", "_value": [1, 9, 2]}},
        {"_name": "pool"},
    ]}, "top": {"_type": "randint", "_value": [0, 3]}}
    theirs = nni_random_values(space, 10)  # NNI's dedup stops a small space early
    ours = SearchSpace(space)
    for params in theirs:  # every NNI-shaped value parses into our space and back unchanged
        assert ours.to_trial(ours.from_trial(params)) == params


def test_trial_values_round_trip():
    space = SearchSpace(FULL_SPACE)
    rng = np.random.default_rng(1)
    for _ in range(300):
        config = space.sample(rng)
        assert space.from_trial(space.to_trial(config)) == config


def test_a_configuration_carries_over_to_another_extent_by_its_tiles_shares():
    """``Atoms.project``, how a network's layer tries its kin's kernels: a value this space has is
    kept, a factor's tiles become the same log2-shares of this extent (nearest), and a
    parameter with too many values to compare gives None."""
    def layer(rows, channels, big=2):
        return SearchSpace({"y": {"_type": "factor", "_value": [rows, 2]}, "f": {"_type": "factor", "_value": [channels, 3]},
                            "o": {"_type": "perm", "_value": 3}, "u": {"_type": "choice", "_value": [0, 256]},
                            "big": {"_type": "factor", "_value": [big, 4]}})
    wide, narrow = layer(27, 384), layer(13, 256)
    cases = [({"y": [27, 1], "f": [2, 3, 64]}, {"y": [13, 1], "f": [2, 2, 64]}),
             ({"y": [3, 9], "f": [384, 1, 1]}, {"y": [1, 13], "f": [256, 1, 1]})]
    for theirs, mine in cases:
        rest = {"o": [2, 0, 1], "u": 256, "big": [1, 2, 1, 1]}
        projected = Atoms(narrow).project(wide.from_trial({**theirs, **rest}), Atoms(wide))
        assert narrow.to_trial(projected) == {**mine, **rest}
    huge = layer(27, 384, 2**40)
    config = huge.from_trial({"y": [27, 1], "f": [2, 3, 64], "o": [0, 1, 2], "u": 0, "big": [2**40, 1, 1, 1]})
    assert Atoms(huge).project(config, Atoms(huge)) == config  # every value kept: nothing to compare
    assert Atoms(layer(13, 256, 2**39)).project(config, Atoms(huge)) is None  # 11,480 tilings of 2**39 to compare


def test_space_size_counts_nested_options():
    space = SearchSpace({
        "a": {"_type": "factor", "_value": [8, 3]},
        "m": {"_type": "choice", "_value": [
            {"_name": "x", "p": {"_type": "perm", "_value": 3}},
            {"_name": "y"},
        ]},
    })
    assert space.size == 10 * (6 + 1)
    configs = list(space.enumerate())
    assert len(configs) == len({space.identity(c) for c in configs}) == 70


# ------------------------------------------------------------------ property-based

leaf_specs = st.one_of(
    st.tuples(st.integers(-2, 5000), st.integers(-1, 6)).map(lambda t: {"_type": "factor", "_value": list(t)}),
    st.one_of(st.integers(-1, 6), st.lists(st.integers(0, 5), max_size=5)).map(lambda v: {"_type": "perm", "_value": v}),
    st.lists(st.one_of(st.integers(-5, 5), st.floats(allow_nan=True, allow_infinity=True)), max_size=5)
    .map(lambda v: {"_type": "discrete", "_value": v}),
    st.lists(st.one_of(st.integers(), st.text(max_size=3), st.none()), max_size=4)
    .map(lambda v: {"_type": "choice", "_value": v}),
    st.tuples(st.sampled_from(["randint", "uniform", "loguniform", "normal", "lognormal"]),
              st.lists(st.one_of(st.integers(-10, 10), st.floats(-10, 10)), min_size=1, max_size=3))
    .map(lambda t: {"_type": t[0], "_value": t[1]}),
    st.tuples(st.sampled_from(["quniform", "qloguniform", "qnormal", "qlognormal"]),
              st.lists(st.one_of(st.integers(-10, 100), st.floats(-10, 100)), min_size=2, max_size=3))
    .map(lambda t: {"_type": t[0], "_value": t[1]}),
    st.sampled_from([{"_type": "bogus", "_value": 1}, {"_value": [1]}, {"_type": "choice"}, 7, None]),
)

spaces = st.recursive(
    st.dictionaries(st.sampled_from(list("abcdef")), leaf_specs, max_size=4),
    lambda inner: st.dictionaries(
        st.sampled_from(list("ghij")),
        st.lists(inner.map(lambda d: {"_name": "opt", **d}), min_size=1, max_size=3).map(
            lambda opts: {"_type": "choice", "_value": [{**o, "_name": f"o{i}"} for i, o in enumerate(opts)]}
        ),
        min_size=1,
        max_size=2,
    ),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(space=spaces, seed=st.integers(0, 2**16))
def test_any_space_either_rejected_with_valueerror_or_sampled_inside(space, seed):
    tuner = OpEvoTuner(seed=seed, parents_size=2, offspring_size=2)
    try:
        tuner.update_search_space(space)
    except ValueError as e:
        assert str(e).startswith("search space parameter '")
        return
    parsed = tuner.space
    rng = np.random.default_rng(seed)
    configs = [parsed.sample(rng) for _ in range(4)]
    for config in configs:
        assert parsed.contains(config)
    child = breed(parsed, [(c, 1.0) for c in configs], 0.7, rng)
    assert parsed.contains(child)
    for i in range(6):  # the whole tuner, through its public calls
        try:
            params = tuner.generate_parameters(i)
        except Exception as e:  # only NNI's end-of-space signal may stop it
            assert type(e).__name__ == "NoMoreTrialError"
            assert len(tuner.population) >= parsed.size
            break
        assert parsed.contains(parsed.from_trial(params))
        tuner.receive_trial_result(i, params, float(i))
