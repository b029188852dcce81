#!/usr/bin/env bash
# cli_serve_kv.sh - `moestream serve --kv-disk-dir` (docs/server.md, the
# disk KV cache part) on a tiny mkmodel model, driven with curl on loopback:
#  - a long prompt gets a cold checkpoint during its prefill; SIGTERM saves
#    the live session (reason shutdown) and exits 0; the directory is 0700
#    and the files 0600;
#  - after a restart the same request restores from disk (usage reports the
#    cached tokens, /metrics the restore) and gives the same greedy text as
#    a server without --kv-disk-dir;
#  - an unrelated request in between saves the live session (evict), and
#    coming back restores it;
#  - a client that disconnects during a prefill: the prefill finishes and is
#    kept, so after an unrelated request the retry is a disk hit;
#  - corrupt and foreign checkpoint files are skipped with a warning and the
#    request is still served, with the same text (its prefill, with
#    continued checkpoints at every --kv-interval frontier, too);
#  - streamed, a prefill with checkpoints reads no more from the SSD than
#    the same request on a server without the cache.
# Every wait is bounded.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/server/lib_serve.sh"
command -v curl >/dev/null && command -v jq >/dev/null || { echo "FAIL: curl and jq are needed (scripts/install-deps.sh)"; exit 1; }
M="$TMP/m.gguf"
tiny_model "$M" --seed 3
CT='Content-Type: application/json'
KV="$TMP/kv"
rm -rf "$KV"
# (no states kept in memory: they would serve what these tests restore from disk)
KVF=(--kv-disk-dir "$KV" --kv-min-tokens 64 --kv-align 128 --kv-trim 16 --kv-ram-mb 0)
words() { for i in $(seq "$2" "$3"); do printf '%s%d ' "$1" "$i"; done; }
P=$(words word 1 150)
Q="Something else entirely: $(words other 1 40)"
P2=$(words long 1 700)
body() { jq -nc --arg p "$1" --argjson n "${2:-8}" --argjson s "${3:-false}" \
    '{messages:[{role:"user",content:$p}],max_tokens:$n,temperature:0,ignore_eos:true,reasoning_effort:"none",stream:$s}'; }
post() { curl -s -m 300 -H "$CT" "$U/v1/chat/completions" -d "$1"; }
metric() { curl -s -m 10 "$U/metrics" | awk -v k="$1" '$1 == k {print $2}'; }
text() { jq -r '.choices[0].message.content' <<<"$1"; }
usage() { jq -r ".usage.$2" <<<"$1"; }

# ---- the reference: no disk cache
start_server ref -m "$M" -c 4096
U=$(url ref)
R0=$(post "$(body "$P")")
N=$(usage "$R0" prompt_tokens)
T0=$(text "$R0")
check "reference answer ($N prompt tokens)" '[ "$N" -gt 300 ] && [ "$(usage "$R0" completion_tokens)" = 8 ]'
check "no kv metrics without --kv-disk-dir" '! curl -s -m 10 "$U/metrics" | grep -q "^moestream_kv_saves_total"'
stop_server ref

# ---- a long prompt, then SIGTERM: a shutdown checkpoint
start_server kv1 -m "$M" -c 4096 "${KVF[@]}"
U=$(url kv1)
R1=$(post "$(body "$P")")
check "kv server: same greedy text as without the cache" '[ "$(text "$R1")" = "$T0" ] && [ "$(usage "$R1" prompt_tokens)" = "$N" ]'
check "a cold checkpoint during the prefill" 'grep -q "(cold, $(( (N - 16) / 128 * 128 )) tokens" "$TMP/kv1.log"'
check "metrics: one cold save, no restore" \
    '[ "$(metric "moestream_kv_saves_total{reason=\"cold\"}")" = 1 ] && [ "$(metric moestream_kv_restores_total)" = 0 ]'
