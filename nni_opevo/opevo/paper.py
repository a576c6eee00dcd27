"""OpEvo as published: Algorithm 1 of Gao et al. (AAAI 2021), mapped to NNI's calls.

* Lines 1-2: the first lambda proposals are uniform random configurations.
* Lines 4-5: afterwards every proposal is a child of the current top-lambda evaluated
  configurations: per parameter, a parent drawn with probability proportional to fitness
  (eq. 2), then the q-random walk (eq. 3) over the parameter's topology. ``offspring_size``
  (rho) children are bred from one selection of parents, a ``Generation``; the next selection
  is made after rho children, and sooner while the selection is incomplete (see
  ``Generation.due``). With trialConcurrency = rho this is the paper's generation, minus its
  barrier: NNI asks for a configuration whenever a worker frees up, and always gets one at
  once, so no worker idles waiting for a generation.
* Until some evaluated configuration has positive fitness there is nothing to inherit (sec.
  4.2: zero-fitness traits are never inherited), so proposals stay uniform random.
* Line 6 / fitness: see ``fitness`` for how reported values, failures and minimize mode map
  to weights.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..population import Population
from ..space.search_space import Config, ConfigKey
from ..space.steps import topology_step
from .operators import breed
from .variant import Variant


@dataclass
class Generation:
    """One selection of parents (Algorithm 1, line 4) and the children still to breed from it
    (line 5): the paper variant's steady state."""

    parents: list[tuple[Config, float]]
    """The top-lambda evaluated configurations with their eq. 2 weights."""
    version: int
    """``Population.version`` when they were selected."""
    children_left: int
    """Children still to breed from these parents: rho at selection."""

    @property
    def fertile(self) -> bool:
        """Some parent has traits to inherit (sec. 4.2: zero-fitness traits never are)."""
        return any(w > 0 for _, w in self.parents)

    def due(self, population: Population, parents_size: int) -> bool:
        """Whether to select again: after rho children; and, while the selection is incomplete
        (fewer than lambda parents, or none fertile), at every new result, so that a first
        success is bred from at once."""
        complete = len(self.parents) >= parents_size and self.fertile
        return self.children_left <= 0 or (not complete and population.version != self.version)


class Paper(Variant):
    """Algorithm 1 as published (see the module docstring)."""

    step = staticmethod(topology_step)

    generation: Generation | None = None

    def rebuild(self) -> None:
        self.generation = None

    def observe(self, key: ConfigKey) -> None:
        """Nothing to keep: each selection reads the population itself (``Population.parents``)."""

    def propose(self) -> Config:
        space, population = self.host.require_space()
        rng, args = self.host.rng, self.args
        if self.host.n_proposed < args.parents_size:  # line 2: the random initial population
            return space.sample(rng)
        if self.generation is None or self.generation.due(population, args.parents_size):
            self.generation = Generation(population.parents(args.parents_size), population.version, args.offspring_size)
        if not self.generation.fertile:
            return space.sample(rng)
        self.generation.children_left -= 1
        return breed(space, self.generation.parents, args.mutate_rate, rng)
