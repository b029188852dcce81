#!/usr/bin/env bash
# record-perplexity-oracle.sh - regenerates tests/data/oracle/perplexity.json:
# llama.cpp's llama-perplexity on tiny test models and a fixed text, the
# reference side of tests/cli_perplexity.sh.
#
# llama-perplexity is not part of node-llama-cpp's prebuilt binaries, so it
# is built here from the llama.cpp source node-llama-cpp 3.22.1 bundles
# (llama/gitRelease.bundle: release v0.5.0, the build the other oracle
# vectors come from), into $ORACLE_DIR/llama-ppl (a few minutes on 2 cores,
# once). Settings that make llama.cpp reproducible (tests/data/oracle/
# README.md): K and V cache F32, flash attention off, one sequence a batch.
#
# Models: `moestream mkmodel --preset tiny --seed 1 OPTS`, each quantized
# one also as its --f32-twin (exact math on the stored weights: the
# reference our --quality mode must meet; llama.cpp's run on the quantized
# file is its own quantized-activation path, the baseline for our fast mode).
# Text: the first 20000 bytes of bench/pride-and-prejudice-ch1-19.txt;
# -c 128 --chunks 4.
#
# usage: scripts/record-perplexity-oracle.sh BUILD_DIR
# env:   ORACLE_DIR (default ~/.cache/moestream/oracle; node-llama-cpp is
#        installed there with npm if absent), JOBS (build jobs, default nproc)
set -euo pipefail
BUILD=${1:?usage: $0 BUILD_DIR}
BIN=$(cd "$BUILD" && pwd)/moestream
[ -x "$BIN" ] || { echo "record: $BIN is not built" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$ROOT/tests/data/oracle/perplexity.json
ORACLE_DIR=${ORACLE_DIR:-$HOME/.cache/moestream/oracle}
NLC_VERSION=3.22.1
pkg=$ORACLE_DIR/node_modules/node-llama-cpp
if [ ! -f "$pkg/llama/gitRelease.bundle" ]; then
    echo "record: installing node-llama-cpp@$NLC_VERSION into $ORACLE_DIR (npm)"
    mkdir -p "$ORACLE_DIR"
    [ -f "$ORACLE_DIR/package.json" ] || echo '{"name": "moestream-oracle", "private": true}' >"$ORACLE_DIR/package.json"
    (cd "$ORACLE_DIR" && npm install --no-audit --no-fund --ignore-scripts --save-exact "node-llama-cpp@$NLC_VERSION")
fi
SRC=$ORACLE_DIR/llama-ppl
LP=$SRC/build/bin/llama-perplexity
if [ ! -x "$LP" ]; then
    [ -f "$SRC/CMakeLists.txt" ] || git -c advice.detachedHead=false clone -q "$pkg/llama/gitRelease.bundle" "$SRC"
    echo "record: building llama-perplexity in $SRC/build"
    cmake -S "$SRC" -B "$SRC/build" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF >"$SRC/cmake.log" 2>&1
    cmake --build "$SRC/build" --target llama-perplexity -j "${JOBS:-$(nproc)}" >"$SRC/build.log" 2>&1
fi
commit=$(git -C "$SRC" rev-parse --short HEAD)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/moestream-ppl-oracle.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
head -c 20000 "$ROOT/bench/pride-and-prejudice-ch1-19.txt" >"$WORK/text.txt"
ARGS="-c 128 -b 128 --chunks 4 -t 2 -ctk f32 -ctv f32 -fa off"
# run MODEL: {"ppl", "chunks": [...]} from llama-perplexity's output
run() {
    "$LP" -m "$1" -f "$WORK/text.txt" $ARGS >"$WORK/out.txt" 2>&1 ||
        { echo "record: llama-perplexity failed on $1:" >&2; tail -5 "$WORK/out.txt" >&2; exit 1; }
    python3 - "$WORK/out.txt" <<'EOF'
import json, re, sys
t = open(sys.argv[1]).read()
final = re.search(r"Final estimate: PPL = ([0-9.]+)", t)
# the running estimates "[k]x," give each chunk's own mean by difference
run = [float(x) for x in re.findall(r"\[\d+\]([0-9.]+),", t)]
print(json.dumps({"ppl": float(final.group(1)), "running": run}))
EOF
}
MODELS="f32|--experts-type f32 --dense-type f32
q8_0|--experts-type q8_0 --dense-type q8_0
ds4-mix|--ds4-mix"
entries=()
while IFS='|' read -r name opts; do
    "$BIN" mkmodel --preset tiny --seed 1 $opts -o "$WORK/$name.gguf" >/dev/null
    sha=$(sha256sum "$WORK/$name.gguf" | cut -d' ' -f1)
    llama=$(run "$WORK/$name.gguf")
    ref=$llama
    if [ "$name" != f32 ]; then
        "$BIN" mkmodel --preset tiny --seed 1 $opts --f32-twin -o "$WORK/$name.twin.gguf" >/dev/null
        ref=$(run "$WORK/$name.twin.gguf")
    fi
    entries+=("$(jq -n --arg n "$name" --arg o "--preset tiny --seed 1 $opts" --arg s "$sha" \
        --argjson r "$ref" --argjson l "$llama" '{($n): {mkmodel: $o, sha256: $s, ref: $r, llama: $l}}')")
    echo "record: $name: llama.cpp ref PPL $(jq .ppl <<<"$ref"), on the file $(jq .ppl <<<"$llama")"
done <<<"$MODELS"
printf '%s\n' "${entries[@]}" | jq -s --arg c "$commit" --arg a "$ARGS" '{
    llama_cpp: ("llama-perplexity, llama.cpp " + $c + " as bundled by node-llama-cpp 3.22.1"),
    command: ("llama-perplexity -m MODEL -f TEXT " + $a),
    text: "the first 20000 bytes of bench/pride-and-prejudice-ch1-19.txt",
    models: add}' >"$OUT"
echo "record: wrote $OUT"
