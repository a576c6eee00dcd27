"""Drive any NNI tuner in-process through the calls NNI 3.0's dispatcher makes.

``nni.runtime.msg_dispatcher.MsgDispatcher`` calls ``update_search_space`` once, then
``generate_multiple_parameters`` for ``trialConcurrency`` ids, and, each time a trial
finishes, ``receive_trial_result`` (when it reported), ``trial_end``, and
``generate_multiple_parameters`` for one new id. A shorter list than requested means "no
more trials": NNI stops asking, though a tuner may still send trials through the
``st_callback`` it was given (NNI's Evolution does). This module replays that protocol so
tuners can be compared reproducibly without NNI's processes:

* on a simulated clock (default): each trial lasts ``duration(parameters, result)`` seconds
  (by default a random exponential one), trials finish in the order of their simulated end,
  and the clock also advances by the real time the tuner spends in its calls, so tuner
  overhead shows in wall-clock comparisons (synthetic and recorded benchmarks). That real time
  varies with the machine's load and can change which trial finishes first, so a run is
  exactly repeatable only with ``charge_tuner_time=False`` (the clock then ignores it);
* in real time (``pool``: an executor): up to ``concurrency`` objectives run at once and
  results come back in the order they really finish (live kernels).
"""
from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from nni.tuner import Tuner

Objective = Callable[[dict[str, Any]], Any]
"""Trial parameters -> what the trial reports (a number, a dict with 'default', or None for no result)."""
Duration = Callable[[dict[str, Any], Any], float]
"""(parameters, result) -> simulated seconds the trial takes."""


@dataclass
class Trial:
    index: int  # order of proposal
    parameter_id: int
    parameters: dict[str, Any]
    result: Any = None
    finish_order: int = -1
    tuner_seconds: float = 0.0  # time spent in the tuner to propose this trial
    started: float = 0.0  # seconds since the run began (simulated or real)
    finished: float = 0.0


@dataclass
class Run:
    trials: list[Trial] = field(default_factory=list)
    exhausted: bool = False  # the tuner said there are no more trials


class _SimulatedClock:
    def __init__(self, objective: Objective, duration: Duration | None, rng: np.random.Generator,
                 charge_tuner_time: bool) -> None:
        self.objective, self.duration, self.rng = objective, duration, rng
        self.charge_tuner_time = charge_tuner_time
        self.now = 0.0
        self._heap: list[tuple[float, int, Trial]] = []

    def start(self, trial: Trial) -> None:
        trial.started = self.now
        trial.result = self.objective(trial.parameters)
        seconds = self.duration(trial.parameters, trial.result) if self.duration else float(self.rng.exponential(1.0))
        heapq.heappush(self._heap, (self.now + seconds, trial.index, trial))

    def spent(self, seconds: float) -> None:
        if self.charge_tuner_time:
            self.now += seconds

    def running(self) -> bool:
        return bool(self._heap)

    def next_finished(self) -> Trial:
        self.now, _, trial = heapq.heappop(self._heap)
        trial.finished = self.now
        return trial


class _RealClock:
    def __init__(self, objective: Objective, pool: Executor) -> None:
        self.objective, self.pool = objective, pool
        self.t0 = time.perf_counter()
        self._futures: dict[Future, Trial] = {}

    def start(self, trial: Trial) -> None:
        trial.started = time.perf_counter() - self.t0
        self._futures[self.pool.submit(self.objective, trial.parameters)] = trial

    def spent(self, seconds: float) -> None:
        pass  # real time has passed already

    def running(self) -> bool:
        return bool(self._futures)

    def next_finished(self) -> Trial:
        done, _ = wait(self._futures, return_when=FIRST_COMPLETED)
        future = min(done, key=lambda f: self._futures[f].index)
        trial = self._futures.pop(future)
        trial.result = future.result()
        trial.finished = time.perf_counter() - self.t0
        return trial


def drive(
    tuner: Tuner,
    search_space: dict[str, Any],
    objective: Objective,
    max_trials: int,
    concurrency: int = 1,
    seed: int = 0,
    duration: Duration | None = None,
    pool: Executor | None = None,
    on_finish: Callable[[Trial], None] | None = None,
    first_id: int = 0,
    history: list[dict[str, Any]] | None = None,
    charge_tuner_time: bool = True,
    stop: Callable[[], bool] | None = None,
) -> Run:
    """Run ``max_trials`` trials, ``concurrency`` at a time (see the module docstring).
    ``on_finish`` sees each trial as the tuner receives it. To resume an earlier run, pass its
    trials as ``history`` (``import_data``'s ``{"parameter", "value"}`` entries, as NNI's resume
    does) and ``first_id`` past its parameter ids. ``charge_tuner_time``: see the module docstring.
    ``stop``: once it returns True no trial is started; those running finish and are received
    (a run cut at a deadline ends with nothing measured in vain, and resumes from its history)."""
    clock: _SimulatedClock | _RealClock = (
        _RealClock(objective, pool) if pool is not None
        else _SimulatedClock(objective, duration, np.random.default_rng(seed), charge_tuner_time)
    )
    tuner.update_search_space(search_space)
    if history:
        tuner.import_data(history)
    run = Run()
    next_id = first_id
    sent_later: list[tuple[int, dict[str, Any]]] = []

    def send(parameter_id: int, parameters: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        """NNI's ``st_callback``: a trial a tuner sends outside a request (NNI's Evolution does)."""
        sent_later.append((parameter_id, parameters))

    def start(parameter_id: int, parameters: dict[str, Any], spent: float) -> None:
        trial = Trial(len(run.trials), parameter_id, parameters, tuner_seconds=spent)
        run.trials.append(trial)
        clock.start(trial)

    def request(n: int) -> None:
        nonlocal next_id
        n = min(n, max_trials - len(run.trials))
        if n <= 0 or run.exhausted or (stop is not None and stop()):
            return
        ids = list(range(next_id, next_id + n))
        next_id += n
        begin = time.perf_counter()
        params_list = tuner.generate_multiple_parameters(ids, st_callback=send)
        spent = time.perf_counter() - begin
        clock.spent(spent)
        for pid, params in zip(ids, params_list):
            start(pid, params, spent / max(1, len(params_list)))
        if len(params_list) < n:
            run.exhausted = True

    def start_sent() -> None:
        while sent_later and len(run.trials) < max_trials and not (stop is not None and stop()):
            start(*sent_later.pop(0), 0.0)

    request(concurrency)
    start_sent()
    finished = 0
    while clock.running():
        trial = clock.next_finished()
        trial.finish_order = finished
        finished += 1
        begin = time.perf_counter()
        if trial.result is not None:
            tuner.receive_trial_result(trial.parameter_id, trial.parameters, trial.result)
        tuner.trial_end(trial.parameter_id, trial.result is not None)
        clock.spent(time.perf_counter() - begin)
        if on_finish is not None:
            on_finish(trial)
        start_sent()
        request(1)
        start_sent()
    return run
