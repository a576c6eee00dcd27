"""One record per search-space ``_type``: its validation, its random prior, its topology and its codec.

The OpEvo paper (sec. 3) gives every parameter a graph over its feasible set; evolution
then moves along that graph (the q-random walk, eq. 3). Each class here therefore knows
four things about its type and nothing about any tuner: which ``_value`` is valid (the
constructor raises ``SpaceError`` naming the rule), how to draw a value at random (the prior
used for initial populations, matching what NNI's own tuners draw), which values are adjacent to
a value (``neighbours`` lists them, ``random_neighbour`` draws one uniformly without listing, so
huge sets such as the factorizations of 2^30 never need enumerating; ``moves`` names each step),
and how to convert between the internal hashable value and what the trial receives. How a model
encodes a value is the model's own business (``opevo.atoms``, ``peers.features``).

Internal values are hashable (ints, floats, tuples) so configurations can be deduplicated.
"""
from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterator, Sequence
from itertools import product
from typing import Any

import numpy as np

Value = Hashable

MAX_FACTOR_PRODUCT = 2**40
"""Largest ``C`` of a factor parameter: factoring it by trial division stays well under a second."""
MAX_FACTOR_PARTS = 64
"""Largest ``nu`` of a factor parameter (tiling levels)."""
MAX_PERM_ITEMS = 256
"""Longest perm (loops to order)."""
MAX_OPTIONS = 100_000
"""Most options of a choice, values of a discrete."""
MAX_GRID_POINTS = 2**53
"""Most points of a randint or q-type grid: grid indices stay exact in a float."""
LOG_REACH = 700
"""Largest |mu| + 10 sigma of a log-normal type: exp() of it stays finite."""


class SpaceError(ValueError):
    """A malformed search space; the message names the parameter and the broken rule."""

    def __init__(self, path: str, rule: str) -> None:
        super().__init__(f"search space parameter '{path}': {rule}")
        self.path = path
        self.rule = rule


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _is_real(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool) and math.isfinite(x)


def _option_key(x: Any) -> Hashable:
    """Equality of options as JSON round trips them: numbers compare across int and float, never
    with bools or strings; containers compare by their JSON text."""
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return (type(x).__name__, x)
    if _is_real(x):
        return ("number", float(x))
    try:
        return ("json", json.dumps(x, sort_keys=True))
    except (TypeError, ValueError):
        return ("repr", repr(x))


def _index_of_options(param: Parameter, options: list[Any], what: str) -> dict[Hashable, int]:
    """Option key -> index, refusing repeats (in linear time, for large option lists)."""
    index: dict[Hashable, int] = {}
    for i, option in enumerate(options):
        key = _option_key(option)
        if key in index:
            raise param.error(f"{what} must be distinct, {option!r} is repeated")
        index[key] = i
    return index


class Parameter(ABC):
    """A single search-space parameter with a topology over its feasible set."""

    type_name: str = ""

    def __init__(self, path: str, spec_value: Any) -> None:
        self.path = path
        self.spec_value = spec_value

    def error(self, rule: str) -> SpaceError:
        return SpaceError(self.path, f"{self.type_name}: {rule}")

    @property
    @abstractmethod
    def size(self) -> float:
        """Number of values; ``math.inf`` for unbounded or continuous sets."""

    @abstractmethod
    def sample(self, rng: np.random.Generator) -> Value:
        """A value drawn from this type's prior (uniform where the set is finite and NNI draws uniformly)."""

    @abstractmethod
    def neighbours(self, value: Value) -> list[Value]:
        """All values adjacent to ``value`` in the paper's topology, in a fixed order."""

    @abstractmethod
    def random_neighbour(self, value: Value, rng: np.random.Generator) -> Value | None:
        """A neighbour drawn uniformly from ``neighbours(value)``; None for an isolated value."""

    def enumerate(self) -> Iterator[Value]:
        """Every value, for finite sets small enough to list."""
        raise TypeError(f"{self.type_name} parameter '{self.path}' cannot be enumerated")

    def origin(self) -> Value:
        """The search's natural starting value (G-BFS and N-A2C start there): the first value
        listed, which for a factor is (C, 1, ..., 1), the loop left untiled, and for a perm
        the identity order."""
        return next(iter(self.enumerate()))

    @property
    @abstractmethod
    def moves(self) -> list[Hashable]:
        """A fixed list of moves along the topology: N-A2C's actions. Applying every move to a
        value gives exactly its neighbours (for continuous types: a step either way)."""

    @abstractmethod
    def apply_move(self, value: Value, move: Hashable) -> Value | None:
        """The value one ``move`` away, or None where the move does not apply."""

    @abstractmethod
    def to_trial(self, value: Value) -> Any:
        """The value as the trial receives it (JSON-serializable)."""

    @abstractmethod
    def from_trial(self, raw: Any) -> Value:
        """Inverse of ``to_trial``; raises ValueError when ``raw`` is not in the set."""


