#!/usr/bin/env bash
# Builds call_kernel.cc (an export's kernel called from C++) against the installed apache-tvm-ffi
# (its headers and libtvm_ffi, which loads the library and calls it) and apache-tvm's runtime
# (libtvm_runtime, the thread pool and workspaces a CPU kernel calls into), both found in the
# packages of PYTHON (default python3) and linked with their folders as the program's rpath.
#   bash examples/cpp/build.sh [OUTPUT]          # default: examples/cpp/call_kernel
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
output="${1:-$here/call_kernel}"
read -r ffi tvm < <("${PYTHON:-python3}" -c 'import importlib.util as u, os
print(*(os.path.dirname(u.find_spec(p).origin) for p in ("tvm_ffi", "tvm")))')
exec "${CXX:-g++}" -std=c++17 -O2 -I"$ffi/include" "$here/call_kernel.cc" -o "$output" \
    -L"$ffi/lib" -ltvm_ffi -Wl,--no-as-needed -L"$tvm/lib" -ltvm_runtime -Wl,-rpath,"$ffi/lib:$tvm/lib"
