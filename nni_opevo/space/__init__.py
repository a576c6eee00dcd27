"""The search space every tuner of the package works on: NNI's types plus ``factor`` and ``perm``.

``parameters``: one record per ``_type`` (validation, the random prior, the topology, and the
codec to and from what a trial receives); ``search_space``: a whole space as a flat list of keyed
parameters, with its named neighbourhoods; ``steps``: the moves tuners share (a random neighbour,
a prior redraw, the nearest usable configuration). Each model encodes configurations its own way
(OpEvo's surrogate: ``opevo.atoms``; the feature-vector peers: ``peers.features``).
"""
from .parameters import Parameter, SpaceError, parse_parameter
from .search_space import Config, ConfigKey, SearchSpace

__all__ = ["Config", "ConfigKey", "Parameter", "SearchSpace", "SpaceError", "parse_parameter"]
