"""Each tuner's classArgs are declared once (``nni_opevo.class_args``): the constructor, NNI's
validator, the registration, the benchmark catalog and the docs table all follow that one
declaration, so none of them can drift."""
import dataclasses
import inspect
from pathlib import Path

import pytest
import yaml

import nni_opevo
from nni_opevo import catalog, class_args, registry, tables

ROOT = Path(__file__).resolve().parent.parent
REGISTRATION = yaml.safe_load((ROOT / "nni_opevo" / "registration.yml").read_text())["algorithms"]
TUNERS = [getattr(nni_opevo, entry["className"].rsplit(".", 1)[1]) for entry in REGISTRATION]


def test_registration_names_each_tuner_with_the_validator_of_its_declaration():
    for entry in REGISTRATION:
        tuner = getattr(nni_opevo, entry["className"].rsplit(".", 1)[1])
        validator = getattr(nni_opevo, entry["classArgsValidator"].rsplit(".", 1)[1])
        assert validator.args is tuner.Args, entry
        assert entry["builtinName"] + "Tuner" == tuner.__name__


def test_registration_yml_is_generated_from_the_registry():
    assert (ROOT / "nni_opevo" / "registration.yml").read_text() == registry.registration_yaml(), \
        "stale: regenerate with registry.registration_yaml()"
    assert [entry["builtinName"] for entry in REGISTRATION] == [t.name for t in registry.TUNERS]


def test_each_tuner_class_is_named_in_its_module_and_the_registry_only():
    """The list of tuners lives in the registry: no other product module names a tuner class."""
    folders = ("nni_opevo", "trial_code", "nni_opevo_tools", "nni_opevo_bench")
    product = [p for folder in folders for p in (ROOT / folder).rglob("*.py")]
    for tuner in registry.TUNERS:
        module = ROOT / (tuner.target.partition(":")[0].replace(".", "/") + ".py")
        if not module.exists():
            module = module.with_suffix("") / "__init__.py"
        naming = {p for p in product if tuner.class_name in p.read_text()}
        assert naming <= {module, ROOT / "nni_opevo" / "registry.py"}, (tuner.class_name, sorted(map(str, naming)))


@pytest.mark.parametrize("tuner", TUNERS, ids=lambda t: t.__name__)
def test_constructor_signature_and_docstring_come_from_the_declaration(tuner):
    fields = {f.name: f for f in dataclasses.fields(tuner.Args)}
    parameters = inspect.signature(tuner).parameters
    assert set(parameters) == set(fields)
    for name, parameter in parameters.items():
        assert parameter.default == class_args._default(fields[name])
        assert f"{name}: default" in tuner.__doc__ and fields[name].metadata["doc"] in tuner.__doc__


@pytest.mark.parametrize("tuner", TUNERS, ids=lambda t: t.__name__)
def test_constructor_takes_exactly_the_declared_defaults(tuner):
    built = tuner(**({} if tuner is not nni_opevo.ChoiceViewTuner else {"tuner": "Random"}))
    expected = tuner.Args.parse({} if tuner is not nni_opevo.ChoiceViewTuner else {"tuner": "Random"})
    assert built.args == expected


def test_a_rule_is_the_same_for_the_validator_and_the_constructor():
    bad = {"parents_size": 0}
    with pytest.raises(ValueError) as by_validator:
        nni_opevo.OpEvoClassArgsValidator().validate_class_args(**bad)
    with pytest.raises(ValueError) as by_constructor:
        nni_opevo.OpEvoTuner(**bad)
    assert str(by_validator.value) == str(by_constructor.value) == \
        "classArg 'parents_size' must be an integer from 1 to 256, got 0"


def test_docs_tables_are_generated_from_the_declarations():
    doc = (ROOT / "docs" / "tuners.md").read_text()
    assert tables.rewrite_tables(doc) == doc, "stale: run nni-opevo docs"
    for tuner in TUNERS:
        assert f"<!-- classArgs of {tuner.__name__} -->" in doc


@pytest.mark.parametrize("spec", list(catalog.CATALOG))
def test_catalog_entries_get_every_declared_class_arg(spec):
    """An experiment written from the catalog lists every classArg with the value it runs with:
    the declaration's default unless the entry sets it."""
    entry = catalog.CATALOG[spec]
    class_name, args = catalog.class_args(spec, seed=3)
    assert class_name == entry.class_name
    declared = entry.tuner_class.Args.defaults()
    assert set(args) == set(declared)
    for name, value in args.items():
        if name in entry.class_args:
            assert value == entry.class_args[name]
        elif name == "seed":
            assert value == 3
        elif name != "tuner_args":
            assert value == declared[name]


def test_catalog_overrides_are_checked_by_the_declaration():
    assert catalog.class_args("opevo:mutate_rate=0.3")[1]["mutate_rate"] == 0.3
    with pytest.raises(ValueError, match="classArg 'mutate_rate' must be a number strictly between 0 and 1"):
        catalog.class_args("opevo:mutate_rate=3")
    with pytest.raises(ValueError, match="classArg 'mutat_rate' is not known"):
        catalog.build("opevo:mutat_rate=0.3")


def test_a_network_spec_sets_the_network_tuners_own_class_args():
    weights = {"a": 1.0}
    assert catalog.network_class_args("opevo", weights)["allocator"] == "gradient"
    args = catalog.network_class_args("opevo:mutate_rate=0.3@round-robin,transfer=false", weights)
    assert (args["allocator"], args["transfer"], args["tuner_args"]["mutate_rate"]) == ("round-robin", False, 0.3)
    with pytest.raises(ValueError, match="classArg 'transfer' must be true or false"):
        catalog.network_class_args("opevo@transfer=maybe", weights)


@pytest.mark.parametrize("tuner", TUNERS, ids=lambda t: t.__name__)
def test_every_numeric_class_arg_has_an_upper_bound(tuner):
    """A huge but otherwise valid count (``screen: 1e9``, ``sa_chains: 1e9``, ``hidden_size: 1e7``)
    is refused when the tuner is built, with the classArg and its range named: no classArg can
    make a proposal take unbounded time or memory."""
    base = {"tuner": "Random"} if tuner is nni_opevo.ChoiceViewTuner else {}
    numeric = [f for f in dataclasses.fields(tuner.Args)
               if isinstance(class_args._default(f), (int, float)) and not isinstance(class_args._default(f), bool)
               and f.name != "seed"]
    for field in numeric:
        huge = 10**9 if isinstance(class_args._default(field), int) else 1e9
        with pytest.raises(ValueError, match=rf"classArg '{field.name}' must be .* (to|at most|and) [\d.e+]+"):
            tuner(**base, **{field.name: huge})