# --------------------------------------------------------------------------- factor


def prime_factorization(n: int) -> list[tuple[int, int]]:
    """(prime, exponent) pairs of ``n`` in increasing prime order, by trial division."""
    out: list[tuple[int, int]] = []
    p = 2
    while p * p <= n:
        if n % p == 0:
            e = 0
            while n % p == 0:
                n //= p
                e += 1
            out.append((p, e))
        p += 1 if p == 2 else 2
    if n > 1:
        out.append((n, 1))
    return out


def _compositions(total: int, parts: int) -> Iterator[tuple[int, ...]]:
    """All ordered ways to write ``total`` as ``parts`` non-negative integers."""
    if parts == 1:
        yield (total,)
        return
    for first in range(total, -1, -1):
        for rest in _compositions(total - first, parts - 1):
            yield (first, *rest)


class FactorParameter(Parameter):
    """``factor [C, nu]``: ordered nu-tuples of positive ints whose product is C (loop tiling).

    Two factorizations are adjacent when one becomes the other by moving one prime factor
    z of C from position n to position m (paper sec. 3, Figure 1a). The set is the product,
    over the primes p^e of C, of the compositions of e into nu parts, so a uniform draw is
    an independent uniform composition per prime and is exact without enumerating anything.
    """

    type_name = "factor"

    def __init__(self, path: str, spec_value: Any) -> None:
        super().__init__(path, spec_value)
        if not isinstance(spec_value, (list, tuple)) or len(spec_value) != 2:
            raise self.error(f"_value must be [C, nu], got {spec_value!r}")
        c, nu = spec_value
        if not _is_int(c):
            raise self.error(f"C must be an integer, got {c!r}")
        if not _is_int(nu):
            raise self.error(f"nu must be an integer, got {nu!r}")
        if c < 1:
            raise self.error(f"C must be >= 1, got {c}")
        if nu < 1:
            raise self.error(f"nu must be >= 1, got {nu}")
        if c > MAX_FACTOR_PRODUCT:
            raise self.error(f"C must be <= 2**40, got {c}")
        if nu > MAX_FACTOR_PARTS:
            raise self.error(f"nu must be <= {MAX_FACTOR_PARTS}, got {nu}")
        self.product, self.nu = int(c), int(nu)
        self.factorization = prime_factorization(self.product)
        self.primes = [p for p, _ in self.factorization]
        self._size = math.prod(math.comb(e + self.nu - 1, self.nu - 1) for _, e in self.factorization)

    @property
    def size(self) -> float:
        return self._size

    def origin(self) -> tuple[int, ...]:
        """(C, 1, ..., 1): the loop left untiled (without listing the factorizations)."""
        return (self.product,) + (1,) * (self.nu - 1)

    def sample(self, rng: np.random.Generator) -> tuple[int, ...]:
        out = [1] * self.nu
        for p, e in self.factorization:
            # Stars and bars: nu-1 bars among e+nu-1 slots give a uniform composition of e.
            bars = np.sort(rng.choice(e + self.nu - 1, self.nu - 1, replace=False)) if self.nu > 1 else []
            edges = [-1, *(int(b) for b in bars), e + self.nu - 1]
            for j in range(self.nu):
                out[j] *= p ** (edges[j + 1] - edges[j] - 1)
        return tuple(out)

    def _moves(self, value: tuple[int, ...]) -> list[tuple[int, int]]:
        """(position, prime) pairs whose prime can leave that position."""
        return [(n, z) for n, a in enumerate(value) for z in self.primes if a % z == 0]

    def neighbours(self, value: tuple[int, ...]) -> list[tuple[int, ...]]:
        out = []
        for n, z in self._moves(value):
            for m in range(self.nu):
                if m != n:
                    out.append(self._move(value, n, m, z))
        return out

    def random_neighbour(self, value: tuple[int, ...], rng: np.random.Generator) -> tuple[int, ...] | None:
        moves = self._moves(value)
        if not moves or self.nu == 1:
            return None
        # Every (n, z, m) gives a distinct neighbour, so uniform over triples is uniform over neighbours.
        n, z = moves[int(rng.integers(len(moves)))]
        m = int(rng.integers(self.nu - 1))
        return self._move(value, n, m + (m >= n), z)

    @staticmethod
    def _move(value: tuple[int, ...], n: int, m: int, z: int) -> tuple[int, ...]:
        out = list(value)
        out[n] //= z
        out[m] *= z
        return tuple(out)

    @property
    def moves(self) -> list[tuple[int, int, int]]:
        """(from n, to m, prime z): move z from position n to position m."""
        return [(n, m, z) for z in self.primes for n in range(self.nu) for m in range(self.nu) if m != n]

    def apply_move(self, value: tuple[int, ...], move: Hashable) -> tuple[int, ...] | None:
        n, m, z = move  # type: ignore[misc]
        return self._move(value, n, m, z) if value[n] % z == 0 else None

    def enumerate(self) -> Iterator[tuple[int, ...]]:
        per_prime = [[tuple(p**k for k in comp) for comp in _compositions(e, self.nu)] for p, e in self.factorization]
        for combo in product(*per_prime):
            yield tuple(math.prod(col) for col in zip(*combo)) if combo else (1,) * self.nu

    def to_trial(self, value: tuple[int, ...]) -> list[int]:
        return list(value)

    def from_trial(self, raw: Any) -> tuple[int, ...]:
        if not isinstance(raw, (list, tuple)) or len(raw) != self.nu or not all(_is_int(a) and a >= 1 for a in raw):
            raise ValueError(f"'{self.path}': {raw!r} is not a list of {self.nu} positive ints")
        if math.prod(raw) != self.product:
            raise ValueError(f"'{self.path}': product of {raw!r} is not {self.product}")
        return tuple(int(a) for a in raw)


