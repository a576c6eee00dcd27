#!/usr/bin/env bash
# The main job in one command: set up .venv (NNI 3.0, Apache TVM), run a real OpEvo tuning
# experiment (MM1 on the GPU when one is visible, else the CPU quickstart), print where to
# watch it and the best configuration. Extra arguments go to `python -m nni_opevo_tools.launch`
# (e.g. --config experiments/C2/opevo.yml --port 8081).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade 'pip' 'setuptools<82'
.venv/bin/python -m pip install -q -e '.[tvm]'
export PATH="$PWD/.venv/bin:$PATH"  # trials run `python3` from this environment
status=0
.venv/bin/python -m nni_opevo_tools.launch "$@" || status=$?
echo "nni-opevo and nnictl are in $PWD/.venv/bin: \`source .venv/bin/activate\` puts them on PATH."
exit "$status"
