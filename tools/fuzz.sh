#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang, -fsanitize=fuzzer,address,
# undefined, into build-fuzz/, seeds a corpus from the repository's own files, and
# runs one target for SECONDS. A crash input is written to build-fuzz/crashes/TARGET/.
#   tools/fuzz.sh TARGET SECONDS [libFuzzer flags...]
#   tools/fuzz.sh list
# Targets: safetensors, config_json, tokenizer, batch_line, config_file.
# The corpus (build-fuzz/corpus/TARGET) persists between runs; the seeds are
# regenerated each run. Installs clang on demand (Debian's ships libFuzzer).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
targets=(safetensors config_json tokenizer batch_line config_file)
if [ "${1:-}" = list ] || [ $# -lt 2 ]; then
  echo "usage: tools/fuzz.sh TARGET SECONDS [libFuzzer flags]; targets: ${targets[*]}" >&2
  [ "${1:-}" = list ] && exit 0 || exit 2
fi
target=$1 seconds=$2
shift 2
[[ " ${targets[*]} " == *" $target "* ]] || { echo "fuzz.sh: unknown target '$target' (${targets[*]})" >&2; exit 2; }

if ! command -v clang++ >/dev/null; then
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends clang >/dev/null
fi
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
if [ ! -f "$build/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DVC_SANITIZE=fuzzer -DVC_WITH_CUDA=OFF >/dev/null
fi
cmake --build "$build" --target "fuzz_$target"

# Seeds from the repository (small: a few KB each). The first byte of a safetensors
# or tokenizer input picks the mode (see the target's source).
seeds=$build/seeds/$target corpus=$build/corpus/$target crashes=$build/crashes/$target
rm -rf "$seeds"
mkdir -p "$seeds" "$corpus" "$crashes"
python3 - "$root" "$target" "$seeds" <<'PY'
import glob, json, os, struct, sys
root, target, out = sys.argv[1:4]
n = 0
def seed(data):
    global n
    if isinstance(data, str): data = data.encode()
    n += 1
    open(os.path.join(out, f"seed{n:03d}"), "wb").write(data)
def small_safetensors(path, keep=4):
    """The file's first `keep` tensors, their data cut to at most 64 bytes each."""
    b = open(path, "rb").read()
    hlen = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + hlen]); data = b[8 + hlen:]
    new, blob = {}, b""
    for name, e in list((k, v) for k, v in h.items() if k != "__metadata__")[:keep]:
        a, z = e["data_offsets"]; chunk = data[a:z][:64]
        esz = {"F32": 4, "F16": 2, "BF16": 2}[e["dtype"]]; chunk = chunk[:len(chunk) // esz * esz]
        new[name] = {"dtype": e["dtype"], "shape": [len(chunk) // esz],
                     "data_offsets": [len(blob), len(blob) + len(chunk)]}
        blob += chunk
    if "__metadata__" in h: new["__metadata__"] = h["__metadata__"]
    hj = json.dumps(new).encode()
    return struct.pack("<Q", len(hj)) + hj + blob
models = [os.path.join(root, "models/tinycode")] + sorted(glob.glob(os.path.join(root, "tests/data/archs/*")))
if target == "safetensors":
    for f in sorted(glob.glob(os.path.join(root, "tests/data/archs/*/*.safetensors"))) + \
             [os.path.join(root, "models/tinycode/model.safetensors")]:
        seed(b"\0" + small_safetensors(f))
    for f in glob.glob(os.path.join(root, "tests/data/archs/*/model.safetensors.index.json")):
        seed(b"\1" + open(f, "rb").read())
    seed(b"\1" + json.dumps({"metadata": {}, "weight_map": {"x": "a.safetensors", "y": "a.safetensors",
                                                           "z": "b.safetensors"}}).encode())
elif target == "config_json":
    for m in models: seed(open(os.path.join(m, "config.json"), "rb").read())
elif target == "tokenizer":
    seed(b"\0" + open(os.path.join(root, "models/tinycode/tokenizer.json"), "rb").read())
    vis = json.load(open(os.path.join(root, "tests/data/visible.json")))
    for c in vis["tokenizer_cases"][:16]: seed("\1" + c["text"])
    seed("\1<|begin_of_text|>def f():\n\treturn 'ü 日本'<|end_of_text|>")
elif target == "batch_line":
    vis = json.load(open(os.path.join(root, "tests/data/visible.json")))
    for c in vis["cases"][:3]: seed(json.dumps({"id": c["name"], "prompt": c["prompt_text"], "max_tokens": 8}))
    seed(json.dumps({"prompt_ids": [1, 2, 3], "mode": "vericache", "compressor": "kivi", "ratio": 8,
                     "draft": "auto", "temperature": 0.7, "top_k": 40, "top_p": 0.9, "seed": 7,
                     "stop": ["\n\n"], "logprobs": True, "ignore_eos": False, "fold_every": 32}))
    seed(json.dumps({"id": 3, "prompt": "x", "mode": "lossy", "compressor": "snapkv",
                     "compressor_params": {"window": 8}}))
elif target == "config_file":
    for f in glob.glob(os.path.join(root, "configs/*.conf")): seed(open(f, "rb").read())
    seed("[generate]\nmax-tokens = 8\nseed = 18446744073709551615\nstop = [\"a\", 'b']\n"
         "draft = auto\nratio = 4.5 # comment\n[bench.decode]\ncontexts = [64, 128]\njson = true\n")
print(f"fuzz.sh: {n} seeds for {target}", file=sys.stderr)
PY

cd "$crashes"
echo "fuzz.sh: running fuzz_$target for ${seconds}s (crashes go to $crashes)" >&2
start=$(date +%s)
set +e
"$build/tests/fuzz/fuzz_$target" -max_total_time="$seconds" -print_final_stats=1 \
  -artifact_prefix="$crashes/" "$@" "$corpus" "$seeds"
rc=$?
set -e
echo "fuzz.sh: fuzz_$target exited $rc after $(( $(date +%s) - start ))s" >&2
exit $rc