# --------------------------------------------------------------------------- perm


class PermParameter(Parameter):
    """``perm n`` or ``perm [items]``: orderings (e.g. of nested loops); adjacent when one
    transposition turns one into the other (paper sec. 3, Figure 1b). The trial receives a
    list: a permutation of ``range(n)``, or of the given items."""

    type_name = "perm"

    def __init__(self, path: str, spec_value: Any) -> None:
        super().__init__(path, spec_value)
        if _is_int(spec_value):
            if spec_value < 1:
                raise self.error(f"n must be >= 1, got {spec_value}")
            if spec_value > MAX_PERM_ITEMS:
                raise self.error(f"n must be <= {MAX_PERM_ITEMS}, got {spec_value}")
            self.items: list[Any] = list(range(int(spec_value)))
        elif isinstance(spec_value, list):
            if not spec_value:
                raise self.error("the list of items is empty")
            if len(spec_value) > MAX_PERM_ITEMS:
                raise self.error(f"at most {MAX_PERM_ITEMS} items, got {len(spec_value)}")
            self._index = _index_of_options(self, spec_value, "items")
            self.items = list(spec_value)
        else:
            raise self.error(f"_value must be a positive int n or a list of distinct items, got {spec_value!r}")
        self.n = len(self.items)
        self._index = {_option_key(item): i for i, item in enumerate(self.items)}
        self._size = float(math.factorial(self.n)) if self.n <= 170 else math.inf

    @property
    def size(self) -> float:
        return self._size

    def origin(self) -> tuple[int, ...]:
        return tuple(range(self.n))

    def sample(self, rng: np.random.Generator) -> tuple[int, ...]:
        return tuple(int(i) for i in rng.permutation(self.n))

    def neighbours(self, value: tuple[int, ...]) -> list[tuple[int, ...]]:
        return [self._swap(value, i, j) for i in range(self.n) for j in range(i + 1, self.n)]

    def random_neighbour(self, value: tuple[int, ...], rng: np.random.Generator) -> tuple[int, ...] | None:
        if self.n < 2:
            return None
        i = int(rng.integers(self.n))
        j = int(rng.integers(self.n - 1))
        return self._swap(value, i, j + (j >= i))

    @staticmethod
    def _swap(value: tuple[int, ...], i: int, j: int) -> tuple[int, ...]:
        out = list(value)
        out[i], out[j] = out[j], out[i]
        return tuple(out)

    @property
    def moves(self) -> list[tuple[int, int]]:
        """(i, j): swap the items at positions i < j."""
        return [(i, j) for i in range(self.n) for j in range(i + 1, self.n)]

    def apply_move(self, value: tuple[int, ...], move: Hashable) -> tuple[int, ...]:
        i, j = move  # type: ignore[misc]
        return self._swap(value, i, j)

    def enumerate(self) -> Iterator[tuple[int, ...]]:
        from itertools import permutations

        return permutations(range(self.n))

    def to_trial(self, value: tuple[int, ...]) -> list[Any]:
        return [self.items[i] for i in value]

    def from_trial(self, raw: Any) -> tuple[int, ...]:
        if not isinstance(raw, (list, tuple)) or len(raw) != self.n:
            raise ValueError(f"'{self.path}': {raw!r} is not a list of {self.n} items")
        try:
            out = tuple(self._index[_option_key(item)] for item in raw)
        except KeyError:
            raise ValueError(f"'{self.path}': {raw!r} holds an item outside {self.items!r}") from None
        if len(set(out)) != self.n:
            raise ValueError(f"'{self.path}': {raw!r} repeats an item")
        return out


