#!/usr/bin/env bash
# Installs the npm packages the server tests use (the real client SDKs and the
# Jinja engine of scripts/record-chat-template.sh) into a cache folder outside
# the repository, pinned. Idempotent; prints the folder.
#   scripts/install-npm-test-deps.sh [DIR]   (default ~/.cache/moestream/npm)
set -euo pipefail
DIR=${1:-${MS_NPM_DIR:-$HOME/.cache/moestream/npm}}
PKGS=(openai@7.59.0 @anthropic-ai/sdk@1.14.0 @huggingface/jinja@0.5.11)
mkdir -p "$DIR"
cd "$DIR"
[ -f package.json ] || echo '{"name":"moestream-test-deps","private":true}' >package.json
ok=1
for p in "${PKGS[@]}"; do
    name=${p%@*}
    ver=${p##*@}
    got=$(node -p "try{require('./node_modules/$name/package.json').version}catch(e){''}" 2>/dev/null || true)
    [ "$got" = "$ver" ] || ok=0
done
if [ $ok -eq 0 ]; then
    npm install --silent --no-audit --no-fund "${PKGS[@]}" >&2
fi
echo "$DIR"
