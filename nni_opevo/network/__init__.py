"""A whole network's layers in one NNI experiment: the network tuner (``tuner``), which gives each
layer a tuner of its own, and the allocators that decide which layer the next trial goes to
(``allocation``)."""
