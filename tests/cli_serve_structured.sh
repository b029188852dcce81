#!/usr/bin/env bash
# cli_serve_structured.sh - structured output: every API's way of asking for
# a JSON schema, a JSON object or a GBNF grammar, from `moestream serve` and
# from `moestream run`. The model is a tiny one with random weights, which
# on its own never writes valid JSON: every reply that validates (Python's
# jsonschema, an independent implementation of the spec) is the grammar's
# doing. Also: streams equal whole replies, greedy replies are
# deterministic, the reply ends where the value ends (finish "stop"), and
# schemas or grammars that cannot be used are 400s that name the problem.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/server/lib_serve.sh"
need_jsonschema
tiny_model "$TMP/m.gguf" --seed 7
CT='Content-Type: application/json'
start_server st -m "$TMP/m.gguf" -c 2048
U=$(url st)
post() { curl -s -m 300 -H "$CT" "$U$1" -d "$2"; }
status() { curl -s -m 60 -o /dev/null -w '%{http_code}' -H "$CT" "$U$1" -d "$2"; }

# validate TEXT SCHEMA: TEXT is JSON valid under SCHEMA (JSON text)
validate() {
    python3 - "$1" "$2" <<'EOF'
import json, sys, jsonschema
text, schema = sys.argv[1], json.loads(sys.argv[2])
try:
    v = json.loads(text)
except ValueError as e:
    sys.exit(f"not JSON ({e}): {text!r}")
try:
    jsonschema.validate(v, schema)
except jsonschema.ValidationError as e:
    sys.exit(f"invalid: {e.message}: {text!r}")
EOF
}

PERSON='{"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":0,"maximum":120},"tags":{"type":"array","items":{"enum":["red","green","blue"]},"maxItems":3},"email":{"type":"string","maxLength":20},"born":{"type":"string","format":"date"},"nick":{"type":["string","null"],"maxLength":6}},"required":["name","age","tags"],"additionalProperties":false}'
MSG='"messages":[{"role":"user","content":"Describe a person as JSON."}],"thinking":false'

# ---- OpenAI chat: json_schema, several seeds, a random model
for seed in 1 2 3 4 5 6; do
    R=$(post /v1/chat/completions "{$MSG,\"seed\":$seed,\"temperature\":1.0,\"max_tokens\":600,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"person\",\"strict\":true,\"schema\":$PERSON}}}")
    C=$(jq -r '.choices[0].message.content' <<<"$R")
    check "chat json_schema, seed $seed: the reply is valid under the schema and ends with it" \
        'validate "$C" "$PERSON" && [ "$(jq -r .choices[0].finish_reason <<<"$R")" = stop ]'
done
check "without the format the same request is not JSON (the test can tell)" \
    '! post /v1/chat/completions "{$MSG,\"seed\":1,\"temperature\":1.0,\"max_tokens\":60}" | jq -r .choices[0].message.content | python3 -c "import json,sys; json.loads(sys.stdin.read())" 2>/dev/null'

# greedy: deterministic, and a stream's deltas add up to the whole reply
BODY="{$MSG,\"temperature\":0,\"max_tokens\":600,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\",\"schema\":$PERSON}}}"
A=$(post /v1/chat/completions "$BODY" | jq -r '.choices[0].message.content')
B=$(post /v1/chat/completions "$BODY" | jq -r '.choices[0].message.content')
S=$(curl -sN -m 300 -H "$CT" "$U/v1/chat/completions" -d "${BODY%\}},\"stream\":true}" |
    sed -n 's/^data: //p' | grep -v '^\[DONE\]' | jq -rj '.choices[0].delta.content // empty')
check "greedy: valid, the same twice, and the stream's text is the whole reply's" \
    'validate "$A" "$PERSON" && [ "$A" = "$B" ] && [ "$S" = "$A" ]'

