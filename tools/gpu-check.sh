#!/usr/bin/env bash
# Checks the CUDA path on a machine with a GPU (H200/H100, sm_90), in one go:
#   tools/gpu-check.sh OUTDIR     build, run the CUDA tests and the kernel benchmark
#   tools/gpu-check.sh --prepare  (on a machine with the Debian packages, before a GPU
#                                 session) copy GoogleTest's sources into .gpu-deps/,
#                                 and, when build/ holds a CUDA build, its test_runtime,
#                                 test_actors and vericache with the libraries they load
#                                 into .gpu-deps/prebuilt/ (bin/, lib/, commit)
#
# It builds only what the check needs -- the CPU and CUDA kernels, test_cuda and
# vc_cuda_bench -- in a separate build directory (build-gpu/, VC_CUDA_ONLY=ON: no
# CAF, Boost, hwloc, ...), because the GPU machine's image has nvcc, CMake and ninja
# but is not known to have this project's Debian packages, and cannot fetch them. GoogleTest is built
# from .gpu-deps/googletest (made by --prepare; carry it to the GPU machine), else
# /usr/src/googletest, else the system's package. Warnings are not errors there
# (another compiler version); they are still in the build log.
#
# Steps: build; probe the GPU; the CUDA tests; the kernel benchmark; with
# .gpu-deps/prebuilt, the runtime on the GPU (test_runtime's device.* and cuda_device.*, test_actors' cuda_engine.*:
# the bundled model's weight products and full-KV attention on the GPU against the
# float64 reference, batch invariance, vericache equal to full decoding; then `bench
# decode --device cuda` beside `--device cpu`, `bench rows` and `bench throughput`
# (a)/(b)/(e) with --device cuda, and with 240 s left (a)/(e) at 8K on the bundled
# model scaled to the Llama-3.1-8B shape), built here because the image lacks the packages; then,
# in the time left, the CUDA tests again under compute-sanitizer memcheck
# (out-of-bounds and misaligned accesses that a passing test can hide).
# OUTDIR receives: build.log, tests.log, tests.json (GoogleTest's report),
# bench.log (the table), bench.json, runtime.log, memcheck.log, summary.json (status,
# reason, counts, times).
# Exit status: 0 all passed; 1 a test or check failed; 2 no usable GPU (after the
# build, so the build is still checked); 3 the build failed; 4 bad usage; 5 the CUDA
# tests and benchmark passed but the prebuilt runtime step did not run (none, or
# built from other sources: summary.json says which).
# Time: every step's timeout is cut to what is left of GPU_CHECK_SECONDS (default
# 460), so the whole run ends within 8 minutes; memcheck runs only with a minute left.
#   JOBS=N (default: all cores), CUDA_ARCH=90, BUILD_DIR=build-gpu, BENCH_ARGS (e.g. --quick),
#   BUILD_TIMEOUT=seconds (a cold build on 16 cores is not yet timed; on a slow
#   machine set it and GPU_CHECK_SECONDS higher), GPU_CHECK_SECONDS=460
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The sources the prebuilt binaries are built from, as one hash (the GPU machine's
# copy of the tree may not be a git checkout): --prepare records it, the check
# compares, so binaries older than the tree are not run as if they were its own.
source_hash() {
  (cd "$root" && find actors kernels kvtiers runtime topology tests tools -type f \
    \( -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' -o -name CMakeLists.txt \) |
    LC_ALL=C sort | xargs sha1sum | sha1sum | cut -c1-16)
}

if [ "${1:-}" = "--prepare" ]; then
  src=/usr/src/googletest
  [ -f "$src/CMakeLists.txt" ] || { echo "gpu-check: $src not found (apt-get install libgtest-dev)" >&2; exit 4; }
  rm -rf "$root/.gpu-deps/googletest" && mkdir -p "$root/.gpu-deps" &&
    cp -r "$src" "$root/.gpu-deps/googletest" || exit 4
  echo "gpu-check: GoogleTest sources in .gpu-deps/googletest"
  # The runtime's GPU tests and the CLI, prebuilt: the GPU image lacks the packages
  # to build them. Only a CUDA build's (it links libcudart); glibc, libstdc++ and
  # cudart come from the GPU machine.
  pre=$root/.gpu-deps/prebuilt
  rm -rf "$pre"
  # The binaries of this tree: build/ brought up to date first (its hash below is the tree's).
  if [ -f "$root/build/build.ninja" ] && grep -q '^CMAKE_CUDA_COMPILER:' "$root/build/CMakeCache.txt" 2>/dev/null; then
    ninja -C "$root/build" test_runtime test_actors vericache >/dev/null || {
      echo "gpu-check: building test_runtime, test_actors and vericache in build/ failed" >&2; exit 4; }
  fi
  bins=("$root/build/tests/test_runtime" "$root/build/tools/vericache" "$root/build/tests/test_actors")
  if [ -x "${bins[0]}" ] && [ -x "${bins[1]}" ] && [ -x "${bins[2]}" ] && ldd "${bins[0]}" | grep -q libcudart; then
    mkdir -p "$pre/bin" "$pre/lib" || exit 4
    cp "${bins[@]}" "$pre/bin/" || exit 4
    ldd "${bins[@]}" | awk '$3 ~ /^\// {print $3}' | sort -u |
      grep -Ev '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libcudart|ld-linux[^/]*)\.so' |
      xargs -r cp -L -t "$pre/lib/" || exit 4
    commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
    git -C "$root" diff --quiet HEAD 2>/dev/null || commit="$commit+dirty"
    echo "$commit" >"$pre/commit"
    source_hash >"$pre/sources"
    echo "gpu-check: test_runtime, test_actors and vericache of $commit with $(ls "$pre/lib" | wc -l) libraries in $pre ($(du -sh "$pre" | cut -f1))"
  else
    echo "gpu-check: no CUDA build in build/ (tools/setup.sh with nvcc): the runtime step will be skipped"
  fi
  echo "gpu-check: carry .gpu-deps to the GPU machine"
  exit 0
fi
if [ $# -ne 1 ] || [ -z "$1" ] || [ "${1#-}" != "$1" ]; then
  echo "usage: tools/gpu-check.sh OUTDIR | --prepare" >&2
  exit 4
fi

out=$1
mkdir -p "$out" || exit 4
out=$(cd "$out" && pwd)
build=${BUILD_DIR:-$root/build-gpu}
jobs=${JOBS:-$(nproc)}
arch=${CUDA_ARCH:-90}
started=$(date +%s)
deadline=$((started + ${GPU_CHECK_SECONDS:-460}))
device=""
tests_passed=0 tests_failed=0 tests_skipped=0 tests_rc=-1 bench_rc=-1 memcheck_rc=-1
runtime_rc=-1 runtime_note="not run" runs_failed=""

say() { echo "gpu-check: $*" >&2; }
# limit DEFAULT RESERVE: a step's timeout, DEFAULT seconds at most, leaving RESERVE
# seconds of the deadline for the steps after it (at least 10).
limit() {
  local left=$((deadline - $(date +%s) - $2))
  [ "$left" -lt "$1" ] || left=$1
  [ "$left" -ge 10 ] || left=10
  echo "$left"
}
json_str() { printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g' | tr '\n' ' '; }
# The commit checked (the GPU machine's copy of the tree may not be a git checkout).
if commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null); then
  git -C "$root" diff --quiet HEAD 2>/dev/null || commit="$commit+dirty"
else
  commit=unknown
fi
# finish STATUS EXIT REASON: writes summary.json and exits.
finish() {
  local status=$1 code=$2 reason=$3
  cat >"$out/summary.json" <<EOF
{
  "status": "$status",
  "reason": "$(json_str "$reason")",
  "device": "$(json_str "$device")",
  "commit": "$commit",
  "cuda_arch": "$arch",
  "tests": {"exit": $tests_rc, "passed": $tests_passed, "failed": $tests_failed, "skipped": $tests_skipped},
  "bench_exit": $bench_rc,
  "runtime": {"exit": $runtime_rc, "note": "$(json_str "$runtime_note")", "cli_runs_failed": "$(json_str "${runs_failed# }")"},
  "memcheck_exit": $memcheck_rc,
  "seconds": $(( $(date +%s) - started ))
}
EOF
  say "$status: $reason (summary in $out/summary.json)"
  exit "$code"
}

# --- toolchain ---------------------------------------------------------------
nvcc=$(command -v nvcc || true)
[ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
[ -n "$nvcc" ] || finish build_failed 3 "nvcc not found (not on PATH, not /usr/local/cuda/bin/nvcc)"
command -v cmake >/dev/null || finish build_failed 3 "cmake not found"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
gtest=()
if [ -f "$root/.gpu-deps/googletest/CMakeLists.txt" ]; then
  gtest=(-DVC_GTEST_SOURCE_DIR="$root/.gpu-deps/googletest")
elif [ -f /usr/src/googletest/CMakeLists.txt ]; then
  gtest=(-DVC_GTEST_SOURCE_DIR=/usr/src/googletest)
fi

# --- build (only the CUDA targets and what they need) --------------------------
say "building test_cuda and vc_cuda_bench in $build ($jobs jobs, sm_$arch, $nvcc)"
{
  echo "== configure"
  timeout "$(limit 90 300)" cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DVC_CUDA_ONLY=ON -DVC_WERROR=OFF -DCMAKE_CUDA_COMPILER="$nvcc" \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" -DCMAKE_POLICY_VERSION_MINIMUM=3.5 "${gtest[@]}" &&
  echo "== build" &&
  timeout "${BUILD_TIMEOUT:-$(limit 300 150)}" cmake --build "$build" -j "$jobs" --target test_cuda vc_cuda_bench
} >"$out/build.log" 2>&1
build_rc=$?
if [ $build_rc -ne 0 ]; then
  tail -n 30 "$out/build.log" >&2
  finish build_failed 3 "the build failed (exit $build_rc; build.log)"
fi
test_bin=$build/tests/test_cuda
bench_bin=$build/tools/cuda_bench/vc_cuda_bench

# --- is there a GPU? -------------------------------------------------------------
probe=$(timeout 60 "$bench_bin" --probe 2>&1)
probe_rc=$?
if [ $probe_rc -ne 0 ]; then
  finish no_gpu 2 "no GPU: ${probe#no GPU: }"
fi
device=${probe#GPU: }
say "GPU: $device"

# --- CUDA tests ----------------------------------------------------------------
timeout "$(limit 120 100)" "$test_bin" --gtest_output=json:"$out/tests.json" >"$out/tests.log" 2>&1
tests_rc=$?
tests_passed=$(grep -c '^\[       OK \]' "$out/tests.log")
tests_failed=$(grep -c '^\[  FAILED  \] [a-z_0-9]*\.[a-z_0-9]* (' "$out/tests.log")
tests_skipped=$(grep -c '^\[  SKIPPED \] [a-z_0-9]*\.[a-z_0-9]* (' "$out/tests.log")
say "tests: $tests_passed passed, $tests_failed failed, $tests_skipped skipped (exit $tests_rc)"

# --- kernel benchmark --------------------------------------------------------------
# shellcheck disable=SC2086 # BENCH_ARGS is a word list
timeout "$(limit 150 20)" "$bench_bin" ${BENCH_ARGS:-} --json "$out/bench.json" >"$out/bench.log" 2>&1
bench_rc=$?
cat "$out/bench.log"

# --- the runtime on the GPU, prebuilt (--prepare) --------------------------------------
pre=$root/.gpu-deps/prebuilt
if [ ! -x "$pre/bin/test_runtime" ]; then
  runtime_note="no .gpu-deps/prebuilt (tools/gpu-check.sh --prepare after a CUDA build, and carry .gpu-deps)"
  echo "$runtime_note" >"$out/runtime.log"
elif [ "$(cat "$pre/sources" 2>/dev/null)" != "$(source_hash)" ]; then
  runtime_note="skipped: .gpu-deps/prebuilt ($(cat "$pre/commit" 2>/dev/null || echo unknown)) was built from other sources than this tree's (rebuild build/, then tools/gpu-check.sh --prepare)"
  echo "$runtime_note" >"$out/runtime.log"
elif missing=$(cudalib=$(dirname "$(dirname "$nvcc")") \
    LD_LIBRARY_PATH="$pre/lib:$cudalib/lib64:$cudalib/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    ldd "$pre/bin/"* 2>&1 | grep -E 'not found|version .* not found' | sort -u | tr '\n' ' ') &&
  [ -n "$missing" ]; then
  # Built on the CPU machine (its CUDA, glibc and libstdc++): an image with older
  # ones cannot load them, which is no test failure.
  runtime_note="skipped: the prebuilt binaries cannot be loaded here (ldd: $missing); rebuild them on this machine"
  echo "$runtime_note" >"$out/runtime.log"
else
  runtime_note="prebuilt at $(cat "$pre/commit" 2>/dev/null || echo unknown), checked tree at $commit"
  cudalib=$(dirname "$(dirname "$nvcc")")
  export LD_LIBRARY_PATH="$pre/lib:$cudalib/lib64:$cudalib/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  (
    echo "== $runtime_note"
    echo "== test_runtime --gtest_filter='device.*:cuda_device.*'"
    VC_TEST_MODEL_DIR="$root/models/tinycode" VC_TEST_DATA_DIR="$root/tests/data" \
      timeout "$(limit 150 150)" "$pre/bin/test_runtime" --gtest_filter='device.*:cuda_device.*'
    rc=$?
    if [ -x "$pre/bin/test_actors" ]; then
      echo "== test_actors --gtest_filter='cuda_engine.*'"
      VC_TEST_MODEL_DIR="$root/models/tinycode" VC_TEST_DATA_DIR="$root/tests/data" \
        timeout "$(limit 90 110)" "$pre/bin/test_actors" --gtest_filter='cuda_engine.*'
      rc2=$?
      [ $rc -eq 0 ] && rc=$rc2
    fi
    exit $rc
  ) >"$out/runtime.log" 2>&1
  runtime_rc=$?
  # run_bench NAME LIMIT RESERVE ARGS...: one CLI run into runtime.log; a failure
  # (a bad flag, a crash, 124: out of time) is listed in runs_failed.
  run_bench() {
    local name=$1 lim=$2 res=$3
    shift 3
    echo "== vericache $*" >>"$out/runtime.log"
    timeout "$(limit "$lim" "$res")" "$pre/bin/vericache" "$@" >>"$out/runtime.log" 2>&1
    local rc=$?
    [ $rc -eq 0 ] || runs_failed="$runs_failed $name:$rc"
  }
  for dev in cuda cpu; do
    run_bench "decode-$dev" 45 $([ $dev = cuda ] && echo 100 || echo 70) bench decode \
      --model "$root/models/tinycode" --device "$dev" --contexts 0 4096 --threads 2 \
      --decode-tokens 64 --repeats 3
  done
  # A verify pass's cost by row count, and the engine's rows (a), (b), (e) under one
  # budget, on the GPU (bundled model; the link simulated).
  run_bench rows 30 60 bench rows --model "$root/models/tinycode" --device cuda --context 4096 \
    --rows 1 4 16 33 64 --repeats 3
  run_bench throughput 60 5 bench throughput --model "$root/models/tinycode" --device cuda \
    --contexts 2048 --base-requests 2 --gen-tokens 32 --no-disk --configs a b e
  # What each mode holds on the device at the end of a run (weights, the cache's and
  # views' copies, the passes' buffers), each configuration in a process of its own.
  run_bench memory 40 5 bench memory --model "$root/models/tinycode" --device cuda --contexts 4096 \
    --ratios 4 --gen-tokens 16
  # The issue's real shape, in the time left: the bundled model scaled to Llama-3.1-8B
  # (16 GB of bf16 written to this machine's disk), (a) and (e) at 8K. Best effort:
  # running out of time here (124) is noted, not a failure; any other failure is.
  if [ $((deadline - $(date +%s))) -ge 240 ]; then
    scaled=$(mktemp -d "${TMPDIR:-/tmp}/vc-scaled-8b.XXXXXX")
    for step in scale throughput; do
      before=$runs_failed
      if [ $step = scale ]; then
        run_bench scale-8b 90 40 model scale --model "$root/models/tinycode" --shape llama-3.1-8b --out "$scaled"
      else
        run_bench throughput-8b 300 60 bench throughput --model "$scaled" --device cuda --contexts 8192 \
          --base-requests 1 --gen-tokens 16 --no-disk --configs a e
      fi
      case "$runs_failed" in
        "$before") ;;
        *":124") runs_failed=$before; echo "== ($step at the 8B shape ran out of time: not counted)" >>"$out/runtime.log"; break ;;
        *) break ;;
      esac
    done
    rm -rf "$scaled"
  else
    echo "== (under 240 s left: no run at the 8B shape)" >>"$out/runtime.log"
  fi
  say "runtime on the GPU: exit $runtime_rc (runtime.log); CLI runs failed:${runs_failed:- none}"
fi

# --- memcheck, in the time left ------------------------------------------------------
sanitizer=$(command -v compute-sanitizer || true)
[ -z "$sanitizer" ] && [ -x "$(dirname "$nvcc")/compute-sanitizer" ] && sanitizer=$(dirname "$nvcc")/compute-sanitizer
if [ -z "$sanitizer" ]; then
  echo "compute-sanitizer not found: memcheck skipped" >"$out/memcheck.log"
elif [ $((deadline - $(date +%s))) -lt 60 ]; then
  echo "under a minute left: memcheck skipped" >"$out/memcheck.log"
else
  timeout "$(limit 240 10)" "$sanitizer" --tool memcheck --error-exitcode 9 "$test_bin" \
    >"$out/memcheck.log" 2>&1
  memcheck_rc=$?
  # Some virtualized GPUs refuse the sanitizer ("Device not supported"): no result,
  # not an error of ours.
  if [ $memcheck_rc -ne 0 ] && grep -qi 'device not supported' "$out/memcheck.log"; then
    memcheck_rc=-2
    echo "gpu-check: compute-sanitizer does not support this device: memcheck gave no result" >>"$out/memcheck.log"
  fi
  say "memcheck: exit $memcheck_rc (124: ran out of time; 9: errors found)"
fi

if [ $tests_rc -ne 0 ] || [ "$tests_failed" -ne 0 ]; then
  finish failed 1 "CUDA tests failed (tests.log)"
fi
if [ "$tests_skipped" -ne 0 ]; then
  finish failed 1 "CUDA tests skipped on a GPU machine (tests.log)"
fi
if [ $runtime_rc -eq 0 ] && grep -Eq '^\[  SKIPPED \] cuda_(device|engine)\.' "$out/runtime.log"; then
  finish failed 1 "the runtime's GPU tests skipped on a GPU machine (runtime.log says why)"
fi
if [ $runtime_rc -gt 0 ]; then
  finish failed 1 "the runtime's GPU tests failed or could not run (exit $runtime_rc; runtime.log)"
fi
if [ $bench_rc -ne 0 ]; then
  finish failed 1 "the benchmark failed or a batch-invariance check failed (exit $bench_rc; bench.log)"
fi
if [ -n "$runs_failed" ]; then
  finish failed 1 "vericache runs on the GPU failed (name:exit,$runs_failed; runtime.log)"
fi
if [ $memcheck_rc -eq 9 ]; then
  finish failed 1 "compute-sanitizer memcheck found errors (memcheck.log)"
fi
if [ $runtime_rc -eq -1 ]; then
  finish partial 5 "the CUDA tests passed, but the runtime step did not run: $runtime_note"
fi
finish ok 0 "all CUDA tests passed; benchmark in bench.log / bench.json; memcheck exit $memcheck_rc"
