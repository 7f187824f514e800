#!/usr/bin/env bash
# Builds CAF 0.17.6 (the version Debian ships and the project is written against) with
# ThreadSanitizer and installs it into PREFIX, so that a TSan build of the project can
# see the happens-before of CAF's mailboxes, reference counts and scheduler queues.
#   tools/caf-tsan.sh PREFIX      # e.g. build-tsan/caf; prints PREFIX when done
# Only libcaf_core is built (the only CAF library the project links: actors/CMakeLists.txt);
# no I/O, OpenSSL, OpenCL, Python, tools, examples or unit tests. Source: Debian's
# orig tarball, checked against its SHA-256 (`apt-get source` as a fallback), unpacked
# and built under PREFIX/../caf-build. Idempotent: a PREFIX that holds a finished
# install of the same version and flags is left alone. CAF_TSAN_JOBS sets the build
# parallelism (default 2).
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: tools/caf-tsan.sh PREFIX" >&2
  exit 2
fi
version=0.17.6
sha256=e2bf5bd243f08bb7d8adde197cfe3e6d71314ed3378fe0692f8932f4c3b3928c
url=http://deb.debian.org/debian/pool/main/a/actor-framework/actor-framework_${version}.orig.tar.gz
# CAF adds -std=c++11 only when the flags name no standard; Debian's build gets the
# same. -O2 -g as CAF's RelWithDebInfo, frame pointers for TSan's stacks.
cxxflags="-std=c++11 -fsanitize=thread -fno-omit-frame-pointer"
stamp_text="caf $version sha256 $sha256 flags $cxxflags RelWithDebInfo core-only"

mkdir -p "$1"
prefix=$(cd "$1" && pwd)
stamp=$prefix/.vc-caf-tsan
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamp_text" ] &&
  [ -f "$prefix/include/caf/all.hpp" ] && ls "$prefix"/lib*/libcaf_core.so >/dev/null 2>&1; then
  echo "$prefix"
  exit 0
fi
rm -f "$stamp"

work=$(dirname "$prefix")/caf-build
mkdir -p "$work"
tarball=$work/actor-framework_${version}.orig.tar.gz
have_hash() { [ -f "$tarball" ] && echo "$sha256  $tarball" | sha256sum -c --status; }
if ! have_hash; then
  rm -f "$tarball"
  echo "caf-tsan.sh: downloading $url" >&2
  if ! curl -sSfL --retry 2 -o "$tarball.part" "$url"; then
    rm -f "$tarball.part"
    echo "caf-tsan.sh: download failed; trying apt-get source" >&2
    (cd "$work" && apt-get source --download-only actor-framework="$version*" >&2) || true
  else
    mv "$tarball.part" "$tarball"
  fi
  if ! have_hash; then
    echo "caf-tsan.sh: no CAF $version source with SHA-256 $sha256 at $tarball" \
      "(download $url by hand, or add a deb-src entry for apt-get source)" >&2
    exit 1
  fi
fi

src=$work/actor-framework-$version
rm -rf "$src" "$work/build"
tar -xzf "$tarball" -C "$work"
[ -f "$src/CMakeLists.txt" ] || { echo "caf-tsan.sh: $tarball did not unpack to $src" >&2; exit 1; }

launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
cmake -S "$src" -B "$work/build" "${generator[@]}" "${launcher[@]}" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="$cxxflags" \
  -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread \
  -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread \
  -DCMAKE_INSTALL_PREFIX="$prefix" \
  -DCMAKE_INSTALL_LIBDIR=lib \
  -DCAF_NO_IO=yes -DCAF_NO_OPENSSL=yes -DCAF_NO_OPENCL=yes -DCAF_NO_PYTHON=yes \
  -DCAF_NO_TOOLS=yes -DCAF_NO_EXAMPLES=yes -DCAF_NO_UNIT_TESTS=yes \
  -DCAF_NO_SUMMARY=yes -DCAF_LOG_LEVEL=QUIET >&2
cmake --build "$work/build" -j "${CAF_TSAN_JOBS:-2}" >&2
cmake --install "$work/build" >&2
[ -f "$prefix/include/caf/all.hpp" ] && [ -f "$prefix/lib/libcaf_core.so" ] || {
  echo "caf-tsan.sh: the install in $prefix lacks include/caf/all.hpp or lib/libcaf_core.so" >&2
  exit 1
}
rm -rf "$src" "$work/build"
echo "$stamp_text" >"$stamp"
echo "$prefix"
