"""nni-opevo: OpEvo (Gao et al. 2021) and its peers as NNI 3.0 tuners.

Use from an NNI experiment config either as ``tuner: {className: nni_opevo.<Name>Tuner}`` or,
after ``python -m nni_opevo.register``, as ``tuner: {name: OpEvo}``. The tuners and their
validators are exported from the registry (``registry.TUNERS``), so the list lives in one place;
a tuner's module is imported when its class is first asked for. This package depends on nni,
numpy and scipy only, never on TVM.
"""
from __future__ import annotations

from typing import Any

from . import registry
from .space.parameters import SpaceError
from .space.search_space import SearchSpace

__version__ = "0.2.0"
"""The package's version, read by setup.py and printed by ``nni-opevo --version``."""
__all__ = [*registry.exports(), "SearchSpace", "SpaceError", "__version__"]


def __getattr__(name: str) -> Any:
    """A tuner class or its validator, by the name the registry exports it under."""
    return registry.export(name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
