#!/usr/bin/env bash
# cli_serve_choices.sh - requests for several choices: `n` on chat and
# completions, and a completion's array of prompts (string or token-id
# prompts, as evaluation harnesses batch them). Each choice must equal the
# single request it stands for (the same prompt, `n` 1, seed + k for the
# k-th sample), indices run prompt-major, usage counts each prompt once;
# what cannot be served is a 400 before anything runs.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/server/lib_serve.sh"
command -v curl >/dev/null && command -v jq >/dev/null ||
    { echo "FAIL: curl and jq are needed (scripts/install-deps.sh)"; exit 1; }
tiny_model "$TMP/m.gguf" --seed 3
CT='Content-Type: application/json'
start_server ch -m "$TMP/m.gguf" -c 1024
U=$(url ch)
post() { curl -s -m 300 -H "$CT" "$U$1" -d "$2"; }
status() { curl -s -m 60 -o /dev/null -w '%{http_code}' -H "$CT" "$U$1" -d "$2"; }

# ---- completions: 2 prompts x n 2, against the four single requests
R=$(post /v1/completions '{"prompt":["Once upon","The sky is"],"n":2,"seed":11,"max_tokens":6,"ignore_eos":true}')
ok=1
for i in 0 1; do
    P=$(jq -c ".[$i]" <<<'["Once upon","The sky is"]')
    for k in 0 1; do
        S=$(post /v1/completions "{\"prompt\":$P,\"seed\":$((11 + k)),\"max_tokens\":6,\"ignore_eos\":true}")
        [ "$(jq -r ".choices[] | select(.index == $((i * 2 + k))) | .text" <<<"$R")" = "$(jq -r .choices[0].text <<<"$S")" ] || ok=0
        [ $k = 0 ] && eval "PT$i=$(jq .usage.prompt_tokens <<<"$S")"
    done
done
check "2 prompts x n 2: four choices, indices 0-3, each the single request's text" \
    '[ $ok = 1 ] && [ "$(jq -c "[.choices[].index]" <<<"$R")" = "[0,1,2,3]" ]'
check "usage: each prompt once, every completion" \
    '[ "$(jq .usage.prompt_tokens <<<"$R")" = $((PT0 + PT1)) ] && [ "$(jq .usage.completion_tokens <<<"$R")" = 24 ] &&
     [ "$(jq .usage.total_tokens <<<"$R")" = $((PT0 + PT1 + 24)) ]'
check "the samples of one prompt differ (seed + k)" \
    '[ "$(jq -r ".choices[0].text" <<<"$R")" != "$(jq -r ".choices[1].text" <<<"$R")" ]'

# a completion's later samples restore the state before its prompt's last
# token (a snapshot matched by tokens), and still equal their single requests
LONG=$(python3 -c 'print("word " * 200)')
snaps() { curl -s -m 5 "$U/metrics" | awk '/^moestream_snapshot_restores_total/ {print $2}'; }
s0=$(snaps)
R=$(post /v1/completions "{\"prompt\":\"$LONG\",\"n\":3,\"seed\":4,\"max_tokens\":5,\"ignore_eos\":true}")
s1=$(snaps)
ok=1
for k in 0 1 2; do
    S=$(post /v1/completions "{\"prompt\":\"$LONG\",\"seed\":$((4 + k)),\"max_tokens\":5,\"ignore_eos\":true}")
    [ "$(jq -r ".choices[$k].text" <<<"$R")" = "$(jq -r .choices[0].text <<<"$S")" ] || ok=0
done
check "completions n 3: samples 1 and 2 restore the prompt's snapshot, and equal their single requests" \
    '[ -n "$s0" ] && [ $((s1 - s0)) = 2 ] && [ $ok = 1 ]'

# ---- a harness's batch: token-id prompts with echo and logprobs
IDS=$(post /tokenize '{"prompt":"The quick brown fox"}' | jq -c .tokens)
IDS2=$(post /tokenize '{"prompt":"A lazy dog sleeps"}' | jq -c .tokens)
R=$(post /v1/completions "{\"prompt\":[$IDS,$IDS2],\"max_tokens\":1,\"logprobs\":1,\"echo\":true,\"temperature\":0}")
A=$(post /v1/completions "{\"prompt\":$IDS,\"max_tokens\":1,\"logprobs\":1,\"echo\":true,\"temperature\":0}")
B=$(post /v1/completions "{\"prompt\":$IDS2,\"max_tokens\":1,\"logprobs\":1,\"echo\":true,\"temperature\":0}")
check "a batch of token-id prompts with echo: each choice's logprobs are its single request's" \
    '[ "$(jq -c ".choices[0].logprobs" <<<"$R")" = "$(jq -c ".choices[0].logprobs" <<<"$A")" ] &&
     [ "$(jq -c ".choices[1].logprobs" <<<"$R")" = "$(jq -c ".choices[0].logprobs" <<<"$B")" ]'

