#!/usr/bin/env bash
# cli_options.sh - every option is checked before any work, each problem is
# one line naming the flag: contradictory flags, flags that cannot apply,
# unreadable/unwritable files given to flags, numbers out of range; options
# that cannot change this model warn; a failed write of the output is an
# error. Across run, chat, logits, bench, serve and inspect.
# Usage: bash cli_options.sh BIN TMPDIR
. "$(dirname "$0")/lib.sh"

M="$TMP/tiny.gguf"
tiny_model "$M" --seed 4

# expect CODE PATTERN CMD ARGS...: exit CODE, exactly one stderr line
# matching PATTERN, nothing on stdout
expect() {
    local code=$1 pat=$2
    shift 2
    timeout 60 "$BIN" "$@" >"$TMP/e.out" 2>"$TMP/e.err" </dev/null
    local rc=$?
    [ $rc -eq "$code" ] || fail "$* exit $rc, want $code: $(head -3 "$TMP/e.err")"
    [ "$(wc -l <"$TMP/e.err")" -eq 1 ] || fail "$*: not one line: $(head -5 "$TMP/e.err")"
    grep -q -- "$pat" "$TMP/e.err" || fail "$*: no '$pat' in: $(head -2 "$TMP/e.err")"
    [ -s "$TMP/e.out" ] && fail "$*: output on stdout"
}

# ---- files given to flags: checked first, named, nothing generated
printf 'not a hotlist\n' >"$TMP/bad.hot"
for cmd in run logits; do
    a=(-p x); [ $cmd = logits ] && a=(--tokens 1,2)
    expect 1 "moestream $cmd: --hotlist: .*missing.hot" $cmd -m "$M" "${a[@]}" --hotlist "$TMP/missing.hot"
    expect 1 "moestream $cmd: --hotlist: .*bad.hot" $cmd -m "$M" "${a[@]}" --hotlist "$TMP/bad.hot"
    expect 1 "moestream $cmd: -m: cannot open .*nope.gguf" $cmd -m "$TMP/nope.gguf" "${a[@]}"
done
expect 1 'moestream chat: --hotlist: ' chat -m "$M" --hotlist "$TMP/missing.hot"
expect 1 'moestream bench: --hotlist: ' bench -m "$M" --hotlist "$TMP/bad.hot"
expect 1 'moestream serve: --hotlist: ' serve -m "$M" --hotlist "$TMP/missing.hot"
expect 1 'moestream serve: -m: cannot open' serve -m "$TMP/nope.gguf"
expect 1 "moestream run: --stats-json: cannot write $TMP/no/dir/s.json" run -m "$M" -p x --stats-json "$TMP/no/dir/s.json"
expect 1 'moestream run: --profile-routing: cannot write' run -m "$M" -p x --profile-routing "$TMP/no/dir/p.hot"
expect 1 'moestream bench: --csv: cannot write' bench -m "$M" --csv "$TMP/no/dir/b.csv"
expect 1 'moestream bench: --prompt-file: cannot read' bench -m "$M" --prompt-file "$TMP/no.txt"
expect 1 "moestream run: -f: cannot open $TMP/no.txt" run -m "$M" -f "$TMP/no.txt"
: >"$TMP/empty.txt"
expect 1 "moestream run: -f: .*empty.txt is empty" run -m "$M" -f "$TMP/empty.txt"
expect 1 "moestream run: -f: /dev/zero holds more than [0-9]* bytes" run -m "$M" -f /dev/zero
expect 1 "moestream serve: --port-file: cannot write $TMP/no/dir/port" serve -m "$M" --port-file "$TMP/no/dir/port"
printf 'a\0b' >"$TMP/nul.txt"
expect 1 "moestream run: -f: .*nul.txt holds a NUL byte" run -m "$M" -f "$TMP/nul.txt"
[ -e "$TMP/no" ] && fail "a checked path was created"

# ---- contradictions and flags that cannot apply: usage errors (2)
for cmd in run chat logits bench serve; do
    a=(); [ $cmd = run ] && a=(-p x); [ $cmd = logits ] && a=(--tokens 1)
    expect 2 "moestream $cmd: --stream and --no-stream contradict" $cmd -m "$M" "${a[@]}" --stream --no-stream
    expect 2 "moestream $cmd: --cache-experts applies only when streaming" $cmd -m "$M" "${a[@]}" --no-stream --cache-experts 4
    expect 2 "moestream $cmd: --full-layers applies only when streaming" $cmd -m "$M" "${a[@]}" --no-stream --full-layers 1
    expect 2 "moestream $cmd: --cache-experts takes a slot count >= 1" $cmd -m "$M" "${a[@]}" --cache-experts 0