# --------------------------------------------------------------------------- choice


class ChoiceParameter(Parameter):
    """``choice [options]``: categorical, every option adjacent to every other (Figure 1d).

    Options that are all dicts with a ``_name`` form NNI's nested choice: each option then
    carries a sub-space (``subspaces[i]``, parsed by ``search_space``) that is active only while
    that option is chosen, and the trial receives ``{"_name": ..., <sub-parameters>}``.
    """

    type_name = "choice"

    def __init__(self, path: str, spec_value: Any) -> None:
        super().__init__(path, spec_value)
        if not isinstance(spec_value, list):
            raise self.error(f"_value must be a list of options, got {spec_value!r}")
        if not spec_value:
            raise self.error("_value must not be empty")
        if len(spec_value) > MAX_OPTIONS:
            raise self.error(f"at most {MAX_OPTIONS:,} options, got {len(spec_value):,}")
        self.options = spec_value
        self.nested = all(isinstance(o, dict) and "_name" in o for o in spec_value)
        if self.nested:
            self._index = _index_of_options(self, [o["_name"] for o in spec_value], "nested option names")
        else:
            # Two equal options would be two configurations the trial cannot tell apart, so
            # the tuner could propose what was already evaluated.
            self._index = _index_of_options(self, spec_value, "options")
        self.subspaces: list[Any] = []  # filled by search_space for nested choices

    @property
    def size(self) -> float:
        return len(self.options)

    def sample(self, rng: np.random.Generator) -> int:
        return int(rng.integers(len(self.options)))

    def neighbours(self, value: int) -> list[int]:
        return [i for i in range(len(self.options)) if i != value]

    def random_neighbour(self, value: int, rng: np.random.Generator) -> int | None:
        if len(self.options) < 2:
            return None
        i = int(rng.integers(len(self.options) - 1))
        return i + (i >= value)

    def enumerate(self) -> Iterator[int]:
        return iter(range(len(self.options)))

    @property
    def moves(self) -> list[int]:
        """o: switch to option o."""
        return list(range(len(self.options)))

    def apply_move(self, value: int, move: Hashable) -> int | None:
        return None if move == value else int(move)  # type: ignore[arg-type]

    def to_trial(self, value: int) -> Any:
        return {"_name": self.options[value]["_name"]} if self.nested else self.options[value]

    def from_trial(self, raw: Any) -> int:
        if self.nested:
            name = raw.get("_name") if isinstance(raw, dict) else None
            index = self._index.get(_option_key(name))
            if index is None:
                raise ValueError(f"'{self.path}': {raw!r} names none of the options "
                                 f"{[o['_name'] for o in self.options]!r}")
            return index
        index = self._plain_index(raw)
        if index is None:
            raise ValueError(f"'{self.path}': {raw!r} is not one of {self.options!r}")
        return index

    def _plain_index(self, raw: Any) -> int | None:
        """The option equal to ``raw`` (numbers compare across int/float, not with bools or
        strings, as JSON round trips them), or None."""
        return self._index.get(_option_key(raw))

    def origin(self) -> int:
        return 0


