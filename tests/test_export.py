"""``nni_opevo_tools.export`` pieces that need no experiment: CUDA kernels exported where no GPU is
visible (built and nvcc-compiled, not timed), and clear errors for what it cannot export."""
import shutil
import subprocess
import sys

import pytest
from feasible import feasible

from nni_opevo_tools import export, remeasure
from nni_opevo_tools.experiment_client import ExperimentDatabase, Trial
from trial_code import targets, workloads
from trial_code.evaluate import Limits
from trial_code.status import Status


@pytest.mark.slow(seconds=10)
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA toolkit) is not on PATH")
def test_cuda_best_is_exported_as_cuda_source_without_a_gpu(tmp_path):
    args = export.trial_arguments("python3 -m trial_code.trial --workload MM1 --target cuda --build-timeout 300")
    assert args.workload == "MM1" and args.build_timeout == 300
    workload = workloads.lookup("MM1")
    # Where a GPU is visible, the same path as here: an H100's limits, built and compiled only.
    target = targets.Target("cuda", device="cuda-none", has_device=False, **targets.H100)
    trials = [Trial(1.5, 7, feasible(workload, target, seed=0), {"default": 1.5}),
              Trial(1.2, 3, feasible(workload, target, seed=1), {"default": 1.2})]
    rows = remeasure.remeasure(trials, workload, target, Limits(build_timeout=args.build_timeout), measured=False,
                            kernels=str(tmp_path))
    assert [r.status for _, r, _ in rows] == [Status.NO_ERROR, Status.NO_ERROR], [r.error for _, r, _ in rows]
    assert all(not r.repeats_ms for _, r, _ in rows), "nothing is timed without a GPU"
    source = (tmp_path / "p7.cu").read_text()
    assert "__global__" in source and "__shared__" in source
    winner, _, _ = remeasure.best_of(rows, measured=False)
    assert winner.parameter_id == 7, "unmeasured: the best reported configuration that builds"
    assert "| 1 | 7 | 1.5000 | - | - | NO_ERROR | p7.cu |" in export.table(rows, str(tmp_path))


def test_a_foreign_trial_command_is_refused_by_name():
    with pytest.raises(SystemExit, match="trialCommand is not trial_code.trial: 'python3 train.py --lr 0.1'"):
        export.trial_arguments("python3 train.py --lr 0.1")


def test_an_unknown_experiment_is_named(tmp_path):
    with pytest.raises(SystemExit, match="no experiment 'nosuch'.*experimentWorkingDirectory"):
        export.experiment_folder("nosuch", str(tmp_path))
    with pytest.raises(ValueError, match="has no db/nni.sqlite"):
        ExperimentDatabase(str(tmp_path))


def test_kernel_files_replace_a_planted_link_instead_of_writing_through_it(tmp_path):
    """A link planted where a kernel's source or library goes (``kernels/p1.ll``) is replaced by
    the file; its target is left as it was."""
    workload, target = workloads.lookup("MM_small"), targets.cpu()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    (kernels / "p1.ll").symlink_to(victim)
    (kernels / "p1.so").symlink_to(victim)
    rows = remeasure.remeasure([Trial(1.0, 1, feasible(workload, target), {"default": 1.0})], workload, target,
                               Limits(), measured=False, kernels=str(kernels))
    assert rows[0][1].status is Status.NO_ERROR, rows[0][1].error
    assert victim.read_text() == "precious"
    assert not (kernels / "p1.ll").is_symlink() and "define" in (kernels / "p1.ll").read_text()
    assert not (kernels / "p1.so").is_symlink() and (kernels / "p1.so").stat().st_size > 1000


@pytest.mark.parametrize("flag, value", [("--repeat", "4294967297"), ("--repeat", "0"), ("--min-repeat-ms", "-1"),
                                         ("--min-repeat-ms", "10000000"), ("--top-k", "1000000")])
def test_exports_numeric_flags_are_bounded_where_declared(flag, value):
    """A value past 2^32 would wrap to 0 inside TVM's time evaluator: refused with the ranges named."""
    found = subprocess.run([sys.executable, "-m", "nni_opevo_tools.export", "some-experiment", flag, value],
                           capture_output=True, text=True, timeout=60)
    assert found.returncode == 2 and f"argument {flag}: must be an integer from " in found.stderr
    assert "Traceback" not in found.stderr
