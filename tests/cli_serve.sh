#!/usr/bin/env bash
# cli_serve.sh - `moestream serve` driven with curl on loopback, on a tiny
# mkmodel model: health/models/metrics, every endpoint streaming and not,
# usage with cached tokens (prefix reuse), API keys, 40+ malformed requests
# (status and JSON error shape), the bounded queue (503 + Retry-After), SSE
# keepalives while queued, client disconnects cancelling generation,
# scripted tool calls in each API's shape with exact replay, and SIGTERM
# exiting 0. Every wait is bounded.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/server/lib_serve.sh"
command -v curl >/dev/null && command -v jq >/dev/null || { echo "FAIL: curl and jq are needed (scripts/install-deps.sh)"; exit 1; }
tiny_model "$TMP/m.gguf" --seed 3
CT='Content-Type: application/json'

start_server main -m "$TMP/m.gguf" -c 1024 --alias tiny-test --max-body 30000
U=$(url main)
post() { curl -s -m 300 -H "$CT" "$U$1" -d "$2"; }

# ---- GET endpoints
check "health" '[ "$(curl -s -m 5 $U/health | jq -r .status)" = ok ]'
check "models lists the alias" '[ "$(curl -s -m 5 $U/v1/models | jq -r ".data[0].id")" = tiny-test ]'

# a second server on the same port: one clear error, status 1, no raw
# libmicrohttpd line (it would name port 0)
PORT=${U##*:}
timeout 60 "$BIN" serve -m "$TMP/m.gguf" -c 256 --port "$PORT" >/dev/null 2>"$TMP/busy.err"
RC=$?
check "a busy port fails with status 1" '[ "$RC" -eq 1 ]'
check "a busy port: one error line from moestream" 'grep -q "cannot listen on 127.0.0.1:$PORT: Address already in use" "$TMP/busy.err" && ! grep -qi "failed to bind" "$TMP/busy.err"'

# ---- chat completions
R=$(post /v1/chat/completions '{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello"}],"max_tokens":8,"seed":1,"ignore_eos":true}')
check "chat: object and finish" '[ "$(jq -r .object <<<"$R")" = chat.completion ] && [ "$(jq -r ".choices[0].finish_reason" <<<"$R")" != null ]'
check "chat: usage" '[ "$(jq -r .usage.prompt_tokens <<<"$R")" -gt 5 ] && [ "$(jq -r .usage.completion_tokens <<<"$R")" -ge 1 ] && jq -e ".usage.prompt_tokens_details.cached_tokens >= 0" <<<"$R" >/dev/null'
check "chat: thinking on by default gives reasoning_content, never markup" \
    'jq -e ".choices[0].message.reasoning_content != null" <<<"$R" >/dev/null && ! grep -q "<think>\|</think>" <<<"$(jq -r ".choices[0].message.content" <<<"$R")"'
R=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"Hello"}],"max_tokens":6,"seed":1,"reasoning_effort":"none"}')
check "chat: reasoning_effort none: no reasoning" 'jq -e ".choices[0].message.reasoning_content == null" <<<"$R" >/dev/null'
# the same seed twice gives the same text
A=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"Seeded"}],"max_tokens":8,"seed":7,"temperature":1}' | jq -c .choices[0].message)
B=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"Seeded"}],"max_tokens":8,"seed":7,"temperature":1}' | jq -c .choices[0].message)
check "chat: a seed repeats" '[ "$A" = "$B" ]'
S=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"Hello"}],"max_tokens":6,"stream":true,"stream_options":{"include_usage":true},"seed":2,"ignore_eos":true}')
check "chat stream: role chunk, [DONE], usage chunk" \
    'grep -q "\"role\":\"assistant\"" <<<"$S" && [ "$(grep . <<<"$S" | tail -n 1)" = "data: [DONE]" ] && grep "^data: {" <<<"$S" | tail -n 1 | sed "s/^data: //" | jq -e ".usage.total_tokens > 0 and (.choices | length) == 0" >/dev/null'
check "chat stream: one finish_reason" '[ "$(grep -c "\"finish_reason\":\"length\"" <<<"$S")" = 1 ]'

# ---- prefix reuse: the second turn extends the first
M1='[{"role":"user","content":"First question about the sea."}]'
R1=$(post /v1/chat/completions "{\"messages\":$M1,\"max_tokens\":6,\"seed\":3,\"reasoning_effort\":\"none\"}")
ANS=$(jq -c .choices[0].message.content <<<"$R1")
P1=$(jq .usage.prompt_tokens <<<"$R1")
R2=$(post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"First question about the sea.\"},{\"role\":\"assistant\",\"content\":$ANS},{\"role\":\"user\",\"content\":\"And the sky?\"}],\"max_tokens\":4,\"reasoning_effort\":\"none\"}")
# (the random model's answer is not valid UTF-8, so the client's copy differs
# from the live text: the snapshot before the generation prompt's last token
# serves; the exact-replay check below covers a whole-session extension)
check "prefix reuse: cached tokens >= first prompt - 1 ($P1)" '[ "$(jq .usage.prompt_tokens_details.cached_tokens <<<"$R2")" -ge $((P1 - 1)) ]'

# an unrelated prompt (a completion: an agent's side request) replaces the
# session; the states it held are kept in memory (--kv-ram-mb, on by
# default), so the first conversation's turn comes back from there with
# the greedy text of a whole prefill. Without them (--kv-ram-mb 0) the
# snapshot, which shares the session's compressed rows, is stale: the turn
# is prefilled whole, correctly, and the metrics say so.
metric() { curl -s -m 5 "$U/metrics" | awk -v k="moestream_$1" '$1 == k {print $2}'; }
# of reply $R (chat or Responses): the cached prompt tokens, and the tokens
# the live session holds after it (its prompt plus its completion)
cached() { jq '.usage.prompt_tokens_details.cached_tokens // .usage.input_tokens_details.cached_tokens' <<<"$R"; }
live_after() { jq '(.usage.prompt_tokens // .usage.input_tokens) + (.usage.completion_tokens // .usage.output_tokens)' <<<"$R"; }
T3='[{"role":"user","content":"First question about the sea."},{"role":"assistant","content":'"$ANS"'},{"role":"user","content":"And the sky?"}]'
T3="{\"messages\":$T3,\"max_tokens\":4,\"temperature\":0,\"reasoning_effort\":\"none\"}"
ZEBRA='{"prompt":"Zebras graze while the river runs","max_tokens":3,"ignore_eos":true}'
SR0=$(metric snapshot_restores_total)
FP0=$(metric full_prefills_total)
RR0=$(metric ram_restores_total)
post /v1/completions "$ZEBRA" >/dev/null
R3=$(post /v1/chat/completions "$T3")
check "kept in memory: the turn after a side request reuses its prompt ($(jq .usage.prompt_tokens_details.cached_tokens <<<"$R3") of $(jq .usage.prompt_tokens <<<"$R3"))" \
    '[ "$(jq .usage.prompt_tokens_details.cached_tokens <<<"$R3")" -ge $(( $(jq .usage.prompt_tokens <<<"$R3") - 1 )) ]'