# json_object: any JSON object
for seed in 11 12 13; do
    C=$(post /v1/chat/completions "{$MSG,\"seed\":$seed,\"max_tokens\":400,\"top_k\":5,\"response_format\":{\"type\":\"json_object\"}}" |
        jq -r '.choices[0].message.content')
    check "chat json_object, seed $seed: a JSON object (or cut at max_tokens)" \
        'validate "$C" "{\"type\":\"object\"}" || python3 -c "import sys; t=sys.argv[1].lstrip(); sys.exit(0 if t.startswith(\"{\") else 1)" "$C"'
done

# a schema with $defs and recursion, anyOf, const, a pattern, an integer range
TREE='{"$defs":{"node":{"type":"object","properties":{"id":{"type":"string","pattern":"^[A-Z]{2}-[0-9]{3}$"},"kind":{"const":"node"},"children":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["id","kind","children"],"additionalProperties":false}},"anyOf":[{"$ref":"#/$defs/node"},{"type":"integer","minimum":-5,"maximum":5}]}'
# (the nesting has no bound, so a random model may run to max_tokens: only
# whole replies can be validated)
n_whole=0
for seed in 21 22 23 24 25 26; do
    R=$(post /v1/chat/completions "{$MSG,\"seed\":$seed,\"temperature\":1.0,\"max_tokens\":1500,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"t\",\"schema\":$TREE}}}")
    [ "$(jq -r .choices[0].finish_reason <<<"$R")" = length ] && continue
    n_whole=$((n_whole + 1))
    C=$(jq -r '.choices[0].message.content' <<<"$R")
    check "recursive \$defs, anyOf, const, pattern, integer range, seed $seed: valid" 'validate "$C" "$TREE"'
done
check "most of those replies were whole" '[ $n_whole -ge 3 ]'

# ---- the other dialects
R=$(post /v1/messages "{\"model\":\"m\",\"max_tokens\":600,\"temperature\":1.0,\"messages\":[{\"role\":\"user\",\"content\":\"JSON please\"}],\"thinking\":{\"type\":\"disabled\"},\"output_config\":{\"format\":{\"type\":\"json_schema\",\"schema\":$PERSON}}}")
check "Anthropic output_config.format: the text block is valid, stop_reason end_turn" \
    'validate "$(jq -r ".content[] | select(.type==\"text\") | .text" <<<"$R")" "$PERSON" && [ "$(jq -r .stop_reason <<<"$R")" = end_turn ]'
R=$(post /v1/responses "{\"model\":\"m\",\"max_output_tokens\":600,\"temperature\":1.0,\"input\":\"JSON please\",\"reasoning\":{\"effort\":\"none\"},\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"p\",\"schema\":$PERSON}}}")
check "Responses text.format json_schema: the output text is valid" \
    'validate "$(jq -r "[.output[] | select(.type==\"message\") | .content[] | .text] | join(\"\")" <<<"$R")" "$PERSON"'
# llama.cpp's fields: json_schema and grammar, on chat and completions
C=$(post /v1/completions "{\"prompt\":\"The answer:\",\"max_tokens\":400,\"seed\":3,\"json_schema\":$PERSON}" | jq -r '.choices[0].text')
check "completions json_schema (llama.cpp's field): valid" 'validate "$C" "$PERSON"'
for seed in 1 2 3 4 5; do
    R=$(post /v1/completions "{\"prompt\":\"Yes or no?\",\"max_tokens\":50,\"seed\":$seed,\"temperature\":1.5,\"top_k\":0,\"top_p\":1,\"min_p\":0,\"grammar\":\"root ::= (\\\"yes\\\" | \\\"no\\\") \\\", \\\" [0-9]{1,2} \\\"%\\\"\"}")
    check "completions grammar (GBNF), seed $seed, no top_k (the whole mask): matches" \
        '[[ "$(jq -r .choices[0].text <<<"$R")" =~ ^(yes|no),\ [0-9]{1,2}%$ ]] && [ "$(jq -r .choices[0].finish_reason <<<"$R")" = stop ]'