stop_server kv1
check "SIGTERM saved the live session (reason shutdown)" 'grep -q "(shutdown, " "$TMP/kv1.log"'
check "directory 0700, files 0600" \
    '[ "$(stat -c %a "$KV")" = 700 ] && [ -n "$(ls "$KV"/*.kv)" ] && [ -z "$(stat -c %a "$KV"/*.kv | grep -v "^600$")" ]'

# ---- restart: the same request restores from disk
start_server kv2 -m "$M" -c 4096 "${KVF[@]}"
U=$(url kv2)
R2=$(post "$(body "$P")")
check "after a restart: cached tokens from disk ($(usage "$R2" prompt_tokens_details.cached_tokens) of $N)" \
    '[ "$(usage "$R2" prompt_tokens_details.cached_tokens)" -ge $((N - 1)) ] && [ "$(metric moestream_kv_restores_total)" = 1 ] && [ "$(metric moestream_kv_restored_tokens_total)" -ge $((N - 1)) ]'
check "after a restart: same greedy text" '[ "$(text "$R2")" = "$T0" ]'
check "metrics: restored bytes and seconds" \
    '[ "$(metric moestream_kv_restored_bytes_total)" -gt 0 ] && awk "BEGIN{exit !($(metric moestream_kv_restore_seconds_total) > 0)}"'

# ---- an unrelated request evicts (saves) the live session; coming back restores it
ev0=$(metric 'moestream_kv_saves_total{reason="evict"}')
R3=$(post "$(body "$Q")")
check "unrelated request: not cached, served" '[ "$(usage "$R3" prompt_tokens_details.cached_tokens)" = 0 ] && [ "$(usage "$R3" completion_tokens)" = 8 ]'
check "the live session was saved before it was replaced (evict)" \
    '[ "$(metric "moestream_kv_saves_total{reason=\"evict\"}")" -gt "$ev0" ]'
R4=$(post "$(body "$P")")
check "coming back restores from disk" \
    '[ "$(usage "$R4" prompt_tokens_details.cached_tokens)" -ge $((N - 1)) ] && [ "$(metric moestream_kv_restores_total)" = 2 ] && [ "$(text "$R4")" = "$T0" ]'

# ---- a disconnect during the prefill: the prefill finishes and is kept
curl -s -N -m 300 -H "$CT" "$U/v1/chat/completions" -d "$(body "$P2" 8 true)" -o /dev/null &
c=$!
wait_busy true || fail "the long request never ran"
kill "$c" 2>/dev/null
wait "$c" 2>/dev/null
wait_busy false || fail "the engine never went idle"
check "the disconnected request finished its prefill and generated nothing" \
    'grep -q "prompt [0-9]* tokens (0 cached), prefill [0-9.]* s, 0 generated in .*finish cancelled" "$TMP/kv2.log"'
check "its prefill (>= 1024 tokens) logged each quarter, in order" \
    '[ "$(grep -o "prefill [0-9]*% (" "$TMP/kv2.log" | tr -d "(" | paste -sd,)" = "prefill 25% ,prefill 50% ,prefill 75% " ]'
R5=$(post "$(body "$Q")")
kr=$(metric moestream_kv_restores_total)
N2=$(post "$(body "$P2")")
check "the retry after an unrelated request is a disk hit ($(usage "$N2" prompt_tokens_details.cached_tokens) of $(usage "$N2" prompt_tokens))" \
    '[ "$(usage "$N2" prompt_tokens_details.cached_tokens)" -ge $(( $(usage "$N2" prompt_tokens) - 1 )) ] && [ "$(metric moestream_kv_restores_total)" = $((kr + 1)) ]'
stop_server kv2