check "kept in memory: one restore, one full prefill (the side request's), states counted" \
    '[ "$(metric ram_restores_total)" = $((RR0 + 1)) ] && [ "$(metric full_prefills_total)" = $((FP0 + 1)) ] && [ "$(metric snapshot_restores_total)" = "$SR0" ] && [ "$(metric ram_states)" -ge 2 ] && [ "$(metric ram_bytes)" -gt 0 ] && [ "$(metric ram_bytes)" -le "$(metric ram_budget_bytes)" ]'
check "kept in memory: logged" 'grep -q "restored [0-9]* tokens kept in memory" "$TMP/main.log"'
start_server noram -m "$TMP/m.gguf" -c 1024 --kv-ram-mb 0
U=$(url noram)
post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"First question about the sea.\"}],\"max_tokens\":2,\"reasoning_effort\":\"none\"}" >/dev/null
post /v1/chat/completions "$T3" >/dev/null
SR0=$(metric snapshot_restores_total)
FP0=$(metric full_prefills_total)
post /v1/completions "$ZEBRA" >/dev/null
R3N=$(post /v1/chat/completions "$T3")
check "--kv-ram-mb 0: stale snapshot, the turn is answered, prefilled whole" \
    '[ "$(jq -r .choices[0].finish_reason <<<"$R3N")" != null ] && [ "$(jq .usage.prompt_tokens <<<"$R3N")" = "$(jq .usage.prompt_tokens <<<"$R3")" ] && [ "$(jq .usage.prompt_tokens_details.cached_tokens <<<"$R3N")" = 0 ]'
check "--kv-ram-mb 0: not restored, two full prefills, no states" \
    '[ "$(metric snapshot_restores_total)" = "$SR0" ] && [ "$(metric full_prefills_total)" = $((FP0 + 2)) ] && [ "$(metric ram_states)" = 0 ] && [ "$(metric ram_restores_total)" = 0 ]'
check "kept in memory: the same greedy text as the whole prefill" \
    '[ "$(jq -c .choices[0].message <<<"$R3")" = "$(jq -c .choices[0].message <<<"$R3N")" ]'
stop_server noram
U=$(url main)

# a marker typed in a message has the bytes of the snapshot's real marker
# (the session before the generation prompt's "<｜Assistant｜>"): it must stay
# text, so nothing is reused past it
post /v1/chat/completions '{"messages":[{"role":"user","content":"Marker test"}],"max_tokens":3,"temperature":0,"reasoning_effort":"none"}' >/dev/null
SR0=$(metric snapshot_restores_total)
R4=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"Marker test<｜Assistant｜>"}],"max_tokens":3,"temperature":0,"reasoning_effort":"none"}')
check "typed marker: no reuse past it, no snapshot restore" \
    '[ "$(jq .usage.prompt_tokens_details.cached_tokens <<<"$R4")" = 0 ] && [ "$(metric snapshot_restores_total)" = "$SR0" ]'

# ---- completions
R=$(post /v1/completions '{"prompt":"Once upon a time","max_tokens":5,"seed":1,"ignore_eos":true}')
check "completions" '[ "$(jq -r .object <<<"$R")" = text_completion ] && [ "$(jq .usage.completion_tokens <<<"$R")" -ge 1 ]'
S=$(post /v1/completions '{"prompt":"Once","max_tokens":3,"stream":true,"ignore_eos":true}')
check "completions stream" 'grep -q "text_completion" <<<"$S" && grep -q "data: \[DONE\]" <<<"$S"'

# ---- Anthropic messages
R=$(post /v1/messages '{"model":"x","max_tokens":6,"ignore_eos":true,"system":"Be brief.","messages":[{"role":"user","content":"Hi"}]}')
check "messages" '[ "$(jq -r .type <<<"$R")" = message ] && [ "$(jq -r .stop_reason <<<"$R")" = max_tokens ] && jq -e ".usage.input_tokens > 0" <<<"$R" >/dev/null'
R=$(post /v1/messages '{"model":"x","max_tokens":6,"ignore_eos":true,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":[{"type":"text","text":"Hi"}]}]}')
check "messages: thinking block first" '[ "$(jq -r ".content[0].type" <<<"$R")" = thinking ]'
S=$(post /v1/messages '{"model":"x","max_tokens":5,"ignore_eos":true,"stream":true,"messages":[{"role":"user","content":"Hi"}]}')
check "messages stream: event order" \
    '[ "$(grep "^event:" <<<"$S" | head -n 1)" = "event: message_start" ] && [ "$(grep "^event:" <<<"$S" | tail -n 1)" = "event: message_stop" ] && grep -q "event: message_delta" <<<"$S" && grep -q "content_block_start" <<<"$S"'
R=$(post /v1/messages/count_tokens '{"model":"x","messages":[{"role":"user","content":"Hi there"}]}')
check "count_tokens" '[ "$(jq .input_tokens <<<"$R")" -gt 2 ]'
# output_config.format is rendered as OpenAI's response_format (the schema in the prompt)
RF=$(post /v1/messages/count_tokens '{"model":"x","output_config":{"format":{"type":"json_schema","schema":{"type":"object","properties":{"title":{"type":"string"}}}},"effort":"high"},"messages":[{"role":"user","content":"Hi there"}]}')
check "output_config.format: the schema is in the prompt" '[ "$(jq .input_tokens <<<"$RF")" -gt $(( $(jq .input_tokens <<<"$R") + 10 )) ]'
# images, files and audio (a text-only model) stand in the prompt as a
# placeholder, wherever they come: user content, tool results, Codex's
# view_image output; a text document is its text
R=$(post /v1/messages/count_tokens '{"model":"x","messages":[{"role":"user","content":[{"type":"text","text":"Look"}]}]}')
RI=$(post /v1/messages/count_tokens '{"model":"x","messages":[{"role":"user","content":[{"type":"text","text":"Look"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}]}]}')
check "messages: an image block stands as a placeholder" '[ "$(jq .input_tokens <<<"$RI")" -gt $(( $(jq .input_tokens <<<"$R") + 5 )) ]'
R=$(post /v1/messages '{"model":"x","max_tokens":2,"messages":[{"role":"user","content":"Read it"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Read","input":{"file_path":"a.png"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}]},{"type":"document","source":{"type":"text","media_type":"text/plain","data":"plain words"}}]}]}')
check "messages: an image in a tool result and a text document are answered" '[ "$(jq -r .type <<<"$R")" = message ]'
R=$(post /v1/responses '{"model":"x","max_output_tokens":2,"input":[{"role":"user","content":"see"},{"type":"function_call","call_id":"c1","name":"view_image","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":[{"type":"input_image","image_url":"data:image/png;base64,iVBORw0KGgo="}]}]}')
check "responses: an input_image tool output is answered" '[ "$(jq -r .object <<<"$R")" = response ]'
R=$(post /v1/chat/completions '{"max_tokens":2,"messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]}]}')
check "chat: an image_url part is answered" '[ "$(jq -r .object <<<"$R")" = chat.completion ]'
# Responses' text.format (Codex's --output-schema) likewise, and echoed in the response
R=$(post /v1/responses '{"model":"x","input":"Hi there","max_output_tokens":1,"tools":null}')
check "responses: tools null echoes as []" '[ "$(jq -c .tools <<<"$R")" = "[]" ]'
RF=$(post /v1/responses '{"model":"x","input":"Hi there","max_output_tokens":1,"text":{"format":{"type":"json_schema","name":"out","strict":true,"schema":{"type":"object","properties":{"title":{"type":"string"}},"required":["title"],"additionalProperties":false}}}}')
check "responses text.format: the schema is in the prompt, the format echoed" \
    '[ "$(jq .usage.input_tokens <<<"$RF")" -gt $(( $(jq .usage.input_tokens <<<"$R") + 10 )) ] && [ "$(jq -r .text.format.name <<<"$RF")" = out ]'

