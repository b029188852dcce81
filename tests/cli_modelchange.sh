#!/usr/bin/env bash
# cli_modelchange.sh - the model file changes under a running process:
# `chat` answers a turn, the file is truncated (or rewritten in place), the
# next turn stops with one clean line and exit 1 (resident and --stream);
# `run` stops the same way when the file is cut during generation. Never
# "Bus error" (exit 135).
# Usage: bash cli_modelchange.sh BIN TMPDIR
. "$(dirname "$0")/lib.sh"
trap '' PIPE # a write to the chat that stopped must not end this script

M0="$TMP/tiny0.gguf"
tiny_model "$M0" --seed 2
M="$TMP/tiny.gguf"

# wait_for FILE PATTERN: until FILE has a line matching PATTERN (30 s at most)
wait_for() {
    for _ in $(seq 300); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
    return 1
}

# chat_change MODE CHANGE: one turn, CHANGE the file, a second turn.
chat_change() {
    local mode=$1 change=$2
    cp "$M0" "$M"
    rm -f "$TMP/in" "$TMP/rc" "$TMP/out" "$TMP/err"; mkfifo "$TMP/in"
    local extra=()
    [ "$mode" = stream ] && extra=(--stream --cache-experts 2)
    ( "$BIN" chat -m "$M" -n 4 -t 1 --temp 0 "${extra[@]}" <"$TMP/in" >"$TMP/out" 2>"$TMP/err"
      echo $? >"$TMP/rc" ) &
    exec 3>"$TMP/in"
    echo "hello there" >&3
    wait_for "$TMP/err" '^chat: turn 1' || fail "$mode/$change: turn 1 did not finish: $(cat "$TMP/err")"
    case $change in
        truncate) truncate -s 100000 "$M" ;;
        cut-experts) truncate -s $(( $(stat -c %s "$M") - 4096 )) "$M" ;;
        rewrite) printf 'XXXX' | dd of="$M" bs=1 seek=5000000 conv=notrunc status=none ;;
    esac
    echo "and again" >&3
    exec 3>&- # end of input: chat ends there if it did not stop at turn 2

    wait
    local rc; rc=$(cat "$TMP/rc")
    [ "$rc" = 1 ] || fail "$mode/$change: chat exit $rc, want 1: $(tail -n 2 "$TMP/err")"
    [ "$(grep -c '^moestream chat: ' "$TMP/err")" -eq 1 ] || fail "$mode/$change: no error line: $(cat "$TMP/err")"
    grep -q "^moestream chat: .*tiny.gguf changed on disk while in use" "$TMP/err" \
        || fail "$mode/$change: message: $(grep '^moestream' "$TMP/err")"
    [ "$(grep -c '^chat: turn 2' "$TMP/err")" -eq 0 ] || fail "$mode/$change: turn 2 answered"
}
for mode in resident stream; do
    for change in truncate cut-experts rewrite; do chat_change $mode $change; done
done
echo "ok: chat"

# run: cut the file while it generates. The tiny model decodes ~1,500
# tokens/s and may reach end of sentence within one poll, so the process is
# stopped (SIGSTOP) as soon as it has printed, the file cut, and the process
# continued: it must then stop with the error. Only when it had already
# finished its output at the stop (nothing printed after) is the round
# retried, with another seed.
run_cut() { # run_cut MODE SEED: 0 done, 2 too late (retry)
    local mode=$1 seed=$2 extra=() pid n0
    cp "$M0" "$M"
    rm -f "$TMP/rout" "$TMP/rerr"
    [ "$mode" = stream ] && extra=(--stream --cache-experts 2)
    "$BIN" run -m "$M" -p "Once upon a time" -n 4000 -c 4096 -t 1 --temp 1 --seed "$seed" \
        "${extra[@]}" >"$TMP/rout" 2>"$TMP/rerr" &
    pid=$!
    for _ in $(seq 3000); do [ -s "$TMP/rout" ] && break; sleep 0.01; done
    kill -STOP "$pid" 2>/dev/null
    n0=$(stat -c %s "$TMP/rout")
    truncate -s 100000 "$M"
    kill -CONT "$pid" 2>/dev/null
    wait "$pid"
    local rc=$?
    if [ "$rc" = 0 ] && [ "$(stat -c %s "$TMP/rout")" = "$n0" ]; then return 2; fi
    [ "$rc" = 1 ] || fail "run $mode: exit $rc, want 1: $(tail -n 2 "$TMP/rerr")"
    [ "$(grep -c '^moestream run: ' "$TMP/rerr")" -eq 1 ] || fail "run $mode: $(cat "$TMP/rerr")"
    grep -q "changed on disk while in use" "$TMP/rerr" || fail "run $mode: message $(cat "$TMP/rerr")"
    return 0
}
for mode in resident stream; do
    done_=0
    for seed in 1 2 3 4 5 6 7 8; do
        rc=0; run_cut "$mode" "$seed" || rc=$?
        [ "$rc" = 0 ] && { done_=1; break; }
    done
    [ "$done_" = 1 ] || fail "run $mode: finished before the file could be cut, 8 times"
done
echo "ok: run"

rm -f "$TMP"/*.gguf "$TMP/in"
finish cli_modelchange
