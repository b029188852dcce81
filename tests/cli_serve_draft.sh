#!/usr/bin/env bash
# cli_serve_draft.sh - speculative decoding in `moestream serve` (--draft):
# the same replies as --draft 0, token for token, greedy and sampled,
# streamed and not, with a response format and with logprobs, while
# guesses are made and cut (--draft-always); the live session after a
# speculative turn is the one the next turn extends (its whole prefix
# reused, the same continuation); scripted outputs that repeat the prompt
# (forced tokens, as a written tool call) have their guesses kept, and
# /metrics counts fewer evals than tokens; `run` and its flags.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/server/lib_serve.sh"
command -v curl >/dev/null && command -v jq >/dev/null ||
    { echo "FAIL: curl and jq are needed (scripts/install-deps.sh)"; exit 1; }
tiny_model "$TMP/m.gguf" --seed 9
CT='Content-Type: application/json'
post() { curl -s -m 300 -H "$CT" "$1$2" -d "$3"; }
metric() { curl -s -m 5 "$1/metrics" | awk -v k="moestream_$2" '$1 == k {print $2}'; }

start_server plain -m "$TMP/m.gguf" -c 2048 --draft 0
start_server spec -m "$TMP/m.gguf" -c 2048 --draft-always
P=$(url plain)
S=$(url spec)

# a prompt that repeats itself, so the lookup finds guesses everywhere
REP="one two three four five six seven one two three four five six seven one two three four five six seven"
same() { # name path body: both servers' replies equal, ids and timestamps aside
    local a b
    a=$(post "$P" "$2" "$3" | jq -cS 'del(.id, .created, .system_fingerprint)')
    b=$(post "$S" "$2" "$3" | jq -cS 'del(.id, .created, .system_fingerprint)')
    check "$1" '[ -n "$a" ] && [ "$a" = "$b" ] || { echo "  plain: ${a:0:300}"; echo "  spec:  ${b:0:300}"; false; }'
}
same "greedy chat: the same reply" /v1/chat/completions \
    "{\"messages\":[{\"role\":\"user\",\"content\":\"$REP\"}],\"max_tokens\":80,\"temperature\":0,\"ignore_eos\":true}"
same "sampled chat (seed 7, temperature 1): the same reply" /v1/chat/completions \
    "{\"messages\":[{\"role\":\"user\",\"content\":\"$REP\"}],\"max_tokens\":80,\"temperature\":1,\"seed\":7,\"ignore_eos\":true}"
same "completion with logprobs: the same text and the same numbers" /v1/completions \
    "{\"prompt\":\"$REP\",\"max_tokens\":60,\"temperature\":0.8,\"seed\":3,\"logprobs\":3,\"ignore_eos\":true}"
same "a response format: the same JSON" /v1/chat/completions \
    "{\"messages\":[{\"role\":\"user\",\"content\":\"$REP\"}],\"max_tokens\":60,\"temperature\":0.7,\"seed\":11,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\",\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\"]}}}}"
sse() { curl -s -N -m 300 -H "$CT" "$1/v1/chat/completions" -d "$2" | sed -n 's/^data: //p' | grep -v '^\[DONE\]' | jq -r '.choices[0].delta.content // empty' | tr -d '\n'; }
B="{\"messages\":[{\"role\":\"user\",\"content\":\"$REP\"}],\"max_tokens\":70,\"temperature\":0.9,\"seed\":5,\"stream\":true,\"ignore_eos\":true}"
a=$(sse "$P" "$B"); b=$(sse "$S" "$B")
check "a stream: the same text" '[ -n "$a" ] && [ "$a" = "$b" ]'
check "the speculative server guessed (and the random model refused most guesses)" \
    '[ "$(metric "$S" draft_guessed_tokens_total)" -gt 0 ] && [ "$(metric "$P" draft_guessed_tokens_total)" = 0 ]'

# the next turn extends the live session the speculative turn left: the
# whole prefix is reused and the continuation is the plain server's
T1="{\"messages\":[{\"role\":\"user\",\"content\":\"$REP\"}],\"max_tokens\":50,\"temperature\":0,\"ignore_eos\":true,\"chat_template_kwargs\":{\"thinking\":false}}"
A1=$(post "$P" /v1/chat/completions "$T1" | jq -r '.choices[0].message.content')
B1=$(post "$S" /v1/chat/completions "$T1" | jq -r '.choices[0].message.content')
check "turn 1: the same answer" '[ -n "$A1" ] && [ "$A1" = "$B1" ]'
T2=$(jq -cn --arg u "$REP" --arg a "$A1" '{messages:[{role:"user",content:$u},{role:"assistant",content:$a},{role:"user",content:"again"}],max_tokens:40,temperature:0,ignore_eos:true,chat_template_kwargs:{thinking:false}}')
RA=$(post "$P" /v1/chat/completions "$T2")
RB=$(post "$S" /v1/chat/completions "$T2")
check "turn 2: the same answer, the same cached prefix on both" \
    '[ "$(jq -r .choices[0].message.content <<<"$RA")" = "$(jq -r .choices[0].message.content <<<"$RB")" ] &&
     [ "$(jq .usage.prompt_tokens_details.cached_tokens <<<"$RB")" = "$(jq .usage.prompt_tokens_details.cached_tokens <<<"$RA")" ] &&
     [ "$(jq .usage.prompt_tokens_details.cached_tokens <<<"$RB")" -gt 40 ]'
