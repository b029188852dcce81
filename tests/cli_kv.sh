#!/usr/bin/env bash
# cli_kv.sh - the disk KV cache through `run` (docs/kv-cache.md): a first
# run with --kv-dir saves a cold checkpoint (trimmed, aligned) and prints
# the same greedy text as a run without it; a second run with the same
# prompt and another -n restores it and prefills only the tail (stats);
# a third process with the prompt plus a suffix restores the longest
# prefix; files are 0600 in a 0700 directory; a checkpoint of another
# model is skipped with a warning; a bad --kv flag, or a policy flag
# without --kv-dir, is a usage error.
# Usage: bash cli_kv.sh BIN TMPDIR
. "$(dirname "$0")/lib.sh"

M="$TMP/tiny.gguf" M2="$TMP/tiny2.gguf"
tiny_model "$M" --seed 1
tiny_model "$M2" --seed 2
KV="$TMP/kv"
rm -rf "$KV"
P=$(for i in $(seq 1 120); do printf 'word%d ' "$i"; done)
FLAGS=(--kv-align 256 --kv-min-tokens 64 --kv-trim 32)
run() { "$BIN" run -m "$M" -t 1 --temp 0 "$@"; }
js() { sed -n "s/.*\"$2\":\([0-9.e+-]*\).*/\1/p" "$1"; }

run -p "$P" -n 24 --stats-json "$TMP/s0.json" >"$TMP/o0" 2>"$TMP/e0" || fail "plain run exit $?"
n_all=$(js "$TMP/s0.json" prefill_tokens)
run -p "$P" -n 12 --kv-dir "$KV" "${FLAGS[@]}" --stats-json "$TMP/s1.json" >"$TMP/o1" 2>"$TMP/e1" \
    || fail "first kv run exit $?: $(cat "$TMP/e1")"
cold=$(( (n_all - 32) / 256 * 256 ))
check "first run saved one cold checkpoint of $cold tokens" \
    '[ "$(js "$TMP/s1.json" kv_saved_files)" = 1 ] && grep -q "cold, $cold tokens" "$TMP/e1"'
check "first run prefilled everything" '[ "$(js "$TMP/s1.json" prefill_tokens)" = "$n_all" ]'
check "first run: same greedy text as without --kv-dir" \
    '[ "$(head -c $(( $(wc -c <"$TMP/o1") - 1 )) "$TMP/o0")" = "$(head -c $(( $(wc -c <"$TMP/o1") - 1 )) "$TMP/o1")" ]'
check "directory 0700, files 0600" \
    '[ "$(stat -c %a "$KV")" = 700 ] && [ "$(stat -c %a "$KV"/*.kv)" = 600 ]'

run -p "$P" -n 24 --kv-dir "$KV" "${FLAGS[@]}" --stats-json "$TMP/s2.json" >"$TMP/o2" 2>"$TMP/e2" \
    || fail "second kv run exit $?"
check "second run restored $cold tokens" '[ "$(js "$TMP/s2.json" kv_restored_tokens)" = "$cold" ]'
check "second run prefilled only the tail" \
    '[ "$(js "$TMP/s2.json" prefill_tokens)" = $((n_all - cold)) ]'
check "second run: same greedy text as without --kv-dir" 'cmp -s "$TMP/o0" "$TMP/o2"'

run -p "$P and then some more words after the prompt" -n 4 --kv-dir "$KV" "${FLAGS[@]}" \
    --stats-json "$TMP/s3.json" >"$TMP/o3" 2>"$TMP/e3" || fail "third kv run exit $?"
check "third process (prompt + suffix) restored the longest prefix" \
    '[ "$(js "$TMP/s3.json" kv_restored_tokens)" = "$cold" ]'

"$BIN" run -m "$M2" -t 1 --temp 0 -p "$P" -n 2 --kv-dir "$KV" "${FLAGS[@]}" \
    --stats-json "$TMP/s4.json" >/dev/null 2>"$TMP/e4" || fail "other model exit $?"
check "another model skips the checkpoints with a warning" \
    '[ "$(js "$TMP/s4.json" kv_restored_tokens)" = 0 ] && grep -q "another model" "$TMP/e4"'

