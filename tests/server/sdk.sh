#!/usr/bin/env bash
# sdk.sh - `moestream serve` driven by the real client SDKs from npm
# (openai, @anthropic-ai/sdk; installed by scripts/install-npm-test-deps.sh
# into a cache folder outside the repo): tests/server/sdk_test.mjs against a
# tiny mkmodel model and against a scripted-output server for tool calls.
# Exits 77 (CTest: skipped, with a visible message) when node or the
# packages are missing.
#   bash tests/server/sdk.sh BIN TMPDIR
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib_serve.sh"
NPM_DIR=${MS_NPM_DIR:-$HOME/.cache/moestream/npm}
if ! command -v node >/dev/null || [ ! -d "$NPM_DIR/node_modules/openai" ] ||
    [ ! -d "$NPM_DIR/node_modules/@anthropic-ai/sdk" ]; then
    echo "SKIP: the SDK tests need node and the npm packages in $NPM_DIR" \
        "(run scripts/install-npm-test-deps.sh)"
    exit 77
fi
tiny_model "$TMP/m.gguf" --seed 5
cat >"$TMP/script.in" <<'SCRIPT'
Need the weather.</think>Checking.

<｜DSML｜tool_calls>
<｜DSML｜invoke name="get_weather">
<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
</｜DSML｜invoke>
</｜DSML｜tool_calls>
---8<---
Done.</think>Sunny in Paris.
SCRIPT
printf '%s' "$(cat "$TMP/script.in")" >"$TMP/script.txt" # no final newline
start_server plain -m "$TMP/m.gguf" -c 2048 --api-key test-key --alias tiny
MOESTREAM_SERVE_SCRIPT="$TMP/script.txt" start_server scripted -m "$TMP/m.gguf" --api-key test-key
if MS_NPM_DIR="$NPM_DIR" PLAIN_URL=$(url plain) SCRIPTED_URL=$(url scripted) \
    timeout 900 node "$SRC/tests/server/sdk_test.mjs"; then
    echo "ok: SDK suite"
else
    fail "SDK suite"
    tail -n 20 "$TMP/plain.log" "$TMP/scripted.log"
fi
stop_server plain
stop_server scripted
finish server_sdk