stop_server plain
stop_server spec

# forced tokens that repeat the prompt: the guesses are kept, evals fewer
printf '%s' "$REP $REP" >"$TMP/script.txt"
MOESTREAM_SERVE_SCRIPT="$TMP/script.txt" start_server scripted -m "$TMP/m.gguf" -c 2048 --draft-always
U=$(url scripted)
R=$(post "$U" /v1/completions "{\"prompt\":\"$REP\",\"max_tokens\":200}")
check "scripted: the reply is the script" '[ "$(jq -r .choices[0].text <<<"$R")" = "$REP $REP" ]'
N=$(jq .usage.completion_tokens <<<"$R")
check "scripted: guesses kept, fewer evals than tokens ($(metric "$U" decode_evals_total) for $N)" \
    '[ "$(metric "$U" draft_accepted_tokens_total)" -gt $((N / 3)) ] && [ "$(metric "$U" decode_evals_total)" -lt "$N" ] &&
     grep -q "guesses kept" "$TMP/scripted.log"'
stop_server scripted

# run: the same text with and without, the summary line, bad values
"$BIN" run -m "$TMP/m.gguf" -t 2 -p "$REP" -n 120 --temp 0.3 --seed 4 --draft 0 >"$TMP/r0.txt" 2>/dev/null
"$BIN" run -m "$TMP/m.gguf" -t 2 -p "$REP" -n 120 --temp 0.3 --seed 4 --draft-always --stats-json "$TMP/st.json" \
    >"$TMP/r1.txt" 2>"$TMP/r1.err"
check "run --draft-always: the same text as --draft 0" 'cmp -s "$TMP/r0.txt" "$TMP/r1.txt"'
check "run --stats-json: guesses made, and every token but the last evaluated once (an eval or a kept guess)" \
    'jq -e ".draft_guessed > 0 and .decode_evals + .draft_accepted == .decode_tokens - 1" "$TMP/st.json" >/dev/null &&
     grep -q "guesses kept" "$TMP/r1.err"'
# the disk KV cache's continued checkpoints land where plain decoding puts
# them (a grammar makes the output repeat the prompt, so guesses are kept
# across the interval frontiers)
G='root ::= ("one two three four five six seven " | "one two three " | "four five " | "six ")+'
tiny_model "$TMP/m1.gguf" --seed 1 # whose greedy output under G runs to -n
for d in 0 always; do
    rm -rf "$TMP/kv$d"; mkdir -p "$TMP/kv$d"
    flag=--draft-always; [ $d = 0 ] && flag="--draft 0"
    "$BIN" run -m "$TMP/m1.gguf" -t 2 -c 1300 -p "$REP" -n 300 --temp 0 $flag --grammar "$G" --kv-dir "$TMP/kv$d" \
        --kv-interval 16 --kv-min-tokens 16 >"$TMP/kvo$d.txt" 2>"$TMP/kve$d.txt"
    ls "$TMP/kv$d" | sort >"$TMP/kvls$d.txt"
done
check "--kv-dir: the same text, and the same checkpoint files (positions) as --draft 0" \
    'cmp -s "$TMP/kvo0.txt" "$TMP/kvoalways.txt" && [ "$(wc -l <"$TMP/kvls0.txt")" -gt 10 ] &&
     cmp -s "$TMP/kvls0.txt" "$TMP/kvlsalways.txt" && grep -q "guesses kept" "$TMP/kvealways.txt" &&
     ! grep -q " 0 of " "$TMP/kvealways.txt"'
for v in -1 65 x ""; do
    "$BIN" run -m "$TMP/m.gguf" -p hi --draft "$v" >/dev/null 2>"$TMP/bad.err"; rc=$?
    check "run --draft '$v': a usage error" '[ $rc -eq 2 ] && grep -q -- "--draft must be" "$TMP/bad.err"'
done
for cmd in "run -p hi" chat serve; do
    "$BIN" $cmd -m "$TMP/m.gguf" --draft 0 --draft-always >/dev/null 2>"$TMP/bad.err" </dev/null; rc=$?
    check "${cmd%% *} --draft 0 --draft-always: a usage error" '[ $rc -eq 2 ] && grep -q -- "--draft-always with --draft 0" "$TMP/bad.err"'
done
finish cli_serve_draft
