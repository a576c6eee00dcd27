"""nni-opevo: OpEvo (Gao et al. 2021) and its peers as NNI 3.0 tuners.

Use from an NNI experiment config either as ``tuner: {className: nni_opevo.OpEvoTuner}``
or, after ``nnictl algo register --meta <this package>/registration.yml``, as
``tuner: {name: OpEvo}``. This package depends on nni, numpy and scipy only, never on TVM.
"""
from .opevo import OpEvoClassArgsValidator, OpEvoTuner
from .parameters import SpaceError
from .search_space import SearchSpace

__all__ = ["OpEvoTuner", "OpEvoClassArgsValidator", "SearchSpace", "SpaceError"]