done
C=$(post /v1/chat/completions "{$MSG,\"max_tokens\":100,\"seed\":9,\"grammar\":\"root ::= [a-c]{3} \\\"!\\\"\"}" | jq -r '.choices[0].message.content')
check "chat grammar (GBNF): matches" '[[ "$C" =~ ^[a-c]{3}!$ ]]'
# with tools a reply is the JSON or a tool-call block (the tool's own
# grammar then makes it a valid call: tests/cli_serve_tool_grammar.sh);
# logprobs stay the model's distribution and cover the text. A random
# model may run to max_tokens inside a string: only whole replies count.
n_json=0
for seed in 1 2 3 4 5 6; do
    R=$(post /v1/chat/completions "{$MSG,\"max_tokens\":600,\"seed\":$seed,\"temperature\":1.0,\"logprobs\":true,\"parallel_tool_calls\":false,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}},\"required\":[\"x\"]}}}],\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\",\"schema\":$PERSON}}}")
    C=$(jq -r .choices[0].message.content <<<"$R")
    F=$(jq -r .choices[0].finish_reason <<<"$R")
    if [ "$F" = length ]; then
        continue
    elif [ -n "$C" ] && [ "$C" != null ]; then
        n_json=$((n_json + 1))
        check "with tools, seed $seed: the answer is valid; logprobs are <= 0 and their bytes spell it" \
            'validate "$C" "$PERSON" && jq -e "[.choices[0].logprobs.content[].logprob] | all(. <= 0)" <<<"$R" >/dev/null &&
             python3 -c "import json,sys; r=json.loads(sys.argv[1]); b=bytes(x for e in r[\"choices\"][0][\"logprobs\"][\"content\"] for x in e[\"bytes\"]); assert b.decode() == r[\"choices\"][0][\"message\"][\"content\"]" "$R"'
    else
        check "with tools, seed $seed: no answer means a call of f, valid under its schema" \
            '[ "$F" = tool_calls ] && validate "$(jq -r .choices[0].message.tool_calls[0].function.arguments <<<"$R")" "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}},\"required\":[\"x\"],\"additionalProperties\":false}"'
    fi
done
check "with tools: some replies answered in the format" '[ $n_json -ge 2 ]'

# what the caller rules out stays out: the DSML marker without tools (here
# the greedy choice, a prompt full of it), EOS under ignore_eos once the
# grammar is complete; reasoning cannot end a reply that owes a format
R=$(post /v1/completions '{"prompt":"p11 ｜DSML｜ ｜DSML｜ ｜DSML｜","max_tokens":60,"temperature":0,"json_schema":{"type":"string","maxLength":8}}')
check "greedy under a format with the DSML marker the best token: a valid string" \
    'validate "$(jq -r .choices[0].text <<<"$R")" "{\"type\":\"string\",\"maxLength\":8}"'
R=$(post /v1/completions '{"prompt":"x","max_tokens":5,"ignore_eos":true,"grammar":"root ::= \"ok\""}')
check "ignore_eos with a finished grammar: the text, finish stop" \
    '[ "$(jq -r .choices[0].text <<<"$R")" = ok ] && [ "$(jq -r .choices[0].finish_reason <<<"$R")" = stop ]'
for seed in 1 2 3 4; do
    R=$(post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"Say YES\"}],\"max_tokens\":300,\"seed\":$seed,\"grammar\":\"root ::= \\\"YES\\\"\"}")
    check "thinking, seed $seed: the reply ends with the answer YES, or runs to max_tokens reasoning" \
        '[ "$(jq -r .choices[0].message.content <<<"$R")" = YES ] || [ "$(jq -r .choices[0].finish_reason <<<"$R")" = length ]'
done

