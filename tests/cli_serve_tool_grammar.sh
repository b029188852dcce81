#!/usr/bin/env bash
# cli_serve_tool_grammar.sh - tool calls that follow the tools' schemas. The
# model is a tiny one with random weights: once a call is forced open
# (tool_choice), what it writes is noise, so every call that parses into
# arguments valid under its tool's schema (Python's jsonschema, an
# independent implementation) is the tools' grammar's doing; so is a custom
# tool's text that follows its Lark or regex grammar. A server
# started with --no-tool-grammar shows that the test can tell: the same
# requests then give no valid call.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/server/lib_serve.sh"
need_jsonschema
tiny_model "$TMP/m.gguf" --seed 7
CT='Content-Type: application/json'
post() { curl -s -m 300 -H "$CT" "$U$1" -d "$2"; }

WEATHER='{"type":"object","properties":{"city":{"type":"string","maxLength":10},"unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1,"maximum":14}},"required":["city"]}'
FLAGS='{"type":"object","properties":{"flags":{"type":"array","items":{"$ref":"#/$defs/flag"},"maxItems":3},"on":{"type":"boolean"},"level":{"type":"integer","minimum":0,"maximum":5},"note":{"anyOf":[{"type":"string","maxLength":6},{"type":"null"}]}},"required":["flags","on"],"additionalProperties":false,"$defs":{"flag":{"enum":["a","b","c"]}}}'
TOOLS="[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":$WEATHER}},{\"type\":\"function\",\"function\":{\"name\":\"set_flags\",\"parameters\":$FLAGS}}]"
ATOOLS="[{\"name\":\"get_weather\",\"input_schema\":$WEATHER},{\"name\":\"set_flags\",\"input_schema\":$FLAGS}]"
MSG='"messages":[{"role":"user","content":"Call a tool."}]'

# calls_valid REPLY: an OpenAI chat reply whose finish is tool_calls and
# whose every call names a tool and has arguments valid under its schema
calls_valid() {
    python3 - "$1" "$WEATHER" "$FLAGS" <<'EOF'
import json, sys, jsonschema
r = json.loads(sys.argv[1])
schemas = {"get_weather": json.loads(sys.argv[2]), "set_flags": json.loads(sys.argv[3])}
c = r["choices"][0]
if c["finish_reason"] != "tool_calls":
    sys.exit(f"finish {c['finish_reason']}: {c['message']}")
calls = c["message"].get("tool_calls") or []
if not calls:
    sys.exit("no calls")
for t in calls:
    f = t["function"]
    try:
        jsonschema.validate(json.loads(f["arguments"]), schemas[f["name"]])
    except (KeyError, ValueError, jsonschema.ValidationError) as e:
        sys.exit(f"{f['name']}: {e}: {f['arguments']}")
EOF
}

start_server tg -m "$TMP/m.gguf" -c 2048
U=$(url tg)
for seed in 1 2 3 4 5 6; do
    R=$(post /v1/chat/completions "{$MSG,\"tools\":$TOOLS,\"tool_choice\":\"required\",\"parallel_tool_calls\":false,\"thinking\":false,\"seed\":$seed,\"temperature\":1.0,\"max_tokens\":400}")
    check "tool_choice required, one call, seed $seed: a call of a listed tool, valid under its schema" 'calls_valid "$R"'
done
for seed in 7 8 9; do
    R=$(post /v1/chat/completions "{$MSG,\"tools\":$TOOLS,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"set_flags\"}},\"parallel_tool_calls\":false,\"thinking\":false,\"seed\":$seed,\"temperature\":1.0,\"max_tokens\":400}")
    check "tool_choice set_flags, seed $seed: valid (its \$ref enum, the boolean, the anyOf with null)" \
        'calls_valid "$R" && [ "$(jq -r .choices[0].message.tool_calls[0].function.name <<<"$R")" = set_flags ]'
done
# several calls a block: each valid; a random model may run on to the limit
n_whole=0
for seed in 11 12 13 14; do
    R=$(post /v1/chat/completions "{$MSG,\"tools\":$TOOLS,\"tool_choice\":\"required\",\"thinking\":false,\"top_k\":8,\"seed\":$seed,\"max_tokens\":600}")
    [ "$(jq -r .choices[0].finish_reason <<<"$R")" = length ] && continue
    n_whole=$((n_whole + 1))
    check "parallel calls, seed $seed: every call valid" 'calls_valid "$R"'
done
check "most blocks with parallel calls were whole" '[ $n_whole -ge 2 ]'
# greedy: the same call twice
BODY="{$MSG,\"tools\":$TOOLS,\"tool_choice\":\"required\",\"parallel_tool_calls\":false,\"thinking\":false,\"temperature\":0,\"max_tokens\":400}"
A=$(post /v1/chat/completions "$BODY")
B=$(post /v1/chat/completions "$BODY")
check "greedy: a valid call, the same twice" \
    'calls_valid "$A" && [ "$(jq -c .choices[0].message.tool_calls[0].function <<<"$A")" = "$(jq -c .choices[0].message.tool_calls[0].function <<<"$B")" ]'
# Anthropic: tool_choice any, the input validated
for seed in 21 22; do
    R=$(post /v1/messages "{\"model\":\"x\",\"max_tokens\":400,\"temperature\":1.0,\"seed\":$seed,\"tools\":$ATOOLS,\"tool_choice\":{\"type\":\"any\",\"disable_parallel_tool_use\":true},$MSG}")
    check "messages, tool_choice any, seed $seed: a tool_use whose input is valid" \
        'python3 -c "
import json, sys, jsonschema
r = json.loads(sys.argv[1]); s = {\"get_weather\": json.loads(sys.argv[2]), \"set_flags\": json.loads(sys.argv[3])}
u = [b for b in r[\"content\"] if b[\"type\"] == \"tool_use\"]
assert r[\"stop_reason\"] == \"tool_use\" and u, r
for b in u: jsonschema.validate(b[\"input\"], s[b[\"name\"]])
" "$R" "$WEATHER" "$FLAGS"'
done
# custom tools (Responses): the text follows the tool's Lark or regex grammar
LARK=$'start: "BEGIN" LF ("+" /[a-z ]{0,8}/ LF)~1..3 "END"\n%import common.LF'
CUSTOM=$(jq -cn --arg l "$LARK" '[{"type":"custom","name":"patch","format":{"type":"grammar","syntax":"lark","definition":$l}},{"type":"custom","name":"version","format":{"type":"grammar","syntax":"regex","definition":"v[0-9]{1,3}(\\.[0-9]{1,3})?"}}]')
for seed in 31 32 33; do
    for tool in patch version; do
        R=$(post /v1/responses "{\"model\":\"x\",\"input\":\"Edit.\",\"tools\":$CUSTOM,\"tool_choice\":{\"type\":\"custom\",\"name\":\"$tool\"},\"parallel_tool_calls\":false,\"reasoning\":{\"effort\":\"none\"},\"max_output_tokens\":400,\"temperature\":1.0,\"seed\":$seed}")
        IN=$(jq -r '[.output[] | select(.type == "custom_tool_call")][0].input // "NONE"' <<<"$R")
        RE=$([ $tool = patch ] && echo '^BEGIN\n(\+[a-z ]{0,8}\n){1,3}END$' || echo '^v[0-9]{1,3}(\.[0-9]{1,3})?$')
        check "custom tool $tool, seed $seed: its text follows its grammar" \
            'python3 -c "import re,sys; sys.exit(0 if re.fullmatch(sys.argv[2], sys.argv[1]) else 1)" "$IN" "$RE"'
    done
done
check "the log gives the tool-call masks' cost" 'grep -q "tool-call masks [0-9.]* ms/token" "$TMP/tg.log"'
# a tool whose schema cannot be enforced takes any arguments, logged; the
# request is served
R=$(post /v1/chat/completions "{$MSG,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"q\",\"parameters\":{\"type\":\"object\",\"properties\":{\"z\":{\"\$ref\":\"#/nowhere\"}}}}}],\"thinking\":false,\"max_tokens\":5}")
check "a schema the grammar cannot enforce: served, and logged" \
    '[ "$(jq -r .object <<<"$R")" = chat.completion ] && grep -q "tool .q.: its schema cannot be enforced" "$TMP/tg.log"'
stop_server tg

# the same requests without the grammar: the random model's calls do not parse
start_server free -m "$TMP/m.gguf" -c 2048 --no-tool-grammar
U=$(url free)
n_valid=0
for seed in 1 2 3 4 5 6; do
    R=$(post /v1/chat/completions "{$MSG,\"tools\":$TOOLS,\"tool_choice\":\"required\",\"parallel_tool_calls\":false,\"thinking\":false,\"seed\":$seed,\"temperature\":1.0,\"max_tokens\":400}")
    calls_valid "$R" >/dev/null 2>&1 && n_valid=$((n_valid + 1))
done
for seed in 31 32 33; do
    R=$(post /v1/responses "{\"model\":\"x\",\"input\":\"Edit.\",\"tools\":$CUSTOM,\"tool_choice\":{\"type\":\"custom\",\"name\":\"patch\"},\"parallel_tool_calls\":false,\"reasoning\":{\"effort\":\"none\"},\"max_output_tokens\":400,\"temperature\":1.0,\"seed\":$seed}")
    IN=$(jq -r '[.output[] | select(.type == "custom_tool_call")][0].input // "NONE"' <<<"$R")
    python3 -c "import re,sys; sys.exit(0 if re.fullmatch(sys.argv[2], sys.argv[1]) else 1)" "$IN" '^BEGIN\n(\+[a-z ]{0,8}\n){1,3}END$' &&
        n_valid=$((n_valid + 1))
done
check "--no-tool-grammar: the same requests give no valid call or patch (the test can tell)" '[ $n_valid -eq 0 ]'
check "--no-tool-grammar: no masks" '! grep -q "tool-call masks" "$TMP/free.log"'
stop_server free
finish cli_serve_tool_grammar