# ---- corrupt and foreign files are skipped with a warning; the request is served
for f in "$KV"/*.kv; do
    sz=$(stat -c %s "$f")
    printf '\x5a' | dd of="$f" bs=1 seek=$((sz / 2)) conv=notrunc status=none
done
head -c 5000 /dev/urandom >"$KV/$(printf '%040d' 0).kv"
start_server kv3 -m "$M" -c 4096 "${KVF[@]}" --kv-interval 256
U=$(url kv3)
R6=$(post "$(body "$P")")
check "corrupt checkpoints: the request is served with the same text" \
    '[ "$(usage "$R6" completion_tokens)" = 8 ] && [ "$(text "$R6")" = "$T0" ] && [ "$(usage "$R6" prompt_tokens_details.cached_tokens)" = 0 ]'
check "--kv-interval 256: the prefill of $N tokens wrote a continued checkpoint at each multiple" \
    '[ "$(metric "moestream_kv_saves_total{reason=\"continued\"}")" = $((N / 256)) ]'
check "corrupt checkpoints: skipped with a warning" \
    'grep -q "kv: skipped a checkpoint: .*corrupt" "$TMP/kv3.log" && [ "$(metric moestream_kv_skipped_files_total)" -ge 2 ]'
stop_server kv3

# ---- streamed: the checkpoints of a long prompt's prefill (cold, and
# continued every 512 tokens) are taken inside its one pass, so the
# server reads what a server without the cache reads for the same request
for name in sref skv; do
    extra=(); [ $name = skv ] && extra=("${KVF[@]}" --kv-interval 512) && rm -rf "$KV"
    start_server $name -m "$M" -c 4096 --stream --cache-experts 4 "${extra[@]}"
    U=$(url $name)
    R=$(post "$(body "$P2")")
    [ "$(usage "$R" completion_tokens)" = 8 ] || fail "$name: no answer"
    eval "B_$name=\$(metric moestream_ssd_bytes_read_total)"
    eval "T_$name=\$(text \"\$R\")"
    stop_server $name
done
check "streamed with checkpoints: the same text" '[ "$T_skv" = "$T_sref" ]'
check "streamed with checkpoints: continued and cold saves" \
    'grep -q "(cold, " "$TMP/skv.log" && [ "$(grep -c "(continued, " "$TMP/skv.log")" -ge 2 ]'
# (the 8 decode steps' cache misses and prefetches vary by a few percent
# between runs; a second pass over the weights would nearly double it)
check "streamed with checkpoints: no second pass ($B_skv against $B_sref bytes)" \
    '[ "$B_sref" -gt 0 ] && [ "$B_skv" -le $(( B_sref + B_sref / 4 )) ]'

# ---- with states kept in memory too, coming back after an unrelated
# request is served from memory, not from the disk
KV="$TMP/kvboth"; rm -rf "$KV"
start_server both -m "$M" -c 4096 --kv-disk-dir "$KV" --kv-min-tokens 64 --kv-align 128 --kv-trim 16
U=$(url both)
post "$(body "$P")" >/dev/null
post "$(body "$Q")" >/dev/null
R6=$(post "$(body "$P")")
check "memory before disk: cached $(usage "$R6" prompt_tokens_details.cached_tokens) of $N, same text" \
    '[ "$(usage "$R6" prompt_tokens_details.cached_tokens)" -ge $((N - 1)) ] && [ "$(text "$R6")" = "$T0" ] && [ "$(metric moestream_ram_restores_total)" = 1 ] && [ "$(metric moestream_kv_restores_total)" = 0 ]'
check "memory before disk: the evicted session is on disk as well" \
    '[ "$(metric "moestream_kv_saves_total{reason=\"evict\"}")" -ge 1 ]'
stop_server both

# ---- a tool call across a restart: the sampled block (here with one
# newline before it where the template writes two) is read back from the
# replay log, so the tool-result turn after the restart restores the whole
# shutdown checkpoint, not only the text before the call
KV="$TMP/kvtools"; rm -rf "$KV"
cat >"$TMP/tscript.txt" <<'SCRIPT'
Need it.</think>
<｜DSML｜tool_calls>
<｜DSML｜invoke name="get_weather">
<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
</｜DSML｜invoke>
</｜DSML｜tool_calls>
---8<---
Sunny.
SCRIPT
TT='[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]'
# tool_server NAME: a scripted server on the cache in $KV
tool_server() {
    MOESTREAM_SERVE_SCRIPT="$TMP/tscript.txt" start_server "$1" -m "$M" -c 4096 --kv-disk-dir "$KV" --kv-min-tokens 64 --kv-ram-mb 0
    U=$(url "$1")
}
# result_turn_after_restart NAME: on a fresh server NAME, the turn that
# carries R7's call back with its result; its reply in RT
result_turn_after_restart() {
    tool_server "$1"
    RT=$(post "$(jq -nc --arg p "$P" --argjson t "$TT" --argjson m "$(jq -c .choices[0].message <<<"$R7")" \
        '{messages:[{role:"user",content:$p},$m,{role:"tool",tool_call_id:"x",content:"sunny"}],tools:$t}')")
    stop_server "$1"
}
tool_server tk1
R7=$(post "$(jq -nc --arg p "$P" --argjson t "$TT" '{messages:[{role:"user",content:$p}],tools:$t}')")
LIVE=$(( $(usage "$R7" prompt_tokens) + $(usage "$R7" completion_tokens) ))
stop_server tk1
check "the replay log is beside the checkpoints, 0600" '[ "$(stat -c %a "$KV/replay.jsonl")" = 600 ] && grep -q "get_weather" "$KV/replay.jsonl"'
result_turn_after_restart tk2
R8=$RT
check "after a restart, the tool-result turn restores the whole checkpoint ($(usage "$R8" prompt_tokens_details.cached_tokens) >= $LIVE)" \
    '[ "$(usage "$R8" prompt_tokens_details.cached_tokens)" -ge "$LIVE" ] && grep -q "tool-call blocks read back" "$TMP/tk2.log"'
# the log's first format (no in_reasoning; reasoning only for a block opened
# inside it) is still read
jq -c 'if .in_reasoning then . else del(.reasoning) end | del(.in_reasoning)' "$KV/replay.jsonl" >"$TMP/old.jsonl" &&
    cp "$TMP/old.jsonl" "$KV/replay.jsonl"
result_turn_after_restart tk2b
R9=$RT
check "a log of the first format is read back ($(usage "$R9" prompt_tokens_details.cached_tokens) >= $LIVE)" \
    '[ "$(usage "$R9" prompt_tokens_details.cached_tokens)" -ge "$LIVE" ] && ! grep -q in_reasoning "$TMP/old.jsonl" && grep -q "tool-call blocks read back" "$TMP/tk2b.log"'
# a log that is not a regular file (a FIFO would block a reader) is not
# read, and is replaced by the server's own
rm -f "$KV/replay.jsonl" && mkfifo "$KV/replay.jsonl"
tool_server tk3
check "a FIFO in the log's place: the server starts, the log is a file again" '[ -f "$KV/replay.jsonl" ] && [ ! -p "$KV/replay.jsonl" ]'
stop_server tk3

# ---- bad flags are usage errors
"$BIN" serve -m "$M" --kv-disk-space-mb 0 >/dev/null 2>"$TMP/e1"
rc=$?
check "bad --kv-disk-space-mb exits 2 naming the flag" '[ $rc -eq 2 ] && grep -q "kv-disk-space-mb" "$TMP/e1"'
"$BIN" serve -m "$M" --kv-disk-dir "" >/dev/null 2>"$TMP/e2"
rc=$?
check "empty --kv-disk-dir exits 2" '[ $rc -eq 2 ] && grep -q "kv-disk-dir" "$TMP/e2"'
"$BIN" serve -m "$M" --kv-ram-mb -1 >/dev/null 2>"$TMP/e3"
rc=$?
check "bad --kv-ram-mb exits 2 naming the flag" '[ $rc -eq 2 ] && grep -q "kv-ram-mb" "$TMP/e3"'
finish cli_serve_kv
