#!/usr/bin/env bash
# record-tokenizer-vectors.sh - regenerates tests/data/tokenizer/vectors-*.json,
# llama.cpp's token ids for tests/data/tokenizer/corpus.json on the two test
# vocabularies. test_tokenizer writes the vocab-only GGUFs it tests into its
# MS_TMPDIR (tok-tiny.gguf, tok-dsv3.gguf); this script runs it once (its
# comparison may fail: the vectors are what is being remade), then asks
# llama.cpp (node-llama-cpp 3.22.1, tests/oracle/record_tokens.mjs) for ids on
# exactly those files. Needs node >= 20, node-llama-cpp in ORACLE_DIR (see
# scripts/oracle.sh) and the DeepSeek V3 tokenizer (scripts/fetch-tokenizer-data.sh,
# run here).
#
# usage: scripts/record-tokenizer-vectors.sh BUILD_DIR
set -euo pipefail
BUILD=${1:?usage: $0 BUILD_DIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
"$ROOT/scripts/fetch-tokenizer-data.sh" >/dev/null
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
MS_SOURCE_DIR=$ROOT MS_TMPDIR=$TMP "$BUILD/test_tokenizer" >/dev/null 2>&1 || true
for v in tiny dsv3; do
    [ -f "$TMP/tok-$v.gguf" ] || { echo "record: $TMP/tok-$v.gguf was not written" >&2; exit 1; }
    node "$ROOT/tests/oracle/record_tokens.mjs" "$TMP/tok-$v.gguf" \
        "$ROOT/tests/data/tokenizer/corpus.json" "$ROOT/tests/data/tokenizer/vectors-$v.json" "$v"
done
