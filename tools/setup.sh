#!/usr/bin/env bash
# Installs the Debian packages VeriCache needs (only those missing), then configures
# and builds it into build/. Safe to run again: a built tree rebuilds incrementally.
#   tools/setup.sh            # Release build in build/
#   BUILD_DIR=out tools/setup.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}

packages=(cmake ninja-build g++ pkg-config ccache
  libcaf-dev libhwloc-dev hwloc-nox libboost-dev libboost-system-dev
  nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev libspdlog-dev libfmt-dev libpcre2-dev libxxhash-dev curl
  redis-server libhiredis-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The official OpenAI client for Node, for the server tests (tests/server/node): only
# where node and npm are present; without them, or offline, that one test skips.
node_dir=$root/tests/server/node
if command -v node >/dev/null && command -v npm >/dev/null &&
   [ ! -f "$node_dir/node_modules/openai/package.json" ]; then
  (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null 2>&1) ||
    echo "setup: npm could not install the 'openai' client into $node_dir; its test will skip" >&2
fi

# tools/sanitize.sh: the packages only, it builds elsewhere.
[ "${SETUP_ONLY_PACKAGES:-0}" = 1 ] && exit 0

# nvcc is optional: with it the CUDA kernels and their tests are built too.
if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build"
