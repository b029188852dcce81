#!/usr/bin/env bash
# cli_chat.sh - `moestream chat` driven through a pipe: two turns, /reset,
# /quit; each later turn prefills only its new tokens (the stats line on
# stderr: the tokens reused equal everything evaluated before); in thinking
# mode the turn resumes from the snapshot taken before "<think>"; /reset
# starts over; the same input and seed give the same answers; no prompt
# noise on stdout; Ctrl-C on piped input exits 130; usage and runtime errors
# exit 2 and 1.
# Usage: bash cli_chat.sh BIN TMPDIR
. "$(dirname "$0")/lib.sh"

M="$TMP/tiny.gguf"
tiny_model "$M" --seed 1

chat() { "$BIN" chat -m "$M" -t 1 -n 10 --seed 5 "$@"; }
# field N of the stats line of turn T in file F: prefilled, reused, generated
stat() { sed -n "$3"p "$1" | sed -n "s/^chat: turn [0-9]*: prefilled \([0-9]*\) new tokens (reused \([0-9]*\)), generated \([0-9]*\) tokens.*/\\$2/p"; }

printf '/nothink\nHello there\nHow are you today?\n/reset\nAgain\n/quit\nNot read\n' \
    | chat >"$TMP/out" 2>"$TMP/err" || fail "chat exit $?"
grep '^chat: turn' "$TMP/err" >"$TMP/turns"
[ "$(wc -l <"$TMP/turns")" -eq 3 ] || fail "want 3 turns, got: $(cat "$TMP/err")"
grep -q 'chat: non-thinking mode' "$TMP/err" || fail "/nothink not acknowledged"
grep -q 'chat: conversation reset' "$TMP/err" || fail "/reset not acknowledged"
p1=$(stat "$TMP/turns" 1 1) r1=$(stat "$TMP/turns" 2 1) g1=$(stat "$TMP/turns" 3 1)
p2=$(stat "$TMP/turns" 1 2) r2=$(stat "$TMP/turns" 2 2)
p3=$(stat "$TMP/turns" 1 3) r3=$(stat "$TMP/turns" 2 3)
[ "$r1" = 0 ] || fail "turn 1 reused $r1"
[ "$g1" -gt 0 ] || fail "turn 1 generated nothing"
# turn 2 evaluates only "<｜end▁of▁sentence｜><｜User｜>How are you today?<｜Assistant｜></think>"
[ "$r2" = $((p1 + g1)) ] || fail "turn 2 reused $r2, want $p1 + $g1"
[ "$p2" -ge 5 ] && [ "$p2" -lt $((p1 + g1)) ] || fail "turn 2 prefilled $p2 tokens"
[ "$r3" = 0 ] || fail "turn after /reset reused $r3"
# "Again" is one user turn like "Hello there": BOS <｜User｜> ... <｜Assistant｜></think>
[ "$p3" -ge 5 ] && [ "$p3" -le "$p1" ] || fail "turn after /reset prefilled $p3"
[ "$(grep -c . "$TMP/out")" -ge 1 ] || fail "no answers on stdout"
head -c 2 "$TMP/out" | grep -q '^> ' && fail "prompt on stdout"

printf '/nothink\nHello there\nHow are you today?\n/reset\nAgain\n/quit\n' | chat >"$TMP/out2" 2>/dev/null
cmp -s "$TMP/out" "$TMP/out2" || fail "same input and seed, different answers"

# thinking mode: turn 2 restores the state before "<think>" (turn 1's prompt
# less one token) and evaluates from "</think>answer" on
printf 'Hello there\nHow are you today?\n' | chat >/dev/null 2>"$TMP/terr" || fail "think chat exit $?"
grep '^chat: turn' "$TMP/terr" >"$TMP/tturns"
[ "$(wc -l <"$TMP/tturns")" -eq 2 ] || fail "thinking: want 2 turns: $(cat "$TMP/terr")"
tp1=$(stat "$TMP/tturns" 1 1) tr2=$(stat "$TMP/tturns" 2 2)
[ "$tr2" = $((tp1 - 1)) ] || fail "thinking turn 2 reused $tr2, want $tp1 - 1"

# commands, end of input without /quit, a conversation too long for -c
printf '/help\n/bogus\n/think\n' | chat >/dev/null 2>"$TMP/cerr" || fail "commands exit $?"
grep -q '^/reset ' "$TMP/cerr" || fail "/help does not list /reset"
grep -q 'unknown command /bogus' "$TMP/cerr" || fail "/bogus not reported"
printf 'one two three four five six seven eight nine ten\nok\n' | chat -c 12 >/dev/null 2>"$TMP/ctx" \
    || fail "context overflow exit $?"
grep -q 'does not fit the context (12)' "$TMP/ctx" || fail "context overflow not reported: $(cat "$TMP/ctx")"

# Ctrl-C while a piped chat waits for its next line: interrupted, status
# 130 (not the 0 of an input that ended)
mkfifo "$TMP/in"
"$BIN" chat -m "$M" -t 1 -n 10 --seed 5 <"$TMP/in" >/dev/null 2>"$TMP/int.err" &
pid=$!
exec 7>"$TMP/in"
echo hi >&7
for _ in $(seq 100); do grep -q '^chat: turn 1' "$TMP/int.err" && break; sleep 0.1; done
grep -q '^chat: turn 1' "$TMP/int.err" || fail "the turn before the interrupt did not run"
kill -INT $pid
for _ in $(seq 100); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
if kill -0 $pid 2>/dev/null; then kill -9 $pid; fail "chat did not end on Ctrl-C"; fi
wait $pid
rc=$?
exec 7>&-
[ $rc -eq 130 ] || fail "Ctrl-C on piped input: exit $rc, want 130"
grep -q '^chat: interrupted' "$TMP/int.err" || fail "no 'interrupted' line: $(cat "$TMP/int.err")"

echo hi | "$BIN" chat >/dev/null 2>"$TMP/e"; [ $? -eq 2 ] || fail "chat without -m not exit 2"
echo hi | "$BIN" chat -m "$M" --bogus >/dev/null 2>&1; [ $? -eq 2 ] || fail "bad flag not exit 2"
echo hi | "$BIN" chat -m "$M" -n 0 >/dev/null 2>&1; [ $? -eq 2 ] || fail "-n 0 not exit 2"
echo hi | "$BIN" chat -m "$TMP/missing.gguf" >/dev/null 2>"$TMP/e"; [ $? -eq 1 ] || fail "missing model not exit 1"
grep -q '^moestream chat: .*cannot open' "$TMP/e" || fail "missing model message: $(cat "$TMP/e")"

finish cli_chat
