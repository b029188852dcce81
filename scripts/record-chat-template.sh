#!/usr/bin/env bash
# Records the reference renderings of DeepSeek V4's chat template that
# tests/test_chat_template_ref.c compares our C renderer against. The template
# is the model's own (tokenizer_config.json), as llama.cpp ships it in
# models/templates/deepseek-ai-DeepSeek-V4.jinja; we take it from the
# llama.cpp source bundled in the node-llama-cpp npm package and render it
# with @huggingface/jinja (both from npm, into a cache outside the repo).
#   scripts/record-chat-template.sh [NPM_CACHE_DIR]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
NPM_DIR=${1:-${MS_NPM_DIR:-$HOME/.cache/moestream/npm}}
"$SRC/scripts/install-npm-test-deps.sh" "$NPM_DIR" >/dev/null
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
(cd "$WORK" && npm pack --silent node-llama-cpp@3.22.1 >/dev/null &&
    tar xzf node-llama-cpp-3.22.1.tgz package/llama/gitRelease.bundle &&
    git clone -q package/llama/gitRelease.bundle lc 2>/dev/null)
TPL="$WORK/lc/models/templates/deepseek-ai-DeepSeek-V4.jinja"
cp "$SRC/tests/server/render-reference.mjs" "$NPM_DIR/render-reference.mjs"
node "$NPM_DIR/render-reference.mjs" "$TPL" "$SRC/tests/data/chat_template/cases.json" \
    "$SRC/tests/data/chat_template"
sha256sum "$TPL" | sed "s|$WORK/lc/||" >"$SRC/tests/data/chat_template/TEMPLATE.sha256"
