"""The child process that builds, checks and times one kernel (``python -m trial_code.worker``).

It reads its job as JSON on stdin and writes one JSON event per line to its original stdout
(``waiting`` and ``locked`` on the CPU, ``built``, ``measuring``, then ``done``, with the
kernel's latency and its operator's flops, or ``failed``; ``turn`` whenever the device it waits
for passes to another trial); everything TVM or the compilers print goes to stderr instead, so
it cannot corrupt the events. The parent (``evaluate``) enforces the
build and run time limits from those events and kills this process when one is exceeded,
which a build stuck in the compiler or a kernel that never returns cannot do for itself.

It runs in a session of its own (so the parent can kill it with its compilers), which would
let it outlive a trial killed by NNI or ``kill -9``. So its first act is to start a watcher
(``watcher``) in that session, which kills the whole session when the trial ends: the worker,
whatever native code it is in (an LLVM build, a kernel that never returns), its compilers,
and with them its hold on the device lock. Nothing of this depends on Python running in the
worker, which a signal handler would.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any

WATCH_ENV = "NNI_OPEVO_WATCH_FD"
"""The environment variable that gives a worker started as a program the descriptor of the pipe
its watcher reads."""
EVENTS: Any = None
"""The events' stream: the process's original stdout (``serve``)."""
DEVICE_COMPILE_MARKERS = ("nvrtc", "nvcc", "ptxas", "cuda_error", "cuModuleLoad", "CUDA_ERROR")


def emit(event: str, **fields: Any) -> None:
    EVENTS.write(json.dumps({"event": event, **fields}) + "\n")


def fail(status: str, exc: BaseException) -> None:
    traceback.print_exc(file=sys.stderr)
    text = str(exc)
    # TVM schedule errors print the whole TIR first; the reason follows "Error message:".
    # CUDA compile errors print the whole source first; nvcc's words follow "Compilation error:".
    for marker in ("Error message:", "Compilation error:"):
        if marker in text:
            text = text[text.rindex(marker) + len(marker):]
    message = f"{type(exc).__name__}: {text.strip()}"
    emit("failed", status=status, error=message[-2000:])


def run(job: dict[str, Any]) -> None:
    """On the CPU the trial holds the device from before it loads TVM until its measurement
    ends: a CPU kernel is timed on every core, and another trial's import or build on one of
    them halved MM_small's measured speed at two trials at a time. A GPU kernel needs only the
    GPU to itself, so there builds run in parallel and only measurements take turns."""
    from .device_lock import DeviceBusy, exclusive
    from .targets import Target

    target = Target.from_json(job["target"])
    if target.kind != "llvm" or job.get("build_only"):
        return build_and_measure(job, holding=False)
    emit("waiting")
    try:
        with exclusive(target.device, job.get("lock_timeout"), on_turn=lambda: emit("turn")):
            emit("locked")
            return build_and_measure(job, holding=True)
    except DeviceBusy as exc:
        return fail("DEVICE_BUSY", exc)


def loads_tvm_without_torch(job: dict[str, Any]) -> bool:
    """Whether ``job``'s worker loads TVM without PyTorch (``load_tvm_without_torch``): a CPU
    kernel or a build; a GPU kernel's worker loads it as it comes."""
    return job["target"]["kind"] == "llvm" or bool(job.get("build_only"))


def load_tvm_without_torch() -> None:
    """Load TVM with PyTorch kept out of its import. tvm_ffi imports PyTorch whenever it is
    installed (to trade tensors with it), which was 3 to 5 s of a CPU trial's 9 on the 2-core
    machine, spent inside the device lock; a CPU kernel and a build never trade tensors with it.
    PyTorch stays importable afterwards (a user's operator module may import it). A trial that
    runs a GPU kernel loads TVM as it comes: the CUDA libraries PyTorch loads may be the ones
    TVM's CUDA runtime finds."""
    from .targets import import_tvm

    if "torch" in sys.modules:
        import_tvm()
        return
    sys.modules["torch"] = None  # type: ignore[assignment]  # `import torch` raises ImportError, which tvm_ffi expects
    try:
        import_tvm()
    finally:
        del sys.modules["torch"]


