#!/usr/bin/env bash
# Builds VeriCache if needed (tools/setup.sh), then runs the whole test suite.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
"$root/tools/setup.sh"
cd "$build"
ctest --output-on-failure -j "$(nproc)" "$@"