# seeds: -1 (from the clock) stays random for every sample; a seed near
# INT64_MAX wraps instead of overflowing (UBSan would abort the server)
R1=$(post /v1/completions '{"prompt":"Once upon","n":3,"seed":-1,"max_tokens":8,"ignore_eos":true}')
R2=$(post /v1/completions '{"prompt":"Once upon","n":3,"seed":-1,"max_tokens":8,"ignore_eos":true}')
check "seed -1: samples differ between two requests (not seeds 0, 1)" \
    '[ "$(jq -c "[.choices[1:][].text]" <<<"$R1")" != "$(jq -c "[.choices[1:][].text]" <<<"$R2")" ]'
check "seed 9223372036854775807 with n 3: three choices" \
    '[ "$(post /v1/completions "{\"prompt\":\"x\",\"n\":3,\"seed\":9223372036854775807,\"max_tokens\":2}" | jq ".choices | length")" = 3 ]'
# a request admitted is served whole: its later choices are not turned away
# by the queue limit that other requests meet
start_server q -m "$TMP/m.gguf" -c 1024 --max-queue 1
UQ=$(url q)
curl -s -m 300 -H "$CT" "$UQ/v1/completions" -d '{"prompt":"Once","n":16,"max_tokens":300,"ignore_eos":true}' >"$TMP/fan.json" &
FAN=$!
U=$UQ wait_busy true # the fan-out is admitted before the others start
busy() { for t in $(seq 1 400); do kill -0 $FAN 2>/dev/null || break; curl -s -m 60 -o /dev/null -H "$CT" "$UQ/v1/completions" -d '{"prompt":"x","max_tokens":30,"ignore_eos":true}'; done; }
busy & B1=$!
busy & B2=$!
wait $FAN $B1 $B2
check "--max-queue 1 and two other clients meanwhile: all 16 choices come back" '[ "$(jq ".choices | length" "$TMP/fan.json")" = 16 ]'
check "the other clients were served meanwhile (the test had contention)" \
    '[ "$(curl -s -m 5 "$UQ/metrics" | awk "/^moestream_requests_total\\{endpoint=\"completions\"/ {print \$2}")" -gt 3 ]'
stop_server q

# ---- chat: n 3
MSG='"messages":[{"role":"user","content":"Hi"}],"thinking":false,"max_tokens":5,"ignore_eos":true'
R=$(post /v1/chat/completions "{$MSG,\"n\":3,\"seed\":7}")
ok=1
for k in 0 1 2; do
    S=$(post /v1/chat/completions "{$MSG,\"seed\":$((7 + k))}")
    [ "$(jq -r ".choices[$k].message.content" <<<"$R")" = "$(jq -r .choices[0].message.content <<<"$S")" ] || ok=0
done
check "chat n 3: three choices, each the single request with seed + k" \
    '[ $ok = 1 ] && [ "$(jq -c "[.choices[].index]" <<<"$R")" = "[0,1,2]" ] && [ "$(jq .usage.completion_tokens <<<"$R")" = 15 ]'
check "chat n 1 and a one-prompt array are plain requests" \
    '[ "$(post /v1/chat/completions "{$MSG,\"n\":1}" | jq ".choices | length")" = 1 ] &&
     [ "$(post /v1/completions "{\"prompt\":[\"x\"],\"max_tokens\":2}" | jq ".choices | length")" = 1 ]'

# ---- 400s, and nothing runs for them
MANY=$(python3 -c 'import json; print(json.dumps(["a"] * 65))')
before=$(curl -s -m 5 "$U/metrics" | awk '/^moestream_completion_tokens_total/ {print $2}')
check "400: n 0, n 129, 65 prompts x n 2, n with stream, a bad second prompt (named)" \
    '[ "$(status /v1/completions "{\"prompt\":\"x\",\"n\":0}")" = 400 ] &&
     [ "$(status /v1/chat/completions "{$MSG,\"n\":129}")" = 400 ] &&
     [ "$(status /v1/completions "{\"prompt\":$MANY,\"n\":2}")" = 400 ] &&
     [ "$(status /v1/chat/completions "{$MSG,\"n\":2,\"stream\":true}")" = 400 ] &&
     post /v1/completions "{\"prompt\":[\"ok\",[1,99999999]]}" | jq -e ".error.message | startswith(\"prompt 1: \")" >/dev/null'
after=$(curl -s -m 5 "$U/metrics" | awk '/^moestream_completion_tokens_total/ {print $2}')
check "400: a prompt that is itself a list of prompts; a bad top-level field is not blamed on a prompt" \
    'post /v1/completions "{\"prompt\":[[[1]],[2]]}" | jq -e ".error.message | startswith(\"'"'"'prompt[0]'"'"'\")" >/dev/null &&
     post /v1/completions "{\"prompt\":[\"a\",\"b\"],\"max_tokens\":-1}" | jq -e ".error.message | startswith(\"'"'"'max_tokens'"'"'\")" >/dev/null'
check "the refused requests generated nothing" '[ "$before" = "$after" ] && [ -n "$before" ]'
stop_server ch
finish cli_serve_choices