def build_and_measure(job: dict[str, Any], holding: bool) -> None:
    """``holding``: the device lock is held already (the CPU), else it is taken to measure."""
    from .targets import Target

    requested = Target.from_json(job["target"])
    # TVM is loaded here, after the stdout redirect, so its own output never reaches the events.
    if loads_tvm_without_torch(job):
        load_tvm_without_torch()
    from . import files, kernel
    from .device_lock import DeviceBusy, exclusive
    from .workloads import Workload

    workload = Workload.from_json(job["workload"])
    target = kernel.for_host(requested)
    params = job["params"]
    if job.get("check"):  # the static check the parent left to this process (``evaluate``)
        from .templates import Infeasible, for_workload

        try:
            for_workload(workload).check(workload, params, requested)
        except Infeasible as exc:
            return emit("failed", status="INSTANTIATION_ERROR", error=str(exc))
    try:
        module = kernel.scheduled(workload, params, target)
    except Exception as exc:  # a schedule primitive refused the configuration
        return fail("INSTANTIATION_ERROR", exc)
    start = time.perf_counter()
    try:
        executable = kernel.build(module, target)
        if target.kind == "cuda" and not target.has_device:
            kernel.compile_cuda_binary(executable, target)
    except Exception as exc:
        device_side = any(marker in str(exc) for marker in DEVICE_COMPILE_MARKERS)
        return fail("COMPILE_DEVICE" if device_side else "COMPILE_HOST", exc)
    emit("built", build_s=time.perf_counter() - start, arch=target.arch_name)
    try:
        if job.get("source_path"):
            files.replace_text(job["source_path"], kernel.source(executable, target))
        if job.get("library_path"):
            files.replace_file(job["library_path"], executable.export_library)
    except Exception as exc:  # a full disk, a folder we may not write
        return fail("UNKNOWN_ERROR", exc)
    if job.get("build_only"):
        return emit("done", status="NO_ERROR", latency_s=None, repeats_s=[])
    from . import measure

    emit("preparing")  # the inputs and the reference, before the wait: the lock is for the device only
    prepared = measure.prepare(workload, job["seed"])
    emit("prepared")
    if holding:
        emit("measuring")
        return measured(workload, executable, target, job, prepared)
    try:
        with exclusive(target.device, job.get("lock_timeout"), on_turn=lambda: emit("turn")):
            emit("measuring")
            return measured(workload, executable, target, job, prepared)
    except DeviceBusy as exc:
        return fail("DEVICE_BUSY", exc)


def measured(workload: Any, executable: Any, target: Any, job: dict[str, Any], prepared: Any) -> None:
    """Check and time the built kernel on the device (whose lock is held), within the run limit
    that began now."""
    from . import measure

    began = time.monotonic()
    device = measure.device_of(target)
    try:
        function = executable["main"]
        args = measure.upload(prepared, device)
    except Exception as exc:  # loading the module onto the device
        return fail("COMPILE_DEVICE", exc)
    try:
        first_s = measure.verify(workload, function, prepared.host, args, device, job["seed"], prepared)
    except measure.WrongAnswer as exc:
        return fail("WRONG_ANSWER", exc)
    except Exception as exc:
        return fail("RUNTIME_DEVICE", exc)
    try:
        run_s = measure.one_run(function, args, device, first_s, job["min_repeat_ms"])
        timing = measure.time_kernel(executable.mod, args, device, job["repeat"], job["min_repeat_ms"],
                                     adaptive=target.kind == "cuda", run_s=run_s,
                                     left_s=job["run_timeout"] - (time.monotonic() - began))
    except Exception as exc:
        return fail("RUNTIME_DEVICE", exc)
    from .templates import for_workload

    emit("done", status="NO_ERROR", latency_s=timing.latency_s, repeats_s=timing.repeats_s,
         flops=for_workload(workload).flops(workload))


def watch_parent(fd: int | None) -> None:
    """Start the watcher (``watcher``) in this session on ``fd``, the read end of the trial's pipe.
    Without one (run by hand), the parent's deadlines alone bound the worker."""
    if fd is None:
        return
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-m", "trial_code.watcher", str(fd)])
    os.close(fd)


def serve(job: dict[str, Any] | None, watched: int | None) -> None:
    """The worker's body, whether started as a program (``main``) or forked (``forked``): the events
    to this process's stdout, the watcher on ``watched`` started first, then ``job`` run (None:
    read from stdin, once the watcher guards the wait for it)."""
    global EVENTS
    EVENTS = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # stray prints from TVM, nvcc or LLVM go to stderr
    watch_parent(watched)
    try:
        run(json.loads(sys.stdin.read()) if job is None else job)
    except Exception as exc:
        fail("UNKNOWN_ERROR", exc)


def main() -> None:
    watched = os.environ.pop(WATCH_ENV, None)
    serve(None, int(watched) if watched else None)


if __name__ == "__main__":
    main()
