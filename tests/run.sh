#!/usr/bin/env bash
# Set up .venv (nni==3.0, numpy, scipy, apache-tvm, pytest, hypothesis, playwright, ruff), install
# the Debian packages some tests drive when they are missing, lint, and run the whole test suite,
# naming each test as it runs. Extra arguments go to pytest: `bash tests/run.sh -m "not slow"` is
# the edit-test loop (under 3 minutes), `bash tests/run.sh tests/test_opevo.py` one file.
set -euo pipefail
cd "$(dirname "$0")/.."
# Debian packages for the web UI test (chromium) and the remote training service test (sshd).
missing=()
command -v chromium >/dev/null || missing+=(chromium)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
        echo "missing ${missing[*]} and cannot install them here (needs root and apt-get): their tests are skipped" >&2
    fi
fi
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade 'pip' 'setuptools<82'
.venv/bin/python -m pip install -q -e '.[test,tvm]'
export PATH="$PWD/.venv/bin:$PATH"  # NNI runs trials with `python3` from PATH
.venv/bin/ruff check .
# Two xdist workers, one per core: the slow tests (NNI experiments, SSH, a browser) mostly wait
# on NNI's polling, in two lanes with the fast ones around them (tests/conftest.py says why).
exec .venv/bin/python -m pytest -v -n 2 --dist loadgroup --durations=20 "$@"