# --------------------------------------------------------------------------- ordered grids


class GridParameter(Parameter):
    """A chain over an ordered grid of numbers, indexed by consecutive integers k in
    [k_low, k_high] (possibly unbounded): neighbours are the values just below and just
    above (paper sec. 3, Figure 1c). Subclasses give the grid and NNI's prior over it."""

    k_low: float
    k_high: float

    @abstractmethod
    def value_at(self, k: int) -> float | int:
        """The grid value at index ``k``."""

    @abstractmethod
    def index_of(self, raw: Any) -> int:
        """The grid index of a trial value; ValueError when it is off the grid."""

    @property
    def size(self) -> float:
        return self.k_high - self.k_low + 1

    def neighbours(self, value: int) -> list[int]:
        return [k for k in (value - 1, value + 1) if self.k_low <= k <= self.k_high]

    def random_neighbour(self, value: int, rng: np.random.Generator) -> int | None:
        options = self.neighbours(value)
        if not options:
            return None
        return options[int(rng.integers(len(options)))]

    def enumerate(self) -> Iterator[int]:
        return iter(range(int(self.k_low), int(self.k_high) + 1))

    @property
    def moves(self) -> list[int]:
        """-1 / +1: the grid value just below / above."""
        return [-1, 1]

    def apply_move(self, value: int, move: Hashable) -> int | None:
        k = value + int(move)  # type: ignore[call-overload]
        return k if self.k_low <= k <= self.k_high else None

    def to_trial(self, value: int) -> float | int:
        return self.value_at(value)

    def from_trial(self, raw: Any) -> int:
        if not _is_real(raw):
            raise ValueError(f"'{self.path}': {raw!r} is not a finite number")
        k = self.index_of(raw)
        if not self.k_low <= k <= self.k_high:
            raise ValueError(f"'{self.path}': {raw!r} is outside the range")
        return k


class DiscreteParameter(GridParameter):
    """``discrete [numbers]``: an ordered set of numbers (e.g. unroll steps, tile or block sizes),
    sorted internally; neighbours are the values just below and just above (paper, Figure 1c).
    The search space's ``scaled`` and ``diagonal`` neighbourhoods also double and halve sizes
    (``space.neighbourhoods``)."""

    type_name = "discrete"

    def __init__(self, path: str, spec_value: Any) -> None:
        super().__init__(path, spec_value)
        if not isinstance(spec_value, list) or not spec_value:
            raise self.error(f"_value must be a non-empty list of numbers, got {spec_value!r}")
        if len(spec_value) > MAX_OPTIONS:
            raise self.error(f"at most {MAX_OPTIONS:,} values, got {len(spec_value):,}")
        bad = [v for v in spec_value if not _is_real(v)]
        if bad:
            raise self.error(f"values must be finite numbers, got {bad[0]!r}")
        self.values = sorted(spec_value)
        for a, b in zip(self.values, self.values[1:]):
            if a == b:
                raise self.error(f"values must be distinct, {a!r} is repeated")
        self.k_low, self.k_high = 0, len(self.values) - 1
        self._index = {float(v): k for k, v in enumerate(self.values)}

    def sample(self, rng: np.random.Generator) -> int:
        return int(rng.integers(len(self.values)))

    def value_at(self, k: int) -> float | int:
        return self.values[k]

    def find(self, number: float) -> int | None:
        """The index of ``number`` in the set, or None."""
        return self._index.get(number)

    def index_of(self, raw: Any) -> int:
        k = self._index.get(float(raw)) if _is_real(raw) else None
        if k is None:
            raise ValueError(f"'{self.path}': {raw!r} is not one of {self.values!r}")
        return k