# ---- Responses
R=$(post /v1/responses '{"model":"x","instructions":"Be brief.","input":"Hi","max_output_tokens":6,"ignore_eos":true}')
check "responses" '[ "$(jq -r .object <<<"$R")" = response ] && [ "$(jq -r .status <<<"$R")" = incomplete ] && jq -e ".usage.output_tokens == 6" <<<"$R" >/dev/null'
S=$(post /v1/responses '{"model":"x","input":[{"role":"user","content":[{"type":"input_text","text":"Hi"}]}],"max_output_tokens":4,"ignore_eos":true,"stream":true,"reasoning":{"effort":"none"}}')
check "responses stream: lifecycle" \
    '[ "$(grep "^event:" <<<"$S" | head -n 1)" = "event: response.created" ] && grep -q "event: response.output_text.delta" <<<"$S" && [ "$(grep "^event:" <<<"$S" | tail -n 1)" = "event: response.incomplete" ]'

# ---- metrics
check "metrics" 'curl -s -m 5 $U/metrics | grep -q "^moestream_requests_total{endpoint=\"chat_completions\"} [1-9]" && curl -s -m 5 $U/metrics | grep -q "^moestream_cached_prompt_tokens_total [1-9]"'

# ---- malformed requests: status and an error body in the API's shape
LONG=$(head -c 3000 /dev/zero | tr '\0' 'a' | sed 's/a/word /g')
bad=0
bad_req() { # STATUS METHOD PATH BODY [what]
    local want=$1 method=$2 path=$3 body=$4 out code
    out=$(curl -s -m 30 -X "$method" -H "$CT" -w '\n%{http_code}' "$U$path" --data-binary "$body")
    code=$(tail -n 1 <<<"$out")
    out=$(sed '$d' <<<"$out")
    if [ "$code" != "$want" ]; then fail "malformed ${5:-$body}: status $code, want $want"; return; fi
    if [[ $path == /v1/messages* ]]; then
        jq -e '.type == "error" and (.error.type | type == "string") and (.error.message | type == "string")' <<<"$out" >/dev/null ||
            { fail "malformed ${5:-$body}: not an Anthropic error: $out"; return; }
    else
        jq -e '(.error.message | type == "string") and (.error.type | type == "string")' <<<"$out" >/dev/null ||
            { fail "malformed ${5:-$body}: not an OpenAI error: $out"; return; }
    fi
    bad=$((bad + 1))
}
C=/v1/chat/completions
bad_req 400 POST $C '' "empty body"
bad_req 400 POST $C '{"messages":[' "truncated JSON"
bad_req 400 POST $C '[]' "array body"
bad_req 400 POST $C 'null' "null body"
bad_req 400 POST $C "$(printf '{"messages":[{"role":"user","content":"\xff\xfe"}]}')" "invalid UTF-8"
bad_req 400 POST $C '{"model":"x"}' "no messages"
bad_req 400 POST $C '{"messages":"hi"}'
bad_req 400 POST $C '{"messages":[]}'
bad_req 400 POST $C '{"messages":[1]}'
bad_req 400 POST $C '{"messages":[{"content":"x"}]}' "no role"
bad_req 400 POST $C '{"messages":[{"role":"wizard","content":"x"}]}'
bad_req 400 POST $C '{"messages":[{"role":5,"content":"x"}]}'
bad_req 400 POST $C '{"messages":[{"role":"user","content":5}]}'
bad_req 400 POST $C '{"messages":[{"role":"user","content":[{"type":"video_url","video_url":{"url":"x"}}]}]}'
bad_req 400 POST $C '{"messages":[{"role":"user","content":[{"type":"text"}]}]}'
bad_req 400 POST $C '{"messages":[{"role":"user","content":"x"}],"temperature":"hot"}'
bad_req 400 POST $C '{"messages":[{"role":"user","content":"x"}],"temperature":-1}'
bad_req 400 POST $C '{"messages":[{"role":"user","content":"x"}],"top_p":2}'
bad_req 400 POST $C '{"messages":[{"role":"user","content":"x"}],"max_tokens":0}'
bad_req 400 POST $C '{"messages":[{"role":"user","content":"x"}],"max_tokens":1e300}'
bad_req 400 POST $C '{"messages":[{"role":"user","content":"x"}],"max_tokens":99999999999999999999999}' "huge integer"
bad_req 400 POST $C '{"messages":[{"role":"user","content":"x"}],"n":0}'
bad_req 400 POST $C '{"messages":[{"role":"user","content":"x"}],"stream":"yes"}'
bad_req 400 POST $C '{"messages":[{"role":"user","content":"x"}],"stop":5}'
bad_req 400 POST $C '{"messages":[{"role":"user","content":"x"}],"stop":["a",1]}'
bad_req 400 POST $C '{"messages":[{"role":"user","content":"x"}],"tools":"x"}'
bad_req 400 POST $C '{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]}'
bad_req 400 POST $C '{"messages":[{"role":"assistant","content":"","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"not json"}}]}]}'
bad_req 400 POST $C '{"messages":[{"role":"user","content":"x"}],"seed":"x"}'
bad_req 400 POST $C '{"messages":[{"role":"user","content":"x"}],"stream_options":5}'
bad_req 400 POST $C '{"messages":[{"role":"user","content":"x"}],"reasoning_effort":"extreme"}'
bad_req 400 POST $C '{"model":5,"messages":[{"role":"user","content":"x"}]}'
bad_req 400 POST $C "{\"messages\":[{\"role\":\"user\",\"content\":\"$LONG\"}]}" "prompt longer than the context"
# the shapes agents act on: OpenAI's code, Anthropic's "prompt is too long" message
R=$(post $C "{\"messages\":[{\"role\":\"user\",\"content\":\"$LONG\"}]}")
check "too long (OpenAI): invalid_request_error, code context_length_exceeded" \
    'jq -e ".error.type == \"invalid_request_error\" and .error.code == \"context_length_exceeded\"" <<<"$R" >/dev/null'
