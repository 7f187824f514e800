#!/usr/bin/env bash
# Builds VeriCache if needed (tools/setup.sh), then runs the whole test suite.
# With VC_CI_SANITIZE=1 (CI sets it) it then builds and runs the kernel, model and
# KV-tier tests again under ASan + UBSan (tools/sanitize.sh address, in build-asan/;
# the whole suite under ASan is `tools/sanitize.sh address`, longer than CI allows).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
"$root/tools/setup.sh"
cd "$build"
ctest --output-on-failure -j "$(nproc)" "$@"
if [ "${VC_CI_SANITIZE:-0}" = 1 ]; then
  SANITIZE_FOLDERS=${SANITIZE_FOLDERS:-"kernels model kvtiers"} "$root/tools/sanitize.sh" address "$@"
fi
