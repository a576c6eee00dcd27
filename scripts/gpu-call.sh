#!/usr/bin/env bash
# One call of the GPU campaign on the lent GPU machine, from the project root there (docs/gpu-campaign.md):
#   [CALL_S=570] bash scripts/gpu-call.sh [nni-opevo campaign options, e.g. --stages anchors goals]
# CALL_S: the seconds this script may take, the device tool's timeout_s less 30 (`nni-opevo campaign --plan`
# computes both from the device time left). The campaign stops itself 20 s before CALL_S whatever is in
# flight, and the archive is packed into $OUT every minute and at the end, so a call cut off at any moment
# still returns every finished row.
# TVM travels in two parts, in two calls made back to back: a call that brings only part a stashes it and
# stops; the call that brings part b unpacks TVM (and NNI, xgboost) under /opt/nni-opevo once per machine.
# The campaign's folder lives at $CAMPAIGN (default /root/campaign; one folder per device, e.g.
# /root/campaign-h200) while the machine stays warm; it travels back as <folder's name>.tar.xz, and on a
# fresh machine it is restored from .devcarry/campaign/<folder's name>.tar.xz when that travelled.
set -uo pipefail
site=/opt/nni-opevo
stash=/root/stash
folder=${CAMPAIGN:-/root/campaign}
archive=$(basename "$folder").tar.xz
: "${OUT:=/tmp/out}"
mkdir -p "$OUT" "$stash"
export PYTHONPATH=$site:$PWD CUDA_PATH=${CUDA_PATH:-/usr/local/cuda} PYTHONUNBUFFERED=1
python3 -m nni_opevo_bench.preflight image || exit 3
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
python3 -m nni_opevo_bench.preflight smoke; smoke=$?
if [ "$smoke" -eq 4 ]; then export NNI_OPEVO_FORK=0  # a forked worker failed where a program did not
elif [ "$smoke" -ne 0 ]; then exit 3; fi
if [ ! -d "$folder" ] && [ -e ".devcarry/campaign/$archive" ]; then
  mkdir -p "$folder" && tar -xJf ".devcarry/campaign/$archive" -C "$folder" --strip-components=1
fi
pack() {  # the folder into $OUT, whole or not at all
  tar -C "$(dirname "$folder")" -cJf "$OUT/.$archive" "$(basename "$folder")" 2>/dev/null \
    && mv "$OUT/.$archive" "$OUT/$archive"
}
left=$(( ${CALL_S:-570} - SECONDS - 20 ))  # 20 s kept to pack the archive and rewrite the README
[ "$left" -gt 60 ] || { echo "only ${left} s left in this call: nothing run" >&2; exit 3; }
( while sleep 60; do pack; done ) &
packer=$!
timeout -k 5 $(( left + 10 )) python3 -m nni_opevo_bench.campaign --out "$folder" \
  --minutes "$(awk "BEGIN { print $left / 60 }")" "$@" 2>&1 | tee "$OUT/campaign.log" | tail -n 40
status=${PIPESTATUS[0]}
kill "$packer" 2>/dev/null; wait "$packer" 2>/dev/null
python3 -m nni_opevo_bench.campaign --report --out "$folder" >/dev/null 2>&1
pack
cp "$folder/README.md" "$OUT/README.md" 2>/dev/null
exit "$status"