R=$(post /v1/messages "{\"model\":\"x\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"$LONG\"}]}")
check "too long (Anthropic): invalid_request_error, prompt is too long: N tokens > 1023 maximum" \
    'jq -e ".error.type == \"invalid_request_error\"" <<<"$R" >/dev/null && jq -r .error.message <<<"$R" | grep -Eiq "prompt is too long[^0-9]*[0-9]+ tokens? > 1023"'
bad_req 400 POST /v1/messages '{"model":"x","messages":[{"role":"user","content":"x"}]}' "messages without max_tokens"
bad_req 400 POST /v1/messages '{"model":"x","max_tokens":5,"messages":[{"role":"tool","content":"x"}]}'
bad_req 400 POST /v1/messages '{"model":"x","max_tokens":5,"thinking":{"type":"maybe"},"messages":[{"role":"user","content":"x"}]}'
bad_req 400 POST /v1/messages '{"model":"x","max_tokens":5,"messages":[{"role":"user","content":[{"type":"video"}]}]}'
bad_req 400 POST /v1/messages '{"model":"x","max_tokens":-3,"messages":[{"role":"user","content":"x"}]}'
bad_req 400 POST /v1/messages/count_tokens '{"model":"x"}' "count_tokens without messages"
bad_req 400 POST /v1/messages '{"model":"x","max_tokens":4,"output_config":3,"messages":[{"role":"user","content":"x"}]}' "output_config not an object"
bad_req 400 POST /v1/messages '{"model":"x","max_tokens":4,"output_config":{"format":"json"},"messages":[{"role":"user","content":"x"}]}' "output_config.format not an object"
bad_req 400 POST /v1/messages '{"model":"x","max_tokens":4,"output_config":{"format":{"type":"json_schema"}},"messages":[{"role":"user","content":"x"}]}' "output_config.format without a schema"
bad_req 400 POST /v1/messages '{"model":"x","max_tokens":4,"output_config":{"format":{}},"messages":[{"role":"user","content":"x"}]}' "output_config.format without a type"
bad_req 400 POST /v1/messages '{"model":"x","max_tokens":4,"output_config":{"effort":"bogus"},"messages":[{"role":"user","content":"x"}]}' "output_config.effort unknown"
bad_req 400 POST /v1/responses '{"model":"x"}' "responses without input"
bad_req 400 POST /v1/responses '{"model":"x","input":[{"type":"teleport"}]}'
bad_req 400 POST /v1/responses '{"model":"x","input":"hi","previous_response_id":"resp_1"}'
bad_req 400 POST /v1/responses '{"model":"x","input":"hi","text":{"format":{"type":"json_schema","name":"s"}}}' "text.format json_schema without a schema"
bad_req 400 POST /v1/responses '{"model":"x","input":"hi","text":{"format":{"type":"yaml"}}}' "text.format of an unknown type"
bad_req 400 POST /v1/completions '{"prompt":5}'
bad_req 404 GET /v1/nothing '' "unknown GET"
bad_req 404 POST /v1/unknown '{}' "unknown POST"
bad_req 405 DELETE /v1/models '' "DELETE"
bad_req 405 GET /v1/chat/completions '' "GET on a POST endpoint"
bad_req 405 POST /v1/models '{}' "POST on a GET endpoint"
bad_req 413 POST $C "$(head -c 40000 /dev/zero | tr '\0' ' ')" "body over --max-body"
check "malformed requests answered with the right status and a JSON error ($bad)" '[ $bad -ge 40 ]'
check "server alive after malformed requests" '[ "$(curl -s -m 5 $U/health | jq -r .status)" = ok ]'

# ---- client disconnect cancels generation at once: each client goes away
# once its request runs; the generation then stops far short of its limit
# (the context caps it at about 1010 tokens: each must stop before 900).
# Counted in the log and the metrics, not timed (the machine may be loaded:
# a slower machine only makes the count smaller).
before=$(curl -s -m 5 $U/metrics | awk '/^moestream_requests_cancelled_total/ {print $2}')
DREQ='{"messages":[{"role":"user","content":"long"}],"max_tokens":20000,"ignore_eos":true,"reasoning_effort":"none"'
for mode in true false; do
    curl -s -N -m 300 -H "$CT" $U/v1/chat/completions -d "$DREQ,\"stream\":$mode}" >/dev/null &
    c=$!
    wait_busy true || fail "the generation never ran"
    kill $c 2>/dev/null
    wait $c 2>/dev/null
    wait_busy false || fail "the engine never went idle after a disconnect"
done
wait_metric moestream_requests_cancelled_total $((before + 2)) || fail "the disconnects were not counted"
after=$(curl -s -m 5 $U/metrics | awk '/^moestream_requests_cancelled_total/ {print $2}')
check "disconnects cancelled both generations ($before -> $after)" '[ "$after" -ge $((before + 2)) ]'
check "a disconnect is not logged as a server warning" '! grep -q "warning: serve: http" "$TMP/main.log"'
NC=$(grep "finish cancelled" "$TMP/main.log" | sed -n 's/.*, \([0-9]*\) generated in.*/\1/p' | tr '\n' ' ')
check "both stopped early (generated: $NC)" \
    '[ "$(wc -w <<<"$NC")" -ge 2 ] && ( for g in $NC; do [ "$g" -lt 900 ] || exit 1; done )'
check "the engine is idle again" '[ "$(curl -s -m 5 $U/health | jq -r .busy)" = false ]'
stop_server main

# ---- API key, bounded queue, keepalives while queued
start_server small -m "$TMP/m.gguf" -c 2048 --api-key sekret --max-queue 1 --keepalive 0.2 --max-body 30000
U=$(url small)
check "api key: none -> 401" '[ "$(curl -s -m 5 -o /dev/null -w "%{http_code}" $U/v1/models)" = 401 ]'
check "api key: Bearer" '[ "$(curl -s -m 5 -o /dev/null -w "%{http_code}" -H "Authorization: Bearer sekret" $U/v1/models)" = 200 ]'
check "api key: x-api-key" '[ "$(curl -s -m 5 -o /dev/null -w "%{http_code}" -H "x-api-key: sekret" $U/v1/models)" = 200 ]'
check "api key: wrong key on a POST -> 401 Anthropic shape" \
    '[ "$(curl -s -m 5 -H "x-api-key: nope" -H "$CT" $U/v1/messages -d "{}" | jq -r .error.type)" = authentication_error ]'
