"""The package as a stranger gets it: the wheel built, installed into a fresh virtual environment,
and the CPU quickstart run from an empty folder with a tiny budget. It must end with a best
kernel, write nothing into site-packages, and export a library that loads and computes the product.

The fresh environment gets the wheel only; its dependencies (NNI, TVM, NumPy...) are this
environment's, made visible by a plain path in a ``.pth`` file (this environment's own ``.pth``
files, among them the editable install of the checkout, are not run that way), so the test needs
no package index and every import of the project comes from the wheel."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest
from nni_experiment import free_port, stop_in_background

ROOT = Path(__file__).resolve().parent.parent


def _files(folder: Path) -> set[str]:
    """Every file below ``folder`` but bytecode (Python caches what it imports wherever it may)."""
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and p.suffix != ".pyc"}


@pytest.mark.slow(seconds=120)
def test_the_wheel_runs_the_quickstart_from_an_empty_folder(tmp_path):
    dist, source = tmp_path / "dist", tmp_path / "source"  # built from a copy: no build/ left in the checkout
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info", ".devcarry",
                                                                 "__pycache__", "docs"))
    (source / "docs").mkdir()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist),
                    str(source)], check=True, capture_output=True, timeout=300)
    wheel = next(dist.glob("nni_opevo-*.whl"))
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
                   check=True, capture_output=True, timeout=300)
    installed = _files(site)
    assert "LICENSE" in " ".join(installed) and not any(name.startswith(("experiments/", "search_spaces/", "docs/"))
                                                         for name in installed)

    work = tmp_path / "work"
    work.mkdir()
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "cache"),
               PATH=f"{env_dir / 'bin'}{os.pathsep}{env['PATH']}")
    where = subprocess.run([str(python), "-c", "import nni_opevo, trial_code, nni_opevo_tools; "
                            "print(nni_opevo.__file__, trial_code.__file__, nni_opevo_tools.__file__)"],
                           cwd=work, env=env, check=True, capture_output=True, text=True).stdout.split()
    assert all(path.startswith(str(site)) for path in where), where

    port = free_port()
    out = subprocess.run([str(env_dir / "bin" / "nni-opevo"), "launch", "--workload", "MM_small", "--target", "cpu",
                          "--trials", "6", "--port", str(port), "--every", "2", "--top-k", "2"],
                         cwd=work, env=env, capture_output=True, text=True, timeout=900)
    experiment = next((line.split()[1] for line in out.stdout.splitlines() if line.startswith("experiment ")), None)
    try:
        assert out.returncode == 0, out.stdout + out.stderr
        assert "best: " in out.stdout and "re-measured over 30 repeats" in out.stdout
        config = work / "experiments" / "MM_small" / "opevo-cpu.yml"
        assert config.exists() and (work / "search_spaces" / "MM_small.cpu.json").exists()
        assert str(python) in config.read_text(), "the trials run the installed package's interpreter"
        assert _files(site) == installed, "the run wrote into site-packages"
        export = tmp_path / "home" / "nni-experiments" / experiment / "export"
        check = ("import numpy as np; from nni_opevo_tools.best import load_kernel; k = load_kernel({!r}); "
                 "r = np.random.default_rng(1); a, b = r.random((256, 256), np.float32), r.random((256, 256), np.float32); "
                 "np.testing.assert_allclose(k(a, b), a @ b, rtol=1e-4, atol=1e-3); print('product ok')")
        loaded = subprocess.run([str(python), "-c", check.format(str(export))], cwd=work, env=env,
                                capture_output=True, text=True, timeout=120)
        assert loaded.returncode == 0 and "product ok" in loaded.stdout, loaded.stderr
    finally:
        if experiment:
            stop_in_background(experiment, env)
