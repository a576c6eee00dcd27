"""Every constant of OpEvo that was chosen by measuring it on benchmark spaces, in one place.

Each says what it sets, why this value, and where the evidence is (docs/tuners.md holds the
comparisons; docs/results/ the runs). The classArgs' defaults (``args``) and the surrogate
(``surrogate``) read them from here; a change to one is a change of algorithm, which the proposal
fingerprint (``python -m nni_opevo_bench.fingerprint check``) shows.
"""

# ------------------------------------------------------------------ classArg defaults

PARENTS_SIZE = 8
"""lambda, the top configurations recombined: the paper's 8; 4, 12 and 16 did no better on the five
caches (docs/tuners.md#opevo--opevotuner, "lambda")."""
OFFSPRING_SIZE = 8
"""rho, children bred from one selection (the paper variant): the paper's 8."""
MUTATE_RATE = 0.5
"""q of the q-random walk: the paper's 0.5 (the sweep of 0.1-0.9: docs/results/synthetic-sweep)."""
SCREEN = 32
"""Children bred and ranked per proposal: the best of the values tried on the brute-forced caches
(docs/tuners.md#opevo--opevotuner, "screen, explore, restart")."""
EXPLORE = 0.1
"""Share of the screened candidates drawn at random: the best tried; 0 traded the W6600 for the
MI250X, Titan and held-out caches (docs/decisions.md)."""
RESTART = 25
"""Measurements without progress before a restart: 12 and 50 did no better (docs/tuners.md)."""
LOCAL = 0.5
"""Share of proposals that are local steps: 0, 0.25, 0.5, 0.75 gave 0.929, 0.936, 0.942, 0.934 on the
15 cells of the caches (docs/decisions.md)."""
MIGRANTS = 2
"""Each kin layer's best kernels screened per proposal: 96 of 96 synthetic seeds find a kin's kernel
against 25 of 96 with 0 (docs/results/network-transfer-synthetic.md)."""

# ------------------------------------------------------------------ the screened variant's search

REMUTATIONS = 64
"""Re-mutations of a child that was already seen before the nearest unseen one is taken: a bound on
the work per proposal, not a value compared with others."""
SCREEN_ATTEMPTS = 4
"""Candidates bred per wanted unseen feasible one when screening, before settling for fewer: a bound
on the work per proposal where the constraint refuses most children, not a value compared."""
RING_FACTOR = 4
"""The best configuration's neighbours are all screened while there are at most this many times
``screen``; past that (a choice of many options) ``screen`` are drawn: a bound on the work."""
SURROGATE_CAPACITY = 128
"""Measurements the surrogate trains on at most (the best half and the most recent half), so a refit
costs the same whatever the history (per-trial time against history size:
docs/results/tuner-overhead.md)."""

# ------------------------------------------------------------------ the surrogate

LENGTHS = (0.05, 0.1, 0.2, 0.4, 0.8)
"""Candidate single lengths ``l`` (as a share of the atoms that differ): the marginal likelihood
picks one, and the relevances start from ``w_j = 1 / (l * atoms)`` (docs/tuners.md#opevo--opevotuner)."""
NOISE = 1e-2
"""Observation noise variance on the standardized targets (timing noise, and numerical slack)."""
RELEVANCE_PRIOR = 1.0
"""Standard deviation, in e-folds, of the log-normal prior on each relevance around the single
length's: keeps a few dozen points from fitting relevances wildly."""
RELEVANCE_STEPS = 30
"""L-BFGS iterations of the relevance fit: the fit's cost per proposal stays in milliseconds."""
RELEVANCE_LIMIT = 64
"""Atoms per row up to which relevances are fitted (the fit holds capacity^2 x atoms distances)."""
LIKELY_TO_RUN = 0.5
"""A local step goes only to a neighbour at least this likely to run (by the feasibility model), while
one is: weighing the steps by the chance instead, the held-out convolution without the constraint lost
0.035 (docs/decisions.md)."""