K=(-H "Authorization: Bearer sekret" -H "$CT")
# long enough to outlast several keepalive periods on a fast machine (250
# tokens once took under 0.2 s, and the queued stream saw no keepalive)
LONGREQ='{"messages":[{"role":"user","content":"go"}],"max_tokens":1500,"reasoning_effort":"none","ignore_eos":true}'
# waits (bounded, 120 s) until /health reports busy and QUEUED waiting requests
wait_health() {
    for _ in $(seq 1 1200); do
        curl -s -m 5 -H "Authorization: Bearer sekret" $U/health | jq -e ".busy and .queued == $1" >/dev/null && return 0
        sleep 0.1
    done
    return 1
}
curl -s -m 300 "${K[@]}" $U/v1/chat/completions -d "$LONGREQ" -o "$TMP/q1.json" &
q1=$!
wait_health 0 || fail "the first request never ran"
curl -s -m 300 -N "${K[@]}" $U/v1/chat/completions -d '{"messages":[{"role":"user","content":"go"}],"max_tokens":3,"stream":true,"ignore_eos":true}' -o "$TMP/q2.sse" &
q2=$!
wait_health 1 || fail "the second request never queued"
code=$(curl -s -m 30 -D "$TMP/q3.h" -o "$TMP/q3.json" -w '%{http_code}' "${K[@]}" $U/v1/chat/completions -d "$LONGREQ")
check "queue full -> 503 with Retry-After and a JSON error" '[ "$code" = 503 ] && grep -qi "^retry-after:" "$TMP/q3.h" && jq -e .error.message "$TMP/q3.json" >/dev/null'
wait $q1 $q2
check "the running request finished" '[ "$(jq .usage.completion_tokens "$TMP/q1.json")" = 1500 ]'
check "keepalive comments while queued, then the stream" 'grep -q "^: keepalive" "$TMP/q2.sse" && grep -q "data: \[DONE\]" "$TMP/q2.sse"'

# ---- SIGTERM during a generation: the request ends with 503 "server
# shutting down" (not a cut-short answer that reads as finished), and so
# does a stream, with an error event; exit status 0
curl -s -m 300 "${K[@]}" $U/v1/chat/completions -d "$LONGREQ" -o "$TMP/t.json" -w '%{http_code}' >"$TMP/t.code" &
t=$!
wait_health 0 || fail "the request before SIGTERM never ran"
stop_server small
wait $t
check "SIGTERM: the running request got 503 server shutting down" \
    '[ "$(cat "$TMP/t.code")" = 503 ] && jq -e ".error.message | test(\"shutting down\")" "$TMP/t.json" >/dev/null'
start_server small -m "$TMP/m.gguf" -c 2048 --api-key sekret
U=$(url small)
curl -s -N -m 300 "${K[@]}" $U/v1/chat/completions -d "${LONGREQ%\}},\"stream\":true}" -o "$TMP/t.sse" &
t=$!
wait_health 0 || fail "the stream before SIGTERM never ran"
for _ in $(seq 1 100); do grep -q '"content"' "$TMP/t.sse" 2>/dev/null && break; sleep 0.1; done
stop_server small
wait $t
check "SIGTERM: a running stream ends with an error event, no [DONE]" \
    'grep -q "shutting down" "$TMP/t.sse" && ! grep -q "\[DONE\]" "$TMP/t.sse"'
check "SIGTERM: the log tells the stop from a client's cancel" 'grep -q "finish cancelled (server shutting down)" "$TMP/small.log"'

# ---- scripted output: tool calls in each API's shape, exact replay
cat >"$TMP/script.txt" <<'SCRIPT'
Need the weather.</think>Checking.

<｜DSML｜tool_calls>
<｜DSML｜invoke name="get_weather">
<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
</｜DSML｜invoke>
</｜DSML｜tool_calls>
---8<---
Done.</think>Sunny.
SCRIPT
MOESTREAM_SERVE_SCRIPT="$TMP/script.txt" start_server tools -m "$TMP/m.gguf"
U=$(url tools)
TOOLS='[{"type":"function","function":{"name":"get_weather","description":"Weather for a city","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]}}}]'
# first_turn Q: a chat request asking Q with the tools; sets R (the reply),
# MSG (its message), ID (its first call's id) and LIVE (the tokens the live
# session then holds). result_turn Q: the same conversation with that
# call's result; sets R.
first_turn() {
    R=$(post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"$1\"}],\"tools\":$TOOLS}")
    MSG=$(jq -c .choices[0].message <<<"$R")
    ID=$(jq -r .choices[0].message.tool_calls[0].id <<<"$R")
    LIVE=$(live_after)
}
result_turn() {
    R=$(post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"$1\"},$MSG,{\"role\":\"tool\",\"tool_call_id\":\"$ID\",\"content\":\"sunny\"}],\"tools\":$TOOLS}")
}
first_turn "Weather in Paris?"
check "tools chat: reasoning, content, one call, finish tool_calls" \
    'jq -e ".choices[0].finish_reason == \"tool_calls\" and .choices[0].message.reasoning_content == \"Need the weather.\" and .choices[0].message.content == \"Checking.\" and .choices[0].message.tool_calls[0].function.name == \"get_weather\" and (.choices[0].message.tool_calls[0].function.arguments | fromjson) == {\"city\":\"Paris\",\"days\":3}" <<<"$R" >/dev/null'
result_turn "Weather in Paris?"
check "exact replay: the tool result turn reuses the whole live session (>= $LIVE tokens)" \
    '[ "$(cached)" -ge "$LIVE" ] && [ "$(jq -r .choices[0].message.content <<<"$R")" = Sunny. ]'
first_turn "Weather in Paris?"
MSG=$(jq -c 'del(.reasoning_content)' <<<"$MSG")
result_turn "Weather in Paris?"
check "a client that drops reasoning_content: the turn's reasoning is restored, the whole live session reused ($(cached) >= $LIVE)" \
    '[ "$(cached)" -ge "$LIVE" ]'
first_turn "Weather in Paris?"
MSG=$(jq -c '.tool_calls[0].function.arguments = "{\"city\":\"Rome\",\"days\":3}"' <<<"$MSG")
result_turn "Weather in Paris?"
check "a call edited under its id is rendered from its JSON, not replayed ($(cached) < $LIVE)" \
    '[ "$(cached)" -lt "$LIVE" ]'
S=$(post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}],\"tools\":$TOOLS,\"stream\":true}")
check "tools chat stream: a tool_calls delta, no markup in any delta" \
    'grep -q "\"tool_calls\":\[{\"index\":0" <<<"$S" && ! grep -q "DSML" <<<"$S" && grep -q "\"finish_reason\":\"tool_calls\"" <<<"$S"'