class RandintParameter(GridParameter):
    """``randint [low, high)``: the integers low..high-1 as a chain; drawn uniformly like NNI."""

    type_name = "randint"

    def __init__(self, path: str, spec_value: Any) -> None:
        super().__init__(path, spec_value)
        if not isinstance(spec_value, list) or len(spec_value) != 2 or not all(_is_int(v) for v in spec_value):
            raise self.error(f"_value must be [low, high] with integers, got {spec_value!r}")
        self.low, self.high = int(spec_value[0]), int(spec_value[1])
        if self.low >= self.high:
            raise self.error(f"low must be < high, got {spec_value!r}")
        if self.high - self.low > MAX_GRID_POINTS or max(abs(self.low), abs(self.high)) > MAX_GRID_POINTS:
            raise self.error(f"low and high must lie within +-2**53, got {spec_value!r}")
        self.k_low, self.k_high = self.low, self.high - 1

    def sample(self, rng: np.random.Generator) -> int:
        return int(rng.integers(self.low, self.high))

    def value_at(self, k: int) -> int:
        return int(k)

    def index_of(self, raw: Any) -> int:
        if raw != int(raw):
            raise ValueError(f"'{self.path}': {raw!r} is not an integer")
        return int(raw)


def _check_bounds(param: Parameter, spec_value: Any, n: int, positive_low: bool) -> list[float]:
    names = "[low, high, q]" if n == 3 else "[low, high]"
    if not isinstance(spec_value, list) or len(spec_value) != n or not all(_is_real(v) for v in spec_value):
        raise param.error(f"_value must be {names} with finite numbers, got {spec_value!r}")
    low, high = float(spec_value[0]), float(spec_value[1])
    if low >= high:
        raise param.error(f"low must be < high, got {spec_value!r}")
    if not math.isfinite(high - low):
        raise param.error(f"high - low must be a finite number, got {spec_value!r}")
    if positive_low and low <= 0:
        raise param.error(f"low must be > 0 for a log scale, got {low!r}")
    if n == 3 and spec_value[2] <= 0:
        raise param.error(f"q must be > 0, got {spec_value[2]!r}")
    return [float(v) for v in spec_value]


def _check_normal(param: Parameter, spec_value: Any, n: int, log: bool = False) -> list[float]:
    names = "[mu, sigma, q]" if n == 3 else "[mu, sigma]"
    if not isinstance(spec_value, list) or len(spec_value) != n or not all(_is_real(v) for v in spec_value):
        raise param.error(f"_value must be {names} with finite numbers, got {spec_value!r}")
    if spec_value[1] <= 0:
        raise param.error(f"sigma must be > 0, got {spec_value[1]!r}")
    if log and not abs(spec_value[0]) + 10 * spec_value[1] <= LOG_REACH:
        raise param.error(f"|mu| + 10 sigma must be <= {LOG_REACH} for a log scale (exp overflows), got {spec_value!r}")
    if n == 3 and spec_value[2] <= 0:
        raise param.error(f"q must be > 0, got {spec_value[2]!r}")
    return [float(v) for v in spec_value]


class QuantizedParameter(GridParameter):
    """Base of the q-types: NNI gives ``clip(round(x / q) * q, low, high)`` for a draw x of the
    underlying distribution, so the grid is k*q for integer k, clipped at the bounds, and the
    value the trial receives is a float exactly as NNI computes it."""

    q: float
    clip: tuple[float, float] = (-math.inf, math.inf)

    def value_at(self, k: int) -> float:
        return float(min(max(k * self.q, self.clip[0]), self.clip[1]))

    def index_of(self, raw: Any) -> int:
        k = round(raw / self.q)
        if self.value_at(k) != raw and not math.isclose(self.value_at(k), raw, rel_tol=1e-9, abs_tol=1e-12):
            raise ValueError(f"'{self.path}': {raw!r} is not on the grid of step {self.q!r}")
        return k

    @abstractmethod
    def draw(self, rng: np.random.Generator) -> float:
        """A draw x of the underlying continuous distribution."""

    def sample(self, rng: np.random.Generator) -> int:
        return int(min(max(round(self.draw(rng) / self.q), self.k_low), self.k_high))