# ---- what cannot be used is a 400 naming it
bad() { # name, endpoint, body, text the error must hold
    local r code body needle=$4
    r=$(curl -s -m 60 -w '\n%{http_code}' -H "$CT" "$U$2" -d "$3")
    code=${r##*$'\n'}
    body=${r%$'\n'*}
    check "400: $1" '[ "$code" = 400 ] && jq -r ".error.message" <<<"$body" | grep -qF -- "$needle"'
}
bad "a GBNF syntax error, with line and column" /v1/completions '{"prompt":"x","grammar":"root ::= \"a"}' "line 1, column"
bad "an undefined rule" /v1/completions '{"prompt":"x","grammar":"root ::= foo"}' "'foo' is used but never defined"
bad "left recursion" /v1/completions '{"prompt":"x","grammar":"root ::= root \"a\" | \"b\""}' "left-recursive"
bad "a \$ref to nowhere" /v1/chat/completions "{$MSG,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":{\"\$ref\":\"#/\$defs/nope\"}}}}" "nope"
bad "an unknown format type" /v1/chat/completions "{$MSG,\"response_format\":{\"type\":\"yaml\"}}" 'unknown format'
bad "grammar and json_schema together" /v1/completions '{"prompt":"x","grammar":"root ::= \"a\"","json_schema":{}}' "cannot both"
bad "a grammar that is not a string" /v1/completions '{"prompt":"x","grammar":5}' "'grammar' must be a string"
bad "a schema that is not an object" /v1/chat/completions "{$MSG,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":[1]}}}" "JSON Schema"
bad "a response_format type that is not a string" /v1/chat/completions "{$MSG,\"response_format\":{\"type\":5}}" "must be a string"
bad "with tools, a grammar error names the client's own line" /v1/chat/completions "{$MSG,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"grammar\":\"root ::= \\\"a\\\" |\\nx ::= (\"}" "line 2, column 3"
check "the server still answers after the 400s" \
    '[ "$(post /v1/completions "{\"prompt\":\"x\",\"max_tokens\":3,\"grammar\":\"root ::= \\\"ok\\\"\"}" | jq -r .choices[0].text)" = ok ]'
stop_server st

# ---- moestream run
echo "$PERSON" >"$TMP/person.json"
OUT=$("$BIN" run -m "$TMP/m.gguf" -p "A person:" -n 600 --seed 5 --json-schema-file "$TMP/person.json" 2>"$TMP/run.err")
check "run --json-schema-file: the output is valid (and ends there)" 'validate "$OUT" "$PERSON" && grep -q "stop: end of sentence" "$TMP/run.err"'
OUT=$("$BIN" run -m "$TMP/m.gguf" -p "A person:" -n 600 --seed 6 --temp 0 --json-schema "$PERSON" 2>/dev/null)
check "run --json-schema (greedy): valid" 'validate "$OUT" "$PERSON"'
OUT=$("$BIN" run -m "$TMP/m.gguf" -p "Count:" -n 50 --seed 2 --grammar 'root ::= [1-3]{2,4} "."' 2>/dev/null)
check "run --grammar: matches" '[[ "$OUT" =~ ^[1-3]{2,4}\.$ ]]'
OUT=$("$BIN" run -m "$TMP/m.gguf" -p "x" -n 5 --grammar 'root ::= ' --json-schema '{}' 2>&1)
check "run: two grammar options are refused" '[[ "$OUT" == *"give one of"* ]]'
OUT=$("$BIN" run -m "$TMP/m.gguf" -p "x" -n 5 --grammar 'root ::= "a' 2>&1); RC=$?
check "run: a bad grammar is a usage error (2) naming the option and the place, before the model opens" \
    '[ $RC = 2 ] && [[ "$OUT" == "moestream run: --grammar: line 1, column"* ]]'
OUT=$("$BIN" run -m "$TMP/m.gguf" -p "x" -n 5 --grammar-file "$TMP/nope.gbnf" 2>&1); RC=$?
check "run: a grammar file that cannot be read names the option" '[ $RC = 2 ] && [[ "$OUT" == *"--grammar-file: "*"nope.gbnf"* ]]'
OUT=$("$BIN" run -m "$TMP/m.gguf" -p "x" -n 5 --json-schema '{"type":' 2>&1)
check "run: a schema that is not JSON is an error" '[[ "$OUT" == *"--json-schema: not JSON"* ]]'
finish cli_serve_structured