post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"max_tokens":3}' >/dev/null # script step 2
ATOOLS='[{"name":"get_weather","description":"Weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}]'
R=$(post /v1/messages "{\"model\":\"x\",\"max_tokens\":200,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":100},\"tools\":$ATOOLS,\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}]}")
check "tools messages: thinking, text, tool_use; stop_reason tool_use" \
    'jq -e "[.content[].type] == [\"thinking\",\"text\",\"tool_use\"] and .stop_reason == \"tool_use\" and .content[2].input.city == \"Paris\"" <<<"$R" >/dev/null'
post /v1/messages '{"model":"x","max_tokens":3,"messages":[{"role":"user","content":"x"}]}' >/dev/null
S=$(post /v1/messages "{\"model\":\"x\",\"max_tokens\":200,\"stream\":true,\"tools\":$ATOOLS,\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}]}")
check "tools messages stream: tool_use block with input_json_delta" \
    'grep -q "\"type\":\"tool_use\"" <<<"$S" && grep -q "input_json_delta" <<<"$S" && grep -q "\"stop_reason\":\"tool_use\"" <<<"$S" && ! grep -q "DSML" <<<"$S"'
post /v1/messages '{"model":"x","max_tokens":3,"messages":[{"role":"user","content":"x"}]}' >/dev/null
RT='[{"type":"function","name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}]'
S=$(post /v1/responses "{\"model\":\"x\",\"input\":\"Weather?\",\"tools\":$RT,\"stream\":true}")
check "tools responses stream: function_call item and arguments events" \
    'grep -q "event: response.function_call_arguments.done" <<<"$S" && grep -q "\"type\":\"function_call\"" <<<"$S" && grep -q "event: response.completed" <<<"$S" && ! grep -q "DSML" <<<"$S"'
post /v1/completions '{"prompt":"x","max_tokens":2}' >/dev/null # script step 2
R=$(post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}],\"tools\":$TOOLS,\"tool_choice\":\"none\"}")
check "tool_choice none: a call the model writes anyway is dropped, finish stop" \
    'jq -e ".choices[0].finish_reason == \"stop\" and (.choices[0].message.tool_calls == null) and .choices[0].message.content == \"Checking.\"" <<<"$R" >/dev/null && grep -q "with no tools offered (dropped)" "$TMP/tools.log"'
bad_req 400 POST /v1/messages '{"model":"x","max_tokens":5,"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"bogus"},"messages":[{"role":"user","content":"w"}]}' "an unknown Anthropic tool_choice type"
bad_req 400 POST /v1/chat/completions '{"messages":[{"role":"user","content":"w"}],"tools":[{"type":"function","function":{"name":"f","description":5}}]}' "a chat tool's non-string description"
bad_req 400 POST /v1/messages '{"model":"x","max_tokens":5,"tools":[{"type":5,"name":"f","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"w"}]}' "an Anthropic tool's non-string type"
stop_server tools

# namespaced and custom (free-form) tools: a call of each goes back in the
# client's shape (name + namespace; custom_tool_call with its text), and
# the history that carries them back renders as the live session holds it
cat >"$TMP/script_ns.txt" <<'SCRIPT'
Two calls.</think>
<｜DSML｜tool_calls>
<｜DSML｜invoke name="agents.spawn_agent">
<｜DSML｜parameter name="message" string="true">say hi</｜DSML｜parameter>
</｜DSML｜invoke>
<｜DSML｜invoke name="apply_patch">
<｜DSML｜parameter name="input" string="true">*** Begin Patch
+hello "x"
*** End Patch</｜DSML｜parameter>
</｜DSML｜invoke>
</｜DSML｜tool_calls>
---8<---
Done.</think>Patched.
SCRIPT
MOESTREAM_SERVE_SCRIPT="$TMP/script_ns.txt" start_server ns -m "$TMP/m.gguf"
U=$(url ns)
NT='[{"type":"function","name":"exec_command","parameters":{"type":"object","properties":{"cmd":{"type":"string"}}}},{"type":"namespace","name":"agents","description":"Sub-agents.","tools":[{"type":"function","name":"spawn_agent","parameters":{"type":"object","properties":{"message":{"type":"string"}}}}]},{"type":"custom","name":"apply_patch","description":"Edit files.","format":{"type":"grammar","syntax":"lark","definition":"start: line+"}},{"type":"web_search"}]'
R=$(post /v1/responses "{\"model\":\"x\",\"input\":\"go\",\"tools\":$NT}")
LIVE=$(live_after)
check "responses: a namespaced call (name + namespace) and a custom_tool_call with its text" \
    'jq -e "[.output[1].type, .output[1].name, .output[1].namespace, (.output[1].arguments | fromjson | .message)] == [\"function_call\", \"spawn_agent\", \"agents\", \"say hi\"] and [.output[2].type, .output[2].name, .output[2].input] == [\"custom_tool_call\", \"apply_patch\", \"*** Begin Patch\n+hello \\\"x\\\"\n*** End Patch\"]" <<<"$R" >/dev/null'
IN=$(jq -c '.output as $o | [{"role":"user","content":"go"}] + $o + [{"type":"function_call_output","call_id":$o[1].call_id,"output":"spawned"},{"type":"custom_tool_call_output","call_id":$o[2].call_id,"output":"ok"}]' <<<"$R")
R=$(post /v1/responses "{\"model\":\"x\",\"input\":$IN,\"tools\":$NT}")
check "responses: the results turn reuses the whole live session ($(cached) >= $LIVE)" \
    '[ "$(cached)" -ge "$LIVE" ] && [ "$(jq -r .output[-1].content[0].text <<<"$R")" = Patched. ]'
S=$(post /v1/responses "{\"model\":\"x\",\"input\":\"go\",\"tools\":$NT,\"stream\":true}")
check "responses stream: custom_tool_call_input events, the namespace in the items" \
    'grep -q "event: response.custom_tool_call_input.done" <<<"$S" && grep -q "\"type\":\"custom_tool_call\"" <<<"$S" && grep -q "\"namespace\":\"agents\"" <<<"$S" && ! grep -q "DSML" <<<"$S"'
post /v1/completions '{"prompt":"x","max_tokens":2}' >/dev/null # script step 2
R=$(post /v1/responses "{\"model\":\"x\",\"input\":\"go\",\"tools\":$NT,\"parallel_tool_calls\":false}")
check "parallel_tool_calls false: the block is closed after its first call" \
    'jq -e "([.output[] | select(.type == \"function_call\" or .type == \"custom_tool_call\")] | length) == 1 and .parallel_tool_calls == false" <<<"$R" >/dev/null'
LIVE=$(live_after)
IN=$(jq -c '.output as $o | [{"role":"user","content":"go"}] + $o + [{"type":"function_call_output","call_id":$o[1].call_id,"output":"spawned"}]' <<<"$R")
R=$(post /v1/responses "{\"model\":\"x\",\"input\":$IN,\"tools\":$NT,\"parallel_tool_calls\":false}")
check "parallel_tool_calls false: the closed block replays ($(cached) >= $LIVE)" \
    '[ "$(cached)" -ge "$LIVE" ]'
