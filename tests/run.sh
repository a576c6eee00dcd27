#!/usr/bin/env bash
# Set up .venv (nni==3.0, numpy, scipy, apache-tvm, pytest, hypothesis) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade 'pip' 'setuptools<82'
.venv/bin/python -m pip install -q -e '.[test,tvm]'
export PATH="$PWD/.venv/bin:$PATH"
exec .venv/bin/python -m pytest -q tests "$@"
