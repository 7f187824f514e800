#!/usr/bin/env bash
# Builds VeriCache with a sanitizer in its own build dir and runs the suite (CTest)
# under it, printing the time each step took.
#   tools/sanitize.sh address   # ASan + UBSan (UB aborts), build-asan/, every test
#   tools/sanitize.sh thread    # TSan, build-tsan/, every test, against a TSan-built CAF
#   tools/sanitize.sh all       # both
# Extra arguments go to ctest (e.g. -R tokenizer). SANITIZE_BUILD_ROOT moves the
# build dirs (default: the repository root). SANITIZE_FOLDERS="kernels model"
# builds and runs only those test folders (CI's time-boxed run).
#
# TSan and CAF: Debian's libcaf is not instrumented, so TSan could not see the
# happens-before of CAF's mailboxes and would report every value handed over in a
# message as a race. The thread mode therefore first builds CAF 0.17.6 itself with
# -fsanitize=thread into build-tsan/caf (tools/caf-tsan.sh; once, about 8 minutes on
# 2 cores) and links the project against it (the test binaries and the vericache
# binary the CLI tests spawn find it through their build RPATH; checked below).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mode=${1:-address}
shift || true
case $mode in
  address | thread) ;;
  all)
    rc=0
    "$0" address "$@" || rc=$?
    "$0" thread "$@" || rc=$?
    exit $rc
    ;;
  *) echo "usage: tools/sanitize.sh address|thread|all [ctest args]" >&2; exit 2 ;;
esac

# Packages (and nothing else) from setup.sh; the normal build is not needed.
SETUP_ONLY_PACKAGES=1 "$root/tools/setup.sh"
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

short=${mode/address/asan}
short=${short/thread/tsan}
build=${SANITIZE_BUILD_ROOT:-$root}/build-$short
targets=()
ctest_filter=()
folders=${SANITIZE_FOLDERS:-}
if [ -n "$folders" ]; then
  targets=(--target)
  for f in $folders; do targets+=("test_$f"); done
  ctest_filter=(-L "^($(echo "$folders" | tr ' ' '|'))\$")
fi

t0=$(date +%s)
caf_args=()
if [ "$mode" = thread ]; then
  caf=$("$root/tools/caf-tsan.sh" "$build/caf")
  caf_args=(-DCAF_INCLUDE_DIR="$caf/include" -DCAF_CORE_LIBRARY="$caf/lib/libcaf_core.so")
fi
if [ ! -f "$build/build.ninja" ] || [ ${#caf_args[@]} -gt 0 ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DVC_SANITIZE="$mode" \
    "${caf_args[@]}" >/dev/null
fi
cmake --build "$build" --parallel "$(nproc)" "${targets[@]}"
if [ "$mode" = thread ]; then
  # Every binary that links CAF must load the instrumented one, not Debian's.
  for bin in "$build"/tests/test_actors "$build"/tools/vericache "$build"/tools/vericache_embed_example; do
    [ -x "$bin" ] || continue
    lib=$(ldd "$bin" | awk '/libcaf_core/ {print $3}')
    if [[ $lib != "$caf/lib/"* ]]; then
      echo "sanitize.sh: $bin loads libcaf_core from '$lib', not the TSan build in $caf/lib" >&2
      exit 1
    fi
  done
fi
t1=$(date +%s)

# UB and ASan errors abort the test (and fail it); TSan fails a test that raced
# (exit code 66 at exit); leaks are checked (LeakSanitizer) at exit.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# die_after_fork=0: `bench memory` forks one child per row from a process that has
# threads (the signal watcher), and the child starts its own; TSan refuses that by
# default ("starting new threads after multi-threaded fork is not supported").
export TSAN_OPTIONS=${TSAN_OPTIONS:-second_deadlock_stack=1:history_size=4:die_after_fork=0}
set +e
(cd "$build" && ctest --output-on-failure -j "$(nproc)" "${ctest_filter[@]}" "$@")
rc=$?
set -e
t2=$(date +%s)
echo "sanitize.sh: $mode: build $((t1 - t0))s, suite $((t2 - t1))s, ctest exit $rc"
exit $rc
