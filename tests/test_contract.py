"""The shared contract (``nni_opevo.testing.contract``) over every registered tuner: a new tuner
is held to all of it by its one line in ``nni_opevo.registry``."""
from __future__ import annotations

import pytest

from nni_opevo import registry
from nni_opevo.testing import contract


@pytest.mark.parametrize("behaviour", contract.BEHAVIOURS, ids=lambda b: b.__name__)
@pytest.mark.parametrize("registered", registry.TUNERS, ids=lambda r: r.name)
def test_every_registered_tuner_keeps_the_contract(registered, behaviour):
    behaviour(contract.factory(registered), registered.contract)
