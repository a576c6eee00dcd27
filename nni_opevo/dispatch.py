"""Drive any NNI tuner in-process through the calls NNI 3.0's dispatcher makes.

``nni.runtime.msg_dispatcher.MsgDispatcher`` calls ``update_search_space`` once, then
``generate_multiple_parameters`` for ``trialConcurrency`` ids, and, each time a trial
finishes, ``receive_trial_result`` (when it reported), ``trial_end``, and
``generate_multiple_parameters`` for one new id. A shorter list than requested means "no
more trials": NNI stops asking, though a tuner may still send trials through the
``st_callback`` it was given (NNI's Evolution does). This module replays that protocol
with simulated trial durations, so tuners can be compared quickly and reproducibly on
objectives that need no GPU (tests, synthetic and recorded benchmarks).
"""
from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from nni.tuner import Tuner

Objective = Callable[[dict[str, Any]], Any]
"""Trial parameters -> what the trial reports (a number, a dict with 'default', or None for no result)."""


@dataclass
class Trial:
    index: int  # order of proposal
    parameter_id: int
    parameters: dict[str, Any]
    result: Any = None
    finish_order: int = -1
    tuner_seconds: float = 0.0  # time spent in the tuner to propose this trial


@dataclass
class Run:
    trials: list[Trial] = field(default_factory=list)
    exhausted: bool = False  # the tuner said there are no more trials


def drive(
    tuner: Tuner,
    search_space: dict[str, Any],
    objective: Objective,
    max_trials: int,
    concurrency: int = 1,
    seed: int = 0,
) -> Run:
    """Run ``max_trials`` trials, ``concurrency`` at a time, finishing in a random order."""
    rng = np.random.default_rng(seed)
    tuner.update_search_space(search_space)
    run = Run()
    running: list[tuple[float, int]] = []  # (finish time, trial index)
    clock = 0.0
    next_id = 0

    sent_later: list[tuple[int, dict[str, Any]]] = []

    def send(parameter_id: int, parameters: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        """NNI's ``st_callback``: a trial a tuner sends outside a request (NNI's Evolution does)."""
        sent_later.append((parameter_id, parameters))

    def start(parameter_id: int, parameters: dict[str, Any], spent: float) -> None:
        trial = Trial(len(run.trials), parameter_id, parameters, tuner_seconds=spent)
        run.trials.append(trial)
        heapq.heappush(running, (clock + float(rng.exponential(1.0)), trial.index))

    def request(n: int) -> None:
        nonlocal next_id
        n = min(n, max_trials - len(run.trials))
        if n <= 0 or run.exhausted:
            return
        ids = list(range(next_id, next_id + n))
        next_id += n
        begin = time.perf_counter()
        params_list = tuner.generate_multiple_parameters(ids, st_callback=send)
        spent = (time.perf_counter() - begin) / max(1, len(params_list))
        for pid, params in zip(ids, params_list):
            start(pid, params, spent)
        if len(params_list) < n:
            run.exhausted = True

    def start_sent() -> None:
        while sent_later and len(run.trials) < max_trials:
            start(*sent_later.pop(0), 0.0)

    request(concurrency)
    start_sent()
    finished = 0
    while running:
        clock, index = heapq.heappop(running)
        trial = run.trials[index]
        trial.result = objective(trial.parameters)
        trial.finish_order = finished
        finished += 1
        if trial.result is not None:
            tuner.receive_trial_result(trial.parameter_id, trial.parameters, trial.result)
        tuner.trial_end(trial.parameter_id, trial.result is not None)
        start_sent()
        request(1)
        start_sent()
    return run