class QUniformParameter(QuantizedParameter):
    """``quniform [low, high, q]``."""

    type_name = "quniform"
    log = False

    def __init__(self, path: str, spec_value: Any) -> None:
        super().__init__(path, spec_value)
        self.low, self.high, self.q = _check_bounds(self, spec_value, 3, positive_low=self.log)
        if not max(abs(self.low), abs(self.high)) / self.q <= MAX_GRID_POINTS:
            raise self.error(f"the grid of step q over [low, high] must have at most 2**53 points, got {spec_value!r}")
        self.clip = (self.low, self.high)
        self.k_low, self.k_high = round(self.low / self.q), round(self.high / self.q)

    def draw(self, rng: np.random.Generator) -> float:
        if self.log:
            return math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        return float(rng.uniform(self.low, self.high))


class QLogUniformParameter(QUniformParameter):
    """``qloguniform [low, high, q]``: the grid of quniform, drawn log-uniformly."""

    type_name = "qloguniform"
    log = True


class QNormalParameter(QuantizedParameter):
    """``qnormal [mu, sigma, q]``: the unbounded grid of multiples of q, drawn from the normal."""

    type_name = "qnormal"
    log = False

    def __init__(self, path: str, spec_value: Any) -> None:
        super().__init__(path, spec_value)
        self.mu, self.sigma, self.q = _check_normal(self, spec_value, 3, log=self.log)
        reach = math.exp(self.mu + 10 * self.sigma) if self.log else abs(self.mu) + 10 * self.sigma
        if not reach / self.q <= MAX_GRID_POINTS:
            raise self.error(f"the grid of step q must cover mu +- 10 sigma in at most 2**53 points, got {spec_value!r}")
        self.k_low, self.k_high = (0 if self.log else -math.inf), math.inf

    def draw(self, rng: np.random.Generator) -> float:
        x = rng.normal(self.mu, self.sigma)
        return float(math.exp(x) if self.log else x)

    def enumerate(self) -> Iterator[int]:
        raise TypeError(f"{self.type_name} parameter '{self.path}' is unbounded and cannot be enumerated")

    def origin(self) -> int:
        """The grid point at the prior's centre."""
        centre = math.exp(self.mu) if self.log else self.mu
        return int(max(round(centre / self.q), self.k_low))


class QLogNormalParameter(QNormalParameter):
    """``qlognormal [mu, sigma, q]``: multiples of q from 0 up, drawn as round(exp(normal)/q)*q."""

    type_name = "qlognormal"
    log = True


# --------------------------------------------------------------------------- continuous


CONTINUOUS_STEP = 0.1
"""A continuous random-walk step is Gaussian with this fraction of the parameter's width as std."""


