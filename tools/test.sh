#!/usr/bin/env bash
# Builds VeriCache if needed (tools/setup.sh), then runs the whole test suite.
# With VC_CI_SANITIZE=1 (CI sets it) it then builds and runs the suite again under
# ASan + UBSan (tools/sanitize.sh address, in build-asan/).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
"$root/tools/setup.sh"
cd "$build"
ctest --output-on-failure -j "$(nproc)" "$@"
if [ "${VC_CI_SANITIZE:-0}" = 1 ]; then
  "$root/tools/sanitize.sh" address "$@"
fi
