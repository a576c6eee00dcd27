"""nni-opevo: OpEvo (Gao et al. 2021) and its peers as NNI 3.0 tuners.

Use from an NNI experiment config either as ``tuner: {className: nni_opevo.OpEvoTuner}``
or, after ``python -m nni_opevo.register`` (``nnictl algo register --meta`` on this
package's ``registration.yml``), as ``tuner: {name: OpEvo}``. The peers: ``GBFS``, ``NA2C``,
``AutoTVM`` (needs the ``xgboost`` extra), ``NoSE``, and ``ChoiceView`` (NNI's built-in tuners
on factor/perm spaces), and ``Network``: every layer of a network in one experiment, one inner
tuner per layer and an allocator sharing the trials out. This package depends on nni, numpy and scipy only, never on TVM.
"""
from .autotvm import AutoTVMClassArgsValidator, AutoTVMTuner
from .choice_view import ChoiceViewClassArgsValidator, ChoiceViewTuner
from .gbfs import GBFSClassArgsValidator, GBFSTuner
from .na2c import NA2CClassArgsValidator, NA2CTuner
from .network import NetworkClassArgsValidator, NetworkTuner
from .nose import NoSEClassArgsValidator, NoSETuner
from .opevo import OpEvoClassArgsValidator, OpEvoTuner
from .parameters import SpaceError
from .search_space import SearchSpace

__all__ = [
    "OpEvoTuner", "OpEvoClassArgsValidator",
    "GBFSTuner", "GBFSClassArgsValidator",
    "NA2CTuner", "NA2CClassArgsValidator",
    "AutoTVMTuner", "AutoTVMClassArgsValidator",
    "NoSETuner", "NoSEClassArgsValidator",
    "ChoiceViewTuner", "ChoiceViewClassArgsValidator",
    "NetworkTuner", "NetworkClassArgsValidator",
    "SearchSpace", "SpaceError",
]