class ContinuousParameter(Parameter):
    """Continuous types. Topology (ours; the paper has only discrete sets): every value is
    'adjacent' to a Gaussian step away, with std ``CONTINUOUS_STEP`` times the width of the
    set, in log space for the log types. The width is high-low for bounded types and 4*sigma
    (the +-2 sigma band) for normal types. A step that leaves [low, high] is reflected back."""

    log = False

    def __init__(self, path: str, spec_value: Any) -> None:
        super().__init__(path, spec_value)
        self.lo_in, self.hi_in = -math.inf, math.inf  # bounds in the working (log for log types) domain
        self.width = 1.0

    @property
    def size(self) -> float:
        return math.inf

    @abstractmethod
    def draw(self, rng: np.random.Generator) -> float:
        """A draw in the working domain."""

    def _out(self, x: float) -> float:
        return float(math.exp(x) if self.log else x)

    def sample(self, rng: np.random.Generator) -> float:
        return self._out(self.draw(rng))

    def neighbours(self, value: float) -> list[float]:
        raise TypeError(f"{self.type_name} parameter '{self.path}' is continuous: its neighbours cannot be listed")

    def random_neighbour(self, value: float, rng: np.random.Generator) -> float:
        x = (math.log(value) if self.log else value) + rng.normal(0.0, CONTINUOUS_STEP * self.width)
        while not self.lo_in <= x <= self.hi_in:  # reflect; the step std is a tenth of the width, so this ends at once
            x = 2 * self.lo_in - x if x < self.lo_in else 2 * self.hi_in - x
        return min(max(self._out(x), self._out(self.lo_in)), self._out(self.hi_in))

    def origin(self) -> float:
        """The lower bound of a bounded type; the prior's centre of a normal type."""
        return self._out(self.lo_in if math.isfinite(self.lo_in) else self.mu)  # type: ignore[attr-defined]

    @property
    def moves(self) -> list[int]:
        """-1 / +1: a step of ``CONTINUOUS_STEP`` times the width down / up."""
        return [-1, 1]

    def apply_move(self, value: float, move: Hashable) -> float | None:
        x = (math.log(value) if self.log else value) + int(move) * CONTINUOUS_STEP * self.width  # type: ignore[call-overload]
        return self._out(x) if self.lo_in <= x <= self.hi_in else None

    def to_trial(self, value: float) -> float:
        return float(value)

    def from_trial(self, raw: Any) -> float:
        lo, hi = self._out(self.lo_in), self._out(self.hi_in)
        if not _is_real(raw) or not lo <= raw <= hi or (self.log and raw <= 0):
            raise ValueError(f"'{self.path}': {raw!r} is not a number in the {self.type_name} range [{lo}, {hi}]")
        return float(raw)


class UniformParameter(ContinuousParameter):
    """``uniform [low, high]``."""

    type_name = "uniform"

    def __init__(self, path: str, spec_value: Any) -> None:
        super().__init__(path, spec_value)
        low, high = _check_bounds(self, spec_value, 2, positive_low=self.log)
        self.lo_in, self.hi_in = (math.log(low), math.log(high)) if self.log else (low, high)
        self.width = self.hi_in - self.lo_in

    def draw(self, rng: np.random.Generator) -> float:
        return float(rng.uniform(self.lo_in, self.hi_in))


class LogUniformParameter(UniformParameter):
    """``loguniform [low, high]``."""

    type_name = "loguniform"
    log = True


class NormalParameter(ContinuousParameter):
    """``normal [mu, sigma]``."""

    type_name = "normal"

    def __init__(self, path: str, spec_value: Any) -> None:
        super().__init__(path, spec_value)
        self.mu, self.sigma = _check_normal(self, spec_value, 2, log=self.log)
        self.width = 4 * self.sigma

    def draw(self, rng: np.random.Generator) -> float:
        return float(rng.normal(self.mu, self.sigma))


class LogNormalParameter(NormalParameter):
    """``lognormal [mu, sigma]``."""

    type_name = "lognormal"
    log = True


PARAMETER_TYPES: dict[str, type[Parameter]] = {
    cls.type_name: cls
    for cls in (
        FactorParameter,
        PermParameter,
        ChoiceParameter,
        DiscreteParameter,
        RandintParameter,
        QUniformParameter,
        QLogUniformParameter,
        QNormalParameter,
        QLogNormalParameter,
        UniformParameter,
        LogUniformParameter,
        NormalParameter,
        LogNormalParameter,
    )
}
"""``_type`` name -> parameter class."""


def parse_parameter(path: str, spec: Any) -> Parameter:
    """Build the parameter for one search-space entry ``{"_type": ..., "_value": ...}``."""
    if not isinstance(spec, dict):
        raise SpaceError(path, f"must be an object with _type and _value, got {spec!r}")
    missing = [k for k in ("_type", "_value") if k not in spec]
    if missing:
        raise SpaceError(path, f"missing {missing[0]}")
    type_name = spec["_type"]
    if type_name not in PARAMETER_TYPES:
        raise SpaceError(path, f"unknown _type {type_name!r}; known types: {', '.join(PARAMETER_TYPES)}")
    return PARAMETER_TYPES[type_name](path, spec["_value"])


__all__: Sequence[str] = [
    "Parameter",
    "SpaceError",
    "PARAMETER_TYPES",
    "parse_parameter",
    "prime_factorization",
]
