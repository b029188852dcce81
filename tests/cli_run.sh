#!/usr/bin/env bash
# cli_run.sh - `moestream run` and `moestream logits --text` from the outside:
# a fixed seed gives the same text twice and another seed other text; greedy
# (--temp 0) ignores the seed; -f reads the prompt from a file or standard
# input; -n bounds the tokens; timing goes to stderr
# only; --chat renders a chat prompt; usage errors exit 2 and runtime errors
# exit 1, each with one "moestream run:" line; logits --text equals logits
# --tokens of the same tokenization.
# Usage: bash cli_run.sh BIN TMPDIR
. "$(dirname "$0")/lib.sh"

M="$TMP/tiny.gguf"
tiny_model "$M" --seed 1
P="The quick brown fox"

run() { "$BIN" run -m "$M" -p "$P" -t 1 "$@"; }

run -n 24 --seed 7 >"$TMP/a" 2>"$TMP/a.err" || fail "run exit $?"
run -n 24 --seed 7 >"$TMP/b" 2>/dev/null || fail "run exit $?"
run -n 24 --seed 8 >"$TMP/c" 2>/dev/null || fail "run exit $?"
[ "$(wc -c <"$TMP/a")" -gt 2 ] || fail "no text generated"
cmp -s "$TMP/a" "$TMP/b" || fail "same seed, different text"
cmp -s "$TMP/a" "$TMP/c" && fail "different seeds, same text"
grep -Eq '^run: prefill [0-9]+ tokens in [0-9.]+ s \([0-9.]+ tok/s\); decode [0-9]+ tokens in [0-9.]+ s \([0-9.]+ tok/s\)' "$TMP/a.err" \
    || fail "stats line on stderr: $(cat "$TMP/a.err")"
grep -q 'tok/s' "$TMP/a" && fail "stats on stdout"

run -n 16 --temp 0 --seed 1 >"$TMP/g1" 2>/dev/null || fail "greedy exit $?"
run -n 16 --temp 0 --seed 2 >"$TMP/g2" 2>/dev/null || fail "greedy exit $?"
cmp -s "$TMP/g1" "$TMP/g2" || fail "greedy depends on the seed"
# -f FILE and -f - (standard input) give what -p gives for the same text;
# a prompt longer than one command-line argument may be (128 KiB) works
printf '%s' "$P" >"$TMP/p.txt"
"$BIN" run -m "$M" -f "$TMP/p.txt" -t 1 -n 16 --temp 0 >"$TMP/f1" 2>/dev/null || fail "-f exit $?"
"$BIN" run -m "$M" -f - -t 1 -n 16 --temp 0 <"$TMP/p.txt" >"$TMP/f2" 2>/dev/null || fail "-f - exit $?"
cmp -s "$TMP/g1" "$TMP/f1" || fail "-f FILE differs from -p"
cmp -s "$TMP/g1" "$TMP/f2" || fail "-f - differs from -p"
python3 -c "import sys; sys.stdout.write('fox ' * 40000)" >"$TMP/big.txt"
"$BIN" run -m "$M" -f "$TMP/big.txt" -t 1 -n 1 -c 64 >/dev/null 2>"$TMP/big.err"
grep -q 'moestream run: the prompt is [0-9]* tokens, longer than the context (64)' "$TMP/big.err" \
    || fail "a 160 KB -f prompt: $(cat "$TMP/big.err")"
# without -c the context is what the prompt and -n need: a prompt past the
# default 4096 runs (with a warning past the model's training context,
# 4096 for the tiny preset) and -n counts in the context
python3 -c "import sys; sys.stdout.write('fox ' * 1500)" >"$TMP/long.txt"
"$BIN" run -m "$M" -f "$TMP/long.txt" -t 1 -n 3 --temp 0 >/dev/null 2>"$TMP/long.err" \
    || fail "a prompt past 4096 tokens without -c: $(cat "$TMP/long.err")"
n_long=$(sed -n 's/^run: prefill \([0-9]*\) tokens.*/\1/p' "$TMP/long.err")
[ "${n_long:-0}" -gt 4096 ] || fail "the long prompt is not past 4096 tokens: $(cat "$TMP/long.err")"
grep -q "the context of $((n_long + 3)) positions (the prompt's $n_long tokens and up to -n more) is above the model's training context (4096)" \
    "$TMP/long.err" || fail "no training-context warning: $(cat "$TMP/long.err")"
grep -Eq 'decode 3 tokens' "$TMP/long.err" || fail "-n 3 after a long prompt: $(cat "$TMP/long.err")"
"$BIN" run -m "$M" -f "$TMP/long.txt" -t 1 -n 3 -c 4096 >/dev/null 2>"$TMP/long.err"
[ $? -eq 1 ] && grep -q 'longer than the context (4096)' "$TMP/long.err" \
    || fail "-c 4096 still bounds the prompt: $(cat "$TMP/long.err")"
# -n is a bound, not a need: a huge one takes the prompt and at most the
# training context's worth more (4096 here), and a model whose training
# context is short still gets a context past it for a longer prompt
"$BIN" run -m "$M" -p "$P" -t 1 -n 2147483647 --stats-json "$TMP/huge.json" >/dev/null 2>"$TMP/huge.err" \
    || fail "-n 2147483647: $(cat "$TMP/huge.err")"
