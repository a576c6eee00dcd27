"""OpEvo (Gao et al., AAAI 2021) as an NNI tuner: the tuner (``tuner``), its variation operators
(``operators``) and, for the screened variant, the surrogate that ranks candidates
(``surrogate``)."""