run -p "$P" -n 2 --kv-dir "$KV" --kv-trim -1 >/dev/null 2>"$TMP/e5"
rc=$?
check "bad --kv-trim exits 2 naming the flag" '[ $rc -eq 2 ] && grep -q "kv-trim" "$TMP/e5"'
run -p "$P" -n 2 --kv-dir "$KV" --kv-interval 2147483648 >/dev/null 2>"$TMP/e5b"
rc=$?
check "an out-of-range --kv-interval exits 2 giving the range" '[ $rc -eq 2 ] && grep -q "kv-interval must be an integer from 0 to 2147483647" "$TMP/e5b"'
run -p "$P" -n 2 --kv-interval 64 >/dev/null 2>"$TMP/e5c"
rc=$?
check "a policy flag without --kv-dir exits 2" '[ $rc -eq 2 ] && grep -q "kv-interval needs --kv-dir" "$TMP/e5c"'
# chat: /save and /load; a restart continues from the shutdown checkpoint
chat() { "$BIN" chat -m "$M" -t 1 -n 6 --seed 5 --kv-dir "$TMP/kvc" --kv-min-tokens 4 "$@"; }
stat() { sed -n "$3"p "$1" | sed -n "s/^chat: turn [0-9]*: prefilled \([0-9]*\) new tokens (reused \([0-9]*\)), generated \([0-9]*\) tokens.*/\\$2/p"; }
rm -rf "$TMP/kvc"
printf '/nothink\nHello there\n/save s1\n/quit\n' | chat >"$TMP/c1" 2>"$TMP/ce1" || fail "chat 1 exit $?"
check "/save names the conversation" 'grep -q "chat: saved s1" "$TMP/ce1"'
grep '^chat: turn' "$TMP/ce1" >"$TMP/t1"
p1=$(stat "$TMP/t1" 1 1) g1=$(stat "$TMP/t1" 3 1)
printf '/load s1\nHow are you?\n/quit\n' | chat >"$TMP/c2" 2>"$TMP/ce2" || fail "chat 2 exit $?"
grep '^chat: turn' "$TMP/ce2" >"$TMP/t2"
check "/load restores the conversation" 'grep -q "chat: loaded s1" "$TMP/ce2"'
check "the turn after /load reuses the loaded state ($p1 + $g1 tokens)" \
    '[ "$(stat "$TMP/t2" 2 1)" = $((p1 + g1)) ]'
printf '/load nosuch\n/load ../x\n/quit\n' | chat >/dev/null 2>"$TMP/ce3" || fail "chat 3 exit $?"
check "/load of a missing or bad name fails cleanly" '[ "$(grep -c "/load failed" "$TMP/ce3")" = 2 ]'
rm -rf "$TMP/kvc"
printf 'Hello there\n/quit\n' | chat >/dev/null 2>"$TMP/ce4" || fail "chat 4 exit $?"
grep '^chat: turn' "$TMP/ce4" >"$TMP/t4"
q1=$(stat "$TMP/t4" 1 1)
printf 'Hello there\n/quit\n' | chat >/dev/null 2>"$TMP/ce5" || fail "chat 5 exit $?"
grep '^chat: turn' "$TMP/ce5" >"$TMP/t5"
check "a restarted chat continues from the shutdown checkpoint (reused $((q1 - 1)))" \
    '[ "$(stat "$TMP/t5" 2 1)" = $((q1 - 1)) ] && [ "$(stat "$TMP/t5" 1 1)" = 1 ]'
# bench --kv-dir: each frontier saved, its page cache dropped, restored with
# the same logits (bench fails otherwise); CSV columns filled
"$BIN" bench -m "$M" -t 1 --fresh --frontiers 40,90 --gen-tokens 0 --kv-dir "$TMP/kvb" \
    --csv "$TMP/b.csv" >"$TMP/b.out" 2>"$TMP/b.err" || fail "bench --kv-dir exit $?: $(cat "$TMP/b.err")"
check "bench --kv-dir reports save and restore per frontier" \
    '[ "$(grep -c " kv: save .* restore .* bytes/token" "$TMP/b.out")" = 2 ] &&
     [ "$(awk -F, "NR > 1 && \$19 > 0" "$TMP/b.csv" | wc -l)" = 2 ]'
finish cli_kv
