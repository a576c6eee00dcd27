"""TVM MetaSchedule as a peer on live kernels, run by TVM itself (``tvm.s_tir.meta_schedule``).

MetaSchedule tunes the same TE compute (the templates' ``compute``) for the same target (the
host CPU named, as the trials build for it) with its own search space: the design-space
generator, evolutionary search and XGBoost cost model of ``tune_tir``, which is the point of
the comparison. It gets the same number of measured trials (``max_trials_global`` = the
budget), the same seed, and the same timing: ``time_evaluator`` with our trials' repeat and
minimum repeat time, scored as the median repeat, like a trial.

A measure callback records every measured candidate in order, with the wall-clock time its
batch finished: MetaSchedule measures ``num_trials_per_iter`` candidates at a time and learns
from a batch only when all of it is measured, so that is when each result counts. Its
``tuner_ms`` column is empty (NaN): its search, its builds and its measurements share one
process pool and are not told apart, so its wall-clock axis is its whole cost.

Start-up: TVM 0.27's MetaSchedule imports ``tvm.s_tir.tensor_intrin`` in the tuning process
and again in every builder process (a fresh pool per batch), parsing about 500 TVMScript
functions, and its parser calls ``inspect.stack()`` for each, which looks up every frame's
source module among all loaded modules: 23 s per import in a bare process on the 2-core
development machine, 40-60 s in the harness, longer under pytest. None of that is tuning, and a
user with fewer modules loaded pays less of it, so the harness loads the intrinsics with a
stack of frames and their lines only (``load_tensor_intrinsics``: what the parser reads of it),
once in the tuning process and once per builder process: about 1 s each.

Differences a reader should know: MetaSchedule does not check results (our trials verify
every kernel against a float64 reference); and its search state lives in its process, so an
interrupted run cannot be resumed: its rows are written when the run ends, and a run cut short
is run again whole.

A network (``run_network``) is tuned as MetaSchedule tunes a model: one task per layer,
weighted by how often the network runs it, under its gradient task scheduler (Ansor's) with one
global budget.

Options after a colon, as JSON values: ``metaschedule:num_trials_per_iter=16`` (default 16,
so that a budget of 64 gives its cost model four rounds; TVM's own default is 64).
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import json
import linecache
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from trial_code.evaluate import Limits
from trial_code.status import Status
from trial_code.targets import Target
from trial_code.templates import for_workload
from trial_code.workloads import Workload

NAME = "metaschedule"
OPTIONS = {"num_trials_per_iter": 16}
SEARCH_ERROR = "search raised "
"""How the configuration of a run's last row begins where MetaSchedule's own search raised (its
schedule rules' ScheduleError on a computation they do not fit): that row ends the run."""


def is_peer(spec: str) -> bool:
    return spec.partition(":")[0] == NAME


def search_error(configuration: dict[str, Any]) -> str | None:
    """The error that ended a MetaSchedule run, from its last row's configuration; else None."""
    found = configuration.get(NAME)
    return found.removeprefix(SEARCH_ERROR) if isinstance(found, str) and found.startswith(SEARCH_ERROR) else None


def options(spec: str) -> dict[str, Any]:
    """The options of ``metaschedule[:key=value,...]``; ValueError naming an unknown or bad one."""
    found = dict(OPTIONS)
    for item in filter(None, spec.partition(":")[2].split(",")):
        key, _, raw = item.partition("=")
        if key not in OPTIONS:
            raise ValueError(f"{spec}: unknown MetaSchedule option {key!r}; known: {', '.join(OPTIONS)}")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = None
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{spec}: MetaSchedule option '{key}' must be a positive int, got {raw!r}")
        found[key] = value
    return found


@dataclass(frozen=True)
class Measured:
    configuration: str  # a hash of the schedule's trace (its decisions): MetaSchedule's "configuration"
    tflops: float
    status: str
    latency_s: float | None
    finished_s: float  # since tuning started: when its batch was measured
    task: str = ""  # the network layer it belongs to (empty for a single workload)


def prepare_builder() -> None:
    """The builder pool's initializer (a module-level function): the tensor intrinsics loaded, and
    ``exp``, ``erf`` and whole powers lowered as the trials' kernels lower them
    (``trial_code.fast_math``), so that the two are compared on their schedules alone."""
    import tvm

    from trial_code import fast_math

    load_tensor_intrinsics()
    fast_math.register(tvm)


def allocate_with_positions(positions: dict[tuple, list[tuple[Any, Any] | None]], device: Any,
                            args_info: list[Any], alloc_repeat: int) -> list[list[Any]]:
    """The runner's arguments (a module-level function, so its pool can take it): MetaSchedule's
    own random fill, except that an input the computation indexes a tensor by holds positions
    inside that tensor (``trial_code.indices``), as the trials' inputs do. TVM's fill writes the
    bits of floats from 1 to 10 into integers, whose gathers would read far outside the tensor.
    ``positions``: each such workload's arguments (``_argument_key``) -> each input's least and
    greatest values (``trial_code.indices.bounds``) or None."""
    import numpy as np
    from tvm.s_tir.meta_schedule.runner.local_runner import default_alloc_argument

    repeated = default_alloc_argument(device, args_info, alloc_repeat)
    ranges = positions.get(_argument_key(args_info), [])
    for arguments in repeated:
        for index, (argument, found) in enumerate(zip(arguments, ranges)):
            if found is not None:
                rng = np.random.default_rng(index)
                argument.copyfrom(rng.integers(found[0], found[1], argument.shape, dtype=argument.dtype,
                                               endpoint=True))
    return repeated


def index_positions(workloads: list[Workload]) -> dict[tuple, list[tuple[Any, Any] | None]]:
    """For each of ``workloads`` with an input that indexes a tensor: its kernel's arguments
    (``_argument_key``) -> each input's least and greatest values, or None
    (``allocate_with_positions``' table)."""
    from trial_code import measure
    from trial_code.indices import bounds

    found = {}
    for workload in workloads:
        sign = measure.signature(workload)
        if any(sign.ranges):
            key = _argument_key([["TENSOR", str(dtype), shape] for shape, dtype in [*sign.inputs, sign.output]])
            found[key] = [bounds(r, shape, dtype) for r, (shape, dtype) in zip(sign.ranges, sign.inputs)]
    return found


def _argument_key(args_info: list[Any]) -> tuple:
    """A kernel's arguments as MetaSchedule describes them (``["TENSOR", dtype, shape]`` each), hashable."""
    return tuple((str(info[1]), tuple(int(d) for d in info[2])) for info in args_info)


def load_tensor_intrinsics() -> None:
    """Import ``tvm.s_tir.tensor_intrin`` with ``inspect.stack`` answering from the frames alone
    (see the module docstring)."""
    saved = inspect.stack
    inspect.stack = _frames
    try:
        import tvm.s_tir.tensor_intrin  # noqa: F401
    finally:
        inspect.stack = saved


def _frames(context: int = 1) -> list[inspect.FrameInfo]:
    """The caller's frames as ``inspect.stack`` gives them (frame, file, line, function, that
    line), without resolving each frame's module: what TVMScript's parser uses of the stack is
    the frames' locals and the decorator's line."""
    out = []
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        line = linecache.getline(code.co_filename, frame.f_lineno)
        out.append(inspect.FrameInfo(frame, code.co_filename, frame.f_lineno, code.co_name,
                                     [line] if line else None, 0 if line else None))
        frame = frame.f_back
    return out


def run(workload: Workload, target: Target, limits: Limits, spec: str, seed: int, budget: int) -> list[Measured]:
    """Tune ``workload`` with MetaSchedule for ``budget`` measured trials; every measurement in order."""
    return _tune([("", workload, 1)], target, limits, spec, seed, budget)[0]


def run_network(layers: list[Any], target: Target, limits: Limits, spec: str, seed: int, budget: int
                ) -> tuple[list[Measured], dict[str, Any]]:
    """A network's layers (``trial_code.networks.Layer``) as MetaSchedule's tasks, weighted by their
    counts, under its gradient task scheduler (Ansor's) and one budget of ``budget`` trials; with
    each tuned layer's best scheduled PrimFunc (from its database), to build the whole network."""
    return _tune([(x.name, x.workload, x.count) for x in layers], target, limits, spec, seed, budget)


def _tune(tasks: list[tuple[str, Workload, int]], target: Target, limits: Limits, spec: str, seed: int,
          budget: int) -> tuple[list[Measured], dict[str, Any]]:
    import tvm
    from tvm import te
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.utils import fork_seed

    from trial_code import kernel  # sets the thread count that the runner processes it starts inherit

    settings = options(spec)
    flops = [for_workload(workload).flops(workload) for _, workload, _ in tasks]
    measured: list[Measured] = []
    started = time.perf_counter()

    @derived_object
    class Record(ms.measure_callback.PyMeasureCallback):
        def apply(self, task_scheduler: Any, task_id: int, measure_candidates: list[Any], builder_results: list[Any],
                  runner_results: list[Any]) -> None:
            now = time.perf_counter() - started
            name = tasks[task_id][0]
            for candidate, built, ran in zip(measure_candidates, builder_results, runner_results):
                key = hashlib.sha1(str(candidate.sch.trace).encode()).hexdigest()[:16]
                if built.error_msg:
                    measured.append(Measured(key, 0.0, "COMPILE_HOST", None, now, name))
                elif ran.error_msg or not ran.run_secs:
                    measured.append(Measured(key, 0.0, "RUNTIME_DEVICE", None, now, name))
                else:
                    latency = statistics.median(float(s) for s in ran.run_secs)
                    measured.append(Measured(key, flops[task_id] / latency / 1e12, "NO_ERROR", latency, now, name))

    load_tensor_intrinsics()
    host = tvm.target.Target(kernel.for_host(target).tvm_target())
    positions = index_positions([workload for _, workload, _ in tasks])
    runner = ms.runner.LocalRunner(
        timeout_sec=limits.run_timeout,
        f_alloc_argument=functools.partial(allocate_with_positions, positions) if positions else None,
        evaluator_config=ms.runner.EvaluatorConfig(number=1, repeat=limits.repeat, min_repeat_ms=limits.min_repeat_ms))
    with tempfile.TemporaryDirectory(prefix="metaschedule-") as work_dir:
        names = [name or "main" for name, _, _ in tasks]
        contexts = [
            ms.TuneContext(mod=tvm.IRModule({"main": te.create_prim_func(for_workload(w).compute(w))}), target=host,
                           space_generator="post-order-apply", search_strategy="evolutionary", task_name=name,
                           rand_state=state, num_threads="physical").clone()
            for name, (_, w, _), state in zip(names, tasks, fork_seed(seed, n=len(tasks)))]
        try:
            database = ms.tune_tasks(
                tasks=contexts, task_weights=[float(count) for _, _, count in tasks], work_dir=work_dir,
                max_trials_global=budget, num_trials_per_iter=settings["num_trials_per_iter"],
                builder=ms.builder.LocalBuilder(timeout_sec=limits.build_timeout, initializer=prepare_builder),
                runner=runner, database="memory",
                measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), Record()],
                task_scheduler="gradient")
        except Exception as e:  # noqa: BLE001 (its own rules' ScheduleError, from TVM's FFI: the search ended there)
            said = (str(e).strip().splitlines() or [""])[0]
            said = said if said.startswith(type(e).__name__) else f"{type(e).__name__}: {said}"
            measured.append(Measured(SEARCH_ERROR + said, 0.0, Status.INSTANTIATION_ERROR.name, None,
                                     time.perf_counter() - started))
            return measured[:budget], {}
        best = {}
        for name, context in zip(names, contexts):
            found = database.query_ir_module(context.mod, target=host, workload_name=name)
            if found is not None:
                best[name] = found["main"]
    return measured[:budget], best