done
expect 2 'moestream run: --nothink applies to --chat prompts only' run -m "$M" -p x --nothink
expect 2 'moestream run: -p and -f exclude each other' run -m "$M" -p x -f "$TMP/nul.txt"
expect 2 'moestream run: --temp must be a finite number' run -m "$M" -p x --temp inf
expect 2 'moestream chat: --temp must be a finite number' chat -m "$M" --temp nan
expect 2 'moestream logits: --tokens and --text exclude each other' logits -m "$M" --tokens 1,2 --text hi
expect 2 'moestream logits: --top must be an integer >= 1' logits -m "$M" --tokens 1,2 --top 0
expect 2 'moestream logits: --top must be an integer >= 1' logits -m "$M" --tokens 1,2 --top x
expect 2 'moestream logits: --chunk must be an integer >= 1' logits -m "$M" --tokens 1,2 --chunk -3
expect 2 'moestream logits: --top and --full exclude each other' logits -m "$M" --tokens 1,2 --top 3 --full
expect 2 'moestream logits: --tokens ID,ID,... or --text TEXT is required' logits -m "$M"
expect 2 'moestream bench: --frontiers excludes --step-incr' bench -m "$M" --frontiers 8,16 --step-incr 4
echo "ok: usage errors"

# ---- options this model cannot use: one warning line, the run goes on
"$BIN" run -m "$M" -p hi -n 2 -t 1 --cache-experts 4 --full-layers 1 >/dev/null 2>"$TMP/w.err" || fail "resident + streaming options: exit $?"
grep -q '^moestream run: warning: the model is resident .*--cache-experts, --full-layers have no effect' "$TMP/w.err" \
    || fail "no warning for streaming options on a resident model: $(cat "$TMP/w.err")"
"$BIN" run -m "$M" -p hi -n 2 -t 1 -c 8192 >/dev/null 2>"$TMP/c.err" || fail "-c large: exit $?"
grep -q "^moestream run: warning: -c 8192 is above the model's training context" "$TMP/c.err" \
    || fail "no warning for -c above the training context: $(cat "$TMP/c.err")"
# --stream on a model that fits: the plan line says so
"$BIN" run -m "$M" -p hi -n 2 -t 1 --stream >/dev/null 2>"$TMP/s.err" || fail "--stream: exit $?"
grep -q 'streaming experts: [0-9.]* GiB resident need <= [0-9.]* GiB usable .*--stream' "$TMP/s.err" \
    || fail "plan line under --stream: $(grep streaming "$TMP/s.err")"
echo "ok: warnings"

# ---- inspect takes -m like every other command
"$BIN" inspect "$M" >"$TMP/i1" || fail "inspect FILE"
"$BIN" inspect -m "$M" >"$TMP/i2" || fail "inspect -m FILE"
"$BIN" inspect --model "$M" --json >"$TMP/i3" || fail "inspect --model FILE --json"
cmp -s "$TMP/i1" "$TMP/i2" || fail "inspect -m differs"
expect 2 'moestream inspect: more than one file given' inspect -m "$M" "$M"
expect 2 'moestream inspect: -m needs a file' inspect -m

# ---- the output cannot be written: exit 1
if [ -w /dev/full ]; then
    "$BIN" run -m "$M" -p hi -n 4 -t 1 >/dev/full 2>"$TMP/f.err"
    rc=$?
    [ $rc -eq 1 ] || fail "run > /dev/full: exit $rc"
    grep -q '^moestream run: cannot write the output' "$TMP/f.err" || fail "run > /dev/full: $(cat "$TMP/f.err")"
    "$BIN" logits -m "$M" --tokens 1,2 -t 1 >/dev/full 2>"$TMP/f.err"
    [ $? -eq 1 ] || fail "logits > /dev/full: not exit 1"
    "$BIN" inspect "$M" --json >/dev/full 2>"$TMP/f.err"
    [ $? -eq 1 ] || fail "inspect > /dev/full: not exit 1"
fi
echo "ok: output errors"

rm -f "$TMP"/*.gguf
finish cli_options
