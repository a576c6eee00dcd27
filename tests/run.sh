#!/usr/bin/env bash
# Set up .venv (nni==3.0, numpy, scipy, apache-tvm, pytest, hypothesis, playwright), install
# Debian's chromium for the web UI test when it is missing, and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    else
        echo "chromium is missing and cannot be installed here (needs root and apt-get): the web UI test is skipped" >&2
    fi
fi
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade 'pip' 'setuptools<82'
.venv/bin/python -m pip install -q -e '.[test,tvm]'
export PATH="$PWD/.venv/bin:$PATH"
exec .venv/bin/python -m pytest -q tests "$@"