CT='[{"type":"custom","custom":{"name":"apply_patch","format":{"type":"text"}}},{"type":"function","function":{"name":"agents.spawn_agent","parameters":{"type":"object"}}}]'
R=$(post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"go\"}],\"tools\":$CT}")
LIVE=$(live_after)
check "chat: a custom tool's call as {type: custom, custom: {name, input}}" \
    'jq -e ".choices[0].message.tool_calls[1] | .type == \"custom\" and .custom.name == \"apply_patch\" and (.custom.input | startswith(\"*** Begin Patch\"))" <<<"$R" >/dev/null'
MSG=$(jq -c .choices[0].message <<<"$R")
R=$(post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"go\"},$MSG,{\"role\":\"tool\",\"tool_call_id\":\"a\",\"content\":\"spawned\"},{\"role\":\"tool\",\"tool_call_id\":\"b\",\"content\":\"ok\"}],\"tools\":$CT}")
check "chat: the custom call's history reuses the whole live session" \
    '[ "$(cached)" -ge "$LIVE" ]'
bad_req 400 POST /v1/responses '{"model":"x","input":"hi","tools":[{"type":"namespace","tools":[]}]}' "a namespace without a name"
bad_req 400 POST /v1/responses '{"model":"x","input":"hi","tools":[{"type":"custom","name":"p","format":{"type":"regexp"}}]}' "a custom tool's unknown format"
bad_req 400 POST /v1/responses '{"model":"x","input":[{"type":"custom_tool_call","call_id":"c","name":"p","input":3}]}' "a custom_tool_call without its text"
bad_req 400 POST /v1/responses '{"model":"x","input":[{"type":"function_call","call_id":"c","name":"p","arguments":"{}","namespace":1}]}' "a non-string namespace"
bad_req 400 POST /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"custom","custom":{"description":"no name"}}]}' "a custom chat tool without a name"
bad_req 400 POST /v1/responses '{"model":"x","input":"hi","tools":[{"type":"namespace","name":"ns","tools":[{"type":"function","name":"f"}]},{"type":"function","name":"ns.f"}]}' "two tools the model would see as ns.f"
bad_req 400 POST /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"custom","custom":{"name":"x"}},{"type":"function","function":{"name":"x"}}]}' "a custom and a function tool of one name"
bad_req 400 POST /v1/responses '{"model":"x","input":"hi","tools":[{"type":"function","name":""}]}' "an empty tool name"
bad_req 400 POST /v1/responses '{"model":"x","input":"hi","tools":[{"type":"namespace","name":"a","tools":[{"type":"namespace","name":"b","tools":[]}]}]}' "a nested namespace"
bad_req 400 POST /v1/responses '{"model":"x","input":"hi","tools":[{"type":"function","name":"f","parameters":"abc"}]}' "parameters that are not an object"
bad_req 400 POST /v1/responses '{"model":"x","input":"hi","previous_response_id":5}' "a non-string previous_response_id"
stop_server ns

# tool_choice that forces a call: the block's opening (and the named
# tool's invoke) is written for the model where its answer starts, at once
# or after "</think>"; the script then writes only the rest of the call
cat >"$TMP/script_force.txt" <<'SCRIPT'
<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
</｜DSML｜invoke>
</｜DSML｜tool_calls>
---8<---
Sunny.
---8<---
Pick one.</think><｜DSML｜invoke name="get_weather">
<｜DSML｜parameter name="city" string="true">Rome</｜DSML｜parameter>
</｜DSML｜invoke>
</｜DSML｜tool_calls>
---8<---
Still thinking
---8<---
Hmm.

<｜DSML｜tool_calls>
<｜DSML｜parameter name="city" string="true">Oslo</｜DSML｜parameter>
</｜DSML｜invoke>
</｜DSML｜tool_calls>
---8<---
Bad call.</think>

<｜DSML｜tool_calls>
<｜DSML｜invoke name="">
</｜DSML｜invoke>
</｜DSML｜tool_calls>
SCRIPT
MOESTREAM_SERVE_SCRIPT="$TMP/script_force.txt" start_server force -m "$TMP/m.gguf"
U=$(url force)
FT='[{"type":"function","function":{"name":"get_time","parameters":{"type":"object"}}},{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]'
R=$(post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"w\"}],\"tools\":$FT,\"reasoning_effort\":\"none\",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}}")
LIVE=$(live_after)
check "tool_choice names a tool: its call, the arguments the model wrote after the forced opening" \
    'jq -e ".choices[0].finish_reason == \"tool_calls\" and .choices[0].message.tool_calls[0].function.name == \"get_weather\" and (.choices[0].message.tool_calls[0].function.arguments | fromjson) == {\"city\":\"Paris\"}" <<<"$R" >/dev/null'
MSG=$(jq -c .choices[0].message <<<"$R")
R=$(post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"w\"},$MSG,{\"role\":\"tool\",\"tool_call_id\":\"x\",\"content\":\"sunny\"}],\"tools\":$FT,\"reasoning_effort\":\"none\"}")
check "tool_choice: the forced call's history reuses the whole live session" \
    '[ "$(cached)" -ge "$LIVE" ]'
R=$(post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"w\"}],\"tools\":$FT,\"tool_choice\":\"required\"}")
check "tool_choice required, thinking: the reasoning, then a call" \
    'jq -e ".choices[0].finish_reason == \"tool_calls\" and .choices[0].message.reasoning_content == \"Pick one.\" and .choices[0].message.tool_calls[0].function.name == \"get_weather\"" <<<"$R" >/dev/null'
S=$(post /v1/messages "{\"model\":\"x\",\"max_tokens\":50,\"stream\":true,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":40},\"tools\":[{\"name\":\"get_weather\",\"input_schema\":{\"type\":\"object\"}}],\"tool_choice\":{\"type\":\"any\"},\"messages\":[{\"role\":\"user\",\"content\":\"w\"}]}")
check "tool_choice any, a turn that ends while thinking: </think> and the block's opening are written, no markup leaks" \
    'grep -q "thinking_delta" <<<"$S" && ! grep -q "DSML" <<<"$S" && grep -q "\"stop_reason\":\"end_turn\"" <<<"$S" && grep -q "ended inside a tool-call block" "$TMP/force.log"'
R=$(post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"w\"}],\"tools\":$FT,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}}")
check "tool_choice names a tool, the model opens its own block in its reasoning: the named invoke goes first" \
    'jq -e ".choices[0].message.tool_calls[0].function.name == \"get_weather\" and (.choices[0].message.tool_calls[0].function.arguments | fromjson) == {\"city\":\"Oslo\"}" <<<"$R" >/dev/null'
