"""nni-opevo: the OpEvo tuner and its peers for NNI, with TVM trial code for tensor operators.

Packages, one layer each (docs/architecture.md): ``nni_opevo`` (the tuners and the search space;
nni, numpy, scipy and threadpoolctl only), ``trial_code`` (the NNI trial: TVM kernels; the ``tvm``
extra), ``nni_opevo_tools`` (the launcher, the spaces generator, export and the ``nni-opevo``
command) and ``nni_opevo_bench`` (the harness comparing tuners, which adds its subcommands to
``nni-opevo``). Tool settings (pytest, ruff) live in pyproject.toml.
"""
import re

from setuptools import find_packages, setup

# The version is declared once, in the package (nni_opevo.__version__), and read here without importing it.
VERSION = re.search(r'^__version__ = "([^"]+)"', open("nni_opevo/__init__.py", encoding="utf-8").read(), re.M).group(1)

setup(
    name="nni-opevo",
    version=VERSION,
    description="OpEvo (Gao et al. 2021) as an NNI 3.0 tuner, with Apache TVM trial code for tensor operators",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="MIT",
    license_files=["LICENSE"],
    classifiers=["License :: OSI Approved :: MIT License", "Programming Language :: Python :: 3",
                 "Topic :: Scientific/Engineering :: Artificial Intelligence"],
    python_requires=">=3.10",
    packages=find_packages(include=["nni_opevo", "nni_opevo.*", "trial_code", "trial_code.*",
                                    "nni_opevo_tools", "nni_opevo_tools.*", "nni_opevo_bench", "nni_opevo_bench.*"]),
    package_data={"nni_opevo": ["registration.yml"]},
    # threadpoolctl comes with nni 3.0 (through scikit-learn); named because the surrogate calls it.
    install_requires=["nni==3.0", "numpy", "scipy", "threadpoolctl", "setuptools<82"],
    entry_points={
        "console_scripts": ["nni-opevo = nni_opevo_tools.console:main"],
        # The harness's subcommands of nni-opevo: a higher layer plugs into the command line.
        "nni_opevo.commands": ["bench = nni_opevo_bench.commands:COMMANDS"],
    },
    extras_require={
        # The AutoTVM peer's cost model; the CPU-only wheel (5 MB) is enough, and a plain
        # `xgboost` install (same import) works as well.
        "xgboost": ["xgboost-cpu>=2.1"],
        # The comparison benchmark's figures (python -m nni_opevo_bench); pyelftools reads a cubin's
        # registers and local memory (nni-opevo registers, the tests' CUDA builds).
        "bench": ["matplotlib>=3.7", "pyelftools>=0.31"],
        # Kernel Tuner's own strategies as peers on brute-forced caches (nni_opevo_bench/kernel_tuner_strategies.py).
        "kerneltuner": ["kernel_tuner>=1.3"],
        # Optuna's TPE, GP and CMA-ES samplers as peers on brute-forced caches (nni_opevo_bench/optuna_peers.py);
        # GP needs torch, CMA-ES the cmaes package.
        "optuna": ["optuna>=5.0,<6", "cmaes>=0.11"],
        # The tests also run NNI's Anneal through ChoiceView (hyperopt), a tiny benchmark with Kernel
        # Tuner's and Optuna's samplers (Optuna's GP only where torch is installed), and the
        # web UI in Debian's chromium through Playwright (its own browser downloads are not used).
        # pytest 9.2 no longer calls pytest-xdist 3.8's undecorated collection hook, so
        # `--dist loadgroup` ignores xdist_group and tests/conftest.py's lanes fall apart (two
        # NNI experiments at once, a module fixture set up on both workers): pytest < 9.2.
        "test": ["pytest>=8,<9.2", "pytest-xdist>=3.5", "hypothesis>=6", "xgboost-cpu>=2.1", "hyperopt>=0.2.7",
                 "matplotlib>=3.7", "playwright>=1.40", "ruff>=0.6", "kernel_tuner>=1.3", "optuna>=5.0,<6",
                 "cmaes>=0.11", "pyelftools>=0.31"],
        # The trial code builds kernels with TVM; apache-tvm-ffi 0.1.15.post2 segfaults in
        # save_json / MetaSchedule, so it is pinned. Every process that loads TVM imports ml_dtypes,
        # and 0.7.0's import is the slower by most of a second (figures: docs/decisions.md).
        "tvm": ["apache-tvm==0.27.0.post1", "apache-tvm-ffi==0.1.14.post1", "ml_dtypes<0.7"],
    },
)
