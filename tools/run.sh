#!/usr/bin/env bash
# Builds VeriCache if needed (tools/setup.sh), then runs the CLI with the given
# arguments, e.g.  tools/run.sh generate --prompt 'def fibonacci(n):'
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/tools/setup.sh" >&2
exec "${BUILD_DIR:-$root/build}/tools/vericache" "$@"
