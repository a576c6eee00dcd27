#!/usr/bin/env bash
# Packs what the GPU machine lacks (CPython 3.12 there, no package index) into .devcarry/ (git-ignored),
# for the GPU campaign's calls (docs/gpu-campaign.md):
#   .devcarry/tvm-a/part.aa, .devcarry/tvm-b/part.ab  Apache TVM 0.27 + tvm-ffi, xz-packed and split in two
#                                                     (one call carries at most 64 MiB with the working tree)
#   .devcarry/py/site.tar.xz                          NNI 3.0 without its web UI (the campaign drives tuners
#                                                     in-process), json-tricks, schema, typeguard, xgboost-cpu
#   .devcarry/campaign/campaign.tar.xz                 the published campaign (docs/results/h100; campaign-h200.tar.xz:
#                                                     docs/results/h200), which the next call resumes
# Usage, from the project root: bash scripts/gpu-bundle.sh   (about 6 minutes the first time; cached in /tmp)
set -euo pipefail
TVM_VERSION=0.27.0.post1
FFI_VERSION=0.1.14.post1  # 0.1.15.post2 segfaults in ToJSONGraph (MetaSchedule, save_json)
cache=/tmp/nni-opevo-gpu-bundle
root=$(git rev-parse --show-toplevel)
py312=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
       --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
mkdir -p "$cache"
if [ ! -s "$cache/tvm-site.tar.xz" ]; then
  work=$(mktemp -d)
  python3 -m pip download -q --no-deps -d "$work/whl" "apache-tvm==$TVM_VERSION"
  python3 -m pip download -q --no-deps "${py312[@]}" -d "$work/whl" "apache-tvm-ffi==$FFI_VERSION"
  mkdir -p "$work/site"
  for w in "$work"/whl/*.whl; do (cd "$work/site" && unzip -q -o "$w"); done
  (cd "$work/site" && tar --exclude='tvm/3rdparty/cutlass' --exclude='*.dist-info' -cf - tvm tvm_ffi) \
    | xz -T0 -6 > "$cache/tvm-site.tar.xz.part"
  mv "$cache/tvm-site.tar.xz.part" "$cache/tvm-site.tar.xz"
  rm -rf "$work"
fi
if [ ! -s "$cache/py-site.tar.xz" ]; then
  work=$(mktemp -d)
  python3 -m pip download -q --no-deps -d "$work/whl" nni==3.0
  python3 -m pip download -q --no-deps "${py312[@]}" -d "$work/whl" 'json-tricks>=3.15.5' schema \
    'typeguard>=3,<4.1.3' 'xgboost-cpu>=2.1'
  mkdir -p "$work/site"
  for w in "$work"/whl/*.whl; do (cd "$work/site" && unzip -q -o "$w"); done
  rm -rf "$work/site/nni_node"  # the web UI: the campaign runs no nnictl
  (cd "$work/site" && tar --exclude='*.dist-info' -cf - .) | xz -T0 -6 > "$cache/py-site.tar.xz.part"
  mv "$cache/py-site.tar.xz.part" "$cache/py-site.tar.xz"
  rm -rf "$work"
fi
mkdir -p "$root/.devcarry/tvm-a" "$root/.devcarry/tvm-b" "$root/.devcarry/py"
rm -f "$root"/.devcarry/tvm-a/* "$root"/.devcarry/tvm-b/* "$cache"/part.*
split -b 36000000 "$cache/tvm-site.tar.xz" "$cache/part."
[ ! -e "$cache/part.ac" ] || { echo "the TVM bundle grew past two parts: adjust the split size" >&2; exit 1; }
mv "$cache/part.aa" "$root/.devcarry/tvm-a/"
mv "$cache/part.ab" "$root/.devcarry/tvm-b/"
cp "$cache/py-site.tar.xz" "$root/.devcarry/py/site.tar.xz"
# The published campaigns resume where they stopped: each device's folder of docs/results packed as the
# archive gpu-call.sh restores on a fresh machine (kept when a call has returned a newer one).
mkdir -p "$root/.devcarry/campaign"
for pair in h100:campaign h200:campaign-h200; do
  published="$root/docs/results/${pair%%:*}" name=${pair#*:}
  archive="$root/.devcarry/campaign/$name.tar.xz"
  if [ -e "$published/campaign.json" ] && [ ! -e "$archive" ]; then
    tar -C "$(dirname "$published")" --exclude=.campaign.lock --transform "s,^${pair%%:*},$name," \
      -cJf "$archive" "${pair%%:*}"
  fi
done
du -h "$root"/.devcarry/tvm-a/part.aa "$root"/.devcarry/tvm-b/part.ab "$root"/.devcarry/py/site.tar.xz "$root"/.devcarry/campaign/*
echo "Ready: make the calls of docs/gpu-campaign.md."