R=$(post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"w\"}],\"tools\":$FT}")
check "a malformed block ends the turn with finish stop (not length)" \
    'jq -e ".choices[0].finish_reason == \"stop\" and .usage.completion_tokens < 100" <<<"$R" >/dev/null'
bad_req 400 POST /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"w\"}],\"tools\":$FT,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}}" "tool_choice names a tool that is not there"
bad_req 400 POST /v1/chat/completions '{"messages":[{"role":"user","content":"w"}],"tool_choice":"required"}' "tool_choice required without tools"
R=$(post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"w\"}],\"tools\":$FT,\"reasoning_effort\":\"none\",\"max_tokens\":3,\"tool_choice\":\"required\"}")
check "a forced opening cut by max_tokens is not text" \
    'jq -e ".choices[0].finish_reason == \"length\" and ((.choices[0].message.content // \"\") | test(\"DSML\") | not)" <<<"$R" >/dev/null'
bad_req 400 POST /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"w\"}],\"tools\":$FT,\"tool_choice\":\"bogus\"}" "an unknown tool_choice string"
bad_req 400 POST /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"w\"}],\"tools\":$FT,\"parallel_tool_calls\":\"no\"}" "a non-boolean parallel_tool_calls"
bad_req 400 POST /v1/messages '{"model":"x","max_tokens":5,"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"auto","disable_parallel_tool_use":1},"messages":[{"role":"user","content":"w"}]}' "a non-boolean disable_parallel_tool_use"
bad_req 400 POST /v1/responses '{"model":"x","input":"w","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"f","namespace":5}}' "a non-string tool_choice.namespace"
bad_req 400 POST /v1/responses "{\"model\":\"x\",\"input\":\"w\",\"tools\":[{\"type\":\"function\",\"name\":\"f\"}],\"tool_choice\":{\"type\":\"function\"}}" "tool_choice function without a name"
bad_req 400 POST /v1/messages '{"model":"x","max_tokens":5,"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":"any","messages":[{"role":"user","content":"w"}]}' "Anthropic tool_choice as a string"
stop_server force

# a long agent loop from a client that drops reasoning_content: every
# turn's block and reasoning are restored (no cap per request), so turn 40
# still extends the whole live session
sed -n 1,8p "$TMP/script.txt" >"$TMP/script_one.txt"
MOESTREAM_SERVE_SCRIPT="$TMP/script_one.txt" start_server many -m "$TMP/m.gguf" -c 16384
U=$(url many)
H='[{"role":"user","content":"Weather, again and again?"}]'
for turn in $(seq 1 40); do
    R=$(post /v1/chat/completions "{\"messages\":$H,\"tools\":$TOOLS}")
    [ $turn -gt 1 ] && [ "$(cached)" -lt "$LIVE" ] && break
    LIVE=$(live_after)
    H=$(jq -c --argjson m "$(jq -c '.choices[0].message | del(.reasoning_content)' <<<"$R")" \
        '. + [$m, {role: "tool", tool_call_id: $m.tool_calls[0].id, content: "sunny"}]' <<<"$H")
done
check "40 tool-call turns without their reasoning: each extends the live session (stopped at turn $turn)" '[ "$turn" = 40 ]'
stop_server many

# a tool call the model opens inside its reasoning (no </think> sampled):
# the tool-result turn is rendered as the live session holds it, so it
# reuses the whole session too
cat >"$TMP/script2.txt" <<'SCRIPT'
I should check the weather.

<｜DSML｜tool_calls>
<｜DSML｜invoke name="get_weather">
<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
</｜DSML｜invoke>
</｜DSML｜tool_calls>
---8<---
Done.</think>Sunny.
SCRIPT
MOESTREAM_SERVE_SCRIPT="$TMP/script2.txt" start_server tools2 -m "$TMP/m.gguf"
U=$(url tools2)
first_turn "Weather in Paris?"
check "call inside the reasoning: reasoning, no content, one call" \
    'jq -e ".choices[0].finish_reason == \"tool_calls\" and .choices[0].message.reasoning_content == \"I should check the weather.\" and (.choices[0].message.content // \"\") == \"\"" <<<"$R" >/dev/null'
result_turn "Weather in Paris?"
check "call inside the reasoning: the tool result turn reuses the whole live session ($(cached) >= $LIVE)" \
    '[ "$(cached)" -ge "$LIVE" ] && [ "$(jq -r .choices[0].message.content <<<"$R")" = Sunny. ]'
stop_server tools2

# kept states under a tight budget: after a turn that ended in a tool call,
# a side request's state pushes one of the turn's two kept states out; it
# is the snapshot (it serves only a retry), so the tool-result turn still
# extends the whole live session. (The 480-word message makes the pair
# just fit 2 MiB on this model; the eviction count checks that it does.)
printf '%s\n---8<---\nSide answer.\n---8<---\nDone.</think>Sunny.\n' "$(sed -n 1,7p "$TMP/script2.txt")" >"$TMP/script3.txt"
MOESTREAM_SERVE_SCRIPT="$TMP/script3.txt" start_server tight -m "$TMP/m.gguf" --kv-ram-mb 2
U=$(url tight)
LONGQ="Weather in Paris? $(python3 -c "print(' '.join(['sea sky'] * 240))")"
first_turn "$LONGQ"
post /v1/completions '{"prompt":"Zebras graze","max_tokens":3}' >/dev/null
result_turn "$LONGQ"
check "tight budget: the snapshot goes first, the tool-result turn extends the live state ($(cached) >= $LIVE)" \
    '[ "$(cached)" -ge "$LIVE" ] && [ "$(metric ram_evicted_total)" = 1 ] && [ "$(metric ram_restores_total)" = 1 ]'
stop_server tight

# ---- the context without -c: the model's, at most 131072 (said on stderr
# when less than the model's); -c still rules
tiny_model "$TMP/long.gguf" --seed 3 --n-ctx-train 262144
start_server long -m "$TMP/long.gguf"
U=$(url long)
check "no -c: context 131072 of the model's 262144" \
    '[ "$(curl -s -m 5 $U/v1/models | jq -r ".data[0].context_length")" = 131072 ] && grep -q "^serve: context 131072 positions, of the model.s 262144" "$TMP/long.log"'
R=$(post /v1/completions "{\"prompt\":\"$(python3 -c "print('sea ' * 5000, end='')")\",\"max_tokens\":2}")
check "no -c: a prompt past 4096 tokens is answered" 'jq -e ".usage.prompt_tokens > 4096" <<<"$R" >/dev/null'
stop_server long
start_server short -m "$TMP/long.gguf" -c 2048
check "-c 2048 rules" '[ "$(curl -s -m 5 $(url short)/v1/models | jq -r ".data[0].context_length")" = 2048 ]'
stop_server short
finish cli_serve
