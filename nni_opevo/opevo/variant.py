"""What OpEvo's two variants share: the tuner they propose for, and how a child that was already
seen is varied (``variations``). A variant is the search itself; the tuner (``tuner``) is NNI's
interface around it, and the package's base (``base.PopulationTuner``) keeps the population,
the constraint and the no-repeat rule for both."""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterator, Sequence

from ..base import PopulationTuner
from ..space.search_space import Config, ConfigKey
from ..space.steps import Step
from . import settings
from .args import OpEvoArgs
from .operators import breed


class Variant(ABC):
    """One way of proposing (the paper's Algorithm 1, or the screened search)."""

    step: Step
    """The walk's step: along the topology, or scaled sizes too."""

    def __init__(self, host: PopulationTuner, args: OpEvoArgs) -> None:
        self.host, self.args = host, args

    @abstractmethod
    def propose(self) -> Config:
        """The next configuration; may be one already seen (the base varies it)."""

    @abstractmethod
    def observe(self, key: ConfigKey) -> None:
        """A configuration of the population was just evaluated (or refused)."""

    @abstractmethod
    def rebuild(self) -> None:
        """The population was replaced (a new search space): start over from it."""

    def kinship(self) -> Hashable | None:
        """See ``PopulationTuner.kinship``: None, unless the variant can learn from kin."""
        return None

    def learn_from(self, kin: Sequence[Variant]) -> None:
        """See ``PopulationTuner.learn_from``: by default the variant tunes alone."""
        return None

    def variations(self, config: Config) -> Iterator[Config]:
        """``config`` mutated again and again (every parameter walked with ``step``), up to
        ``settings.REMUTATIONS`` times."""
        space, _ = self.host.require_space()
        for _ in range(settings.REMUTATIONS):
            config = breed(space, [(config, 1.0)], self.args.mutate_rate, self.host.rng, self.step)
            yield config
