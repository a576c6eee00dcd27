#!/usr/bin/env bash
# One call of the GPU campaign on the lent GPU machine, from the project root there (docs/gpu-campaign.md):
#   bash scripts/gpu-call.sh [nni-opevo campaign options, e.g. --stages correctness anchors]
# TVM travels in two parts, in two calls made back to back: a call that brings only part a stashes it and
# stops; the call that brings part b unpacks TVM (and NNI, xgboost) under /opt/nni-opevo once per machine.
# The campaign's folder lives at /root/campaign while the machine stays warm; on a fresh machine it is
# restored from .devcarry/campaign/campaign.tar.xz when that travelled. Every call packs it to
# $OUT/campaign.tar.xz and copies its README.md and log to $OUT.
set -uo pipefail
site=/opt/nni-opevo
stash=/root/stash
folder=/root/campaign
: "${OUT:=/tmp/out}"
mkdir -p "$OUT" "$stash"
export PYTHONPATH=$site:$PWD CUDA_PATH=/usr/local/cuda PYTHONUNBUFFERED=1
if ! python3 -c 'import tvm' 2>/dev/null; then
  if [ -e .devcarry/tvm-a/part.aa ]; then cp .devcarry/tvm-a/part.aa "$stash/"; fi
  if [ ! -e .devcarry/tvm-b/part.ab ]; then
    [ -e "$stash/part.aa" ] && echo "TVM part a is stashed: make the call with part b within 30 s." \
      || echo "TVM is not here: carry .devcarry/tvm-a (then .devcarry/tvm-b) first (docs/gpu-campaign.md)."
    exit 3
  fi
  [ -e "$stash/part.aa" ] || { echo "TVM part a is not stashed here: the machine was given back; start again." >&2; exit 3; }
  mkdir -p "$site" && cat "$stash/part.aa" .devcarry/tvm-b/part.ab | xz -d -T8 | tar -x -C "$site" || exit 3
fi
if ! python3 -c 'import nni, xgboost' 2>/dev/null; then
  [ -e .devcarry/py/site.tar.xz ] || { echo "NNI/xgboost are not here: carry .devcarry/py with part b." >&2; exit 3; }
  tar -xJf .devcarry/py/site.tar.xz -C "$site" || exit 3
fi
python3 -c 'import tvm, nni, xgboost; print("tvm", tvm.__version__, "cuda", tvm.cuda(0).exist)' || exit 3
if [ ! -d "$folder" ] && [ -e .devcarry/campaign/campaign.tar.xz ]; then
  tar -xJf .devcarry/campaign/campaign.tar.xz -C "$(dirname "$folder")"
fi
python3 -m nni_opevo_bench.campaign --out "$folder" "$@" 2>&1 | tee "$OUT/campaign.log" | tail -n 40
status=${PIPESTATUS[0]}
tar -C "$(dirname "$folder")" -cJf "$OUT/campaign.tar.xz" "$(basename "$folder")"
cp "$folder/README.md" "$OUT/README.md" 2>/dev/null
exit "$status"