python3 -c "import json,sys; n=json.load(open(sys.argv[1]))['plan']['n_ctx']; sys.exit(not 4096 < n <= 4096 + 16)" \
    "$TMP/huge.json" || fail "-n 2147483647: context $(grep -o '"n_ctx": [0-9]*' "$TMP/huge.json")"
tiny_model "$TMP/t512.gguf" --seed 1 --n-ctx-train 512
python3 -c "import sys; sys.stdout.write('fox ' * 200)" >"$TMP/p600.txt"
"$BIN" run -m "$TMP/t512.gguf" -f "$TMP/p600.txt" -t 1 -n 2 >/dev/null 2>"$TMP/t512.err" \
    || fail "a 600-token prompt, training context 512: $(cat "$TMP/t512.err")"
grep -q 'above the model.s training context (512)' "$TMP/t512.err" || fail "t512: no warning: $(cat "$TMP/t512.err")"
run -n 16 --top-k 1 --seed 3 >"$TMP/k1" 2>/dev/null || fail "top-k 1 exit $?"
cmp -s "$TMP/g1" "$TMP/k1" || fail "--top-k 1 differs from greedy"

run -n 3 --seed 1 >/dev/null 2>"$TMP/n3.err" || fail "-n 3 exit $?"
grep -Eq 'decode [0-3] tokens' "$TMP/n3.err" || fail "-n 3 decoded more: $(cat "$TMP/n3.err")"

run -n 8 --chat --seed 1 >/dev/null 2>"$TMP/chat.err" || fail "--chat exit $?"
run -n 8 --chat --nothink --seed 1 >/dev/null 2>"$TMP/nothink.err" || fail "--nothink exit $?"
# the chat rendering adds BOS, <｜User｜>, <｜Assistant｜> and <think> or </think>
plain=$(run -n 1 --seed 1 2>&1 >/dev/null | sed -n 's/^run: prefill \([0-9]*\) tokens.*/\1/p')
chat=$(sed -n 's/^run: prefill \([0-9]*\) tokens.*/\1/p' "$TMP/chat.err")
[ -n "$plain" ] && [ "$chat" = $((plain + 3)) ] || fail "chat prompt tokens $chat vs plain $plain + 3"

# usage errors: exit 2, one line naming the problem
expect() { # CODE PATTERN ARGS...
    local code=$1 pat=$2
    shift 2
    "$BIN" run "$@" >"$TMP/e.out" 2>"$TMP/e.err"
    local rc=$?
    [ $rc -eq "$code" ] || fail "run $* exit $rc, want $code"
    grep -q -- "$pat" "$TMP/e.err" || fail "run $*: no '$pat' in: $(head -2 "$TMP/e.err")"
    [ -s "$TMP/e.out" ] && fail "run $*: output on stdout"
}
expect 2 'moestream run: -n must be an integer >= 1' -m "$M" -p x -n 0
expect 2 'moestream run: -n must be' -m "$M" -p x -n abc
expect 2 "moestream run: unknown option or missing value '--bogus'" -m "$M" -p x --bogus
expect 2 'moestream run: -m MODEL is required' -p x
expect 2 'moestream run: -p TEXT or -f FILE is required' -m "$M"
expect 2 'moestream run: the prompt is empty' -m "$M" -p ""
expect 2 'moestream run: --top-p must be in \[0, 1\]' -m "$M" -p x --top-p 2
expect 2 'moestream run: --temp must be a finite number' -m "$M" -p x --temp warm
expect 2 'moestream run: --seed must be' -m "$M" -p x --seed -1
expect 2 "moestream run: unexpected argument 'extra'" -m "$M" -p x extra
expect 1 'moestream run: .*cannot open' -m "$TMP/missing.gguf" -p x
expect 1 'moestream run: the prompt is [0-9]* tokens, longer than the context (4)' -m "$M" -p "$P" -c 4

# logits --text is logits --tokens of the text's tokens (BOS included)
"$BIN" logits -m "$M" --text "$P" --top 3 -t 1 >"$TMP/lt" 2>/dev/null || fail "logits --text exit $?"
toks=$(sed -n 's/^{"tokens":\[\([0-9,]*\)\].*/\1/p' "$TMP/lt")
[ -n "$toks" ] || fail "logits --text: no tokens in output"
"$BIN" logits -m "$M" --tokens "$toks" --top 3 -t 1 >"$TMP/lk" 2>/dev/null || fail "logits --tokens exit $?"
cmp -s "$TMP/lt" "$TMP/lk" || fail "logits --text differs from --tokens $toks"
bos=$("$BIN" inspect "$M" | sed -n 's/.*tokenizer.ggml.bos_token_id = \([0-9]*\).*/\1/p')
[ "${toks%%,*}" = "$bos" ] || fail "logits --text does not start with BOS $bos: $toks"
"$BIN" logits -m "$M" --text x --tokens 1 >/dev/null 2>&1; [ $? -eq 2 ] || fail "--text with --tokens not exit 2"
"$BIN" logits -m "$M" >/dev/null 2>&1; [ $? -eq 2 ] || fail "logits without input not exit 2"
"$BIN" logits -m "$M" --text "" >/dev/null 2>&1; [ $? -eq 2 ] || fail "logits --text '' not exit 2"

finish cli_run
