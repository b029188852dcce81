#!/usr/bin/env bash
# cli_bench.sh BIN TMPDIR - `moestream bench` on a tiny model: the CSV has
# the documented columns, one row per frontier with strictly increasing
# contexts whose intervals add up, positive speeds, a short text is repeated
# (and said so), streaming rows report bytes read, and bad flags are usage
# errors (exit 2) that name the flag.
. "$(dirname "$0")/lib.sh"

M=$TMP/tiny.gguf
tiny_model "$M" --experts-type q8_0 --seed 5
TEXT=$SRC/bench/pride-and-prejudice-ch1-19.txt
check "shipped text exists" "[ -s '$TEXT' ]"

COLS="context,interval_tokens,prefill_seconds,prefill_tok_s,decode_tokens,decode_seconds,decode_tok_s,prefill_bytes_read,decode_bytes_read,prefill_passes,prefill_hit_rate,decode_hit_rate,io_wait_seconds,kv_bytes,peak_rss_bytes,streaming,kv_save_seconds,kv_restore_seconds,kv_file_bytes"

# Validates a bench CSV: header, row count, increasing contexts, intervals
# summing to the context, positive speeds, decode token count, KV growing.
csv_ok() { # FILE ROWS GEN STREAMING
  python3 - "$@" <<'EOF'
import csv, sys
path, rows, gen, streaming = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
r = list(csv.DictReader(open(path)))
ok = len(r) == rows
prev = 0
kv = -1
for row in r:
    c, n = int(row["context"]), int(row["interval_tokens"])
    ok &= c > prev and n == c - prev
    ok &= float(row["prefill_tok_s"]) > 0 and int(row["decode_tokens"]) == gen
    ok &= (float(row["decode_tok_s"]) > 0) == (gen > 0)
    ok &= int(row["kv_bytes"]) > kv and int(row["peak_rss_bytes"]) > 0
    ok &= row["streaming"] == streaming
    if streaming == "1":
        ok &= int(row["prefill_bytes_read"]) > 0
    else:
        ok &= int(row["prefill_bytes_read"]) == 0 and row["decode_hit_rate"] == ""
    prev, kv = c, int(row["kv_bytes"])
sys.exit(0 if ok else 1)
EOF
}

"$BIN" bench -m "$M" --prompt-file "$TEXT" --ctx-start 32 --ctx-max 200 --gen-tokens 3 -t 1 \
    --no-stream --csv "$TMP/mul.csv" >"$TMP/mul.out" 2>"$TMP/mul.err"
check "bench (x2 steps) exits 0" "[ $? -eq 0 ]"
check "CSV header has the columns" "[ \"\$(head -1 '$TMP/mul.csv')\" = '$COLS' ]"
check "frontiers 32,64,128,200" "[ \"\$(tail -n +2 '$TMP/mul.csv' | cut -d, -f1 | paste -sd,)\" = 32,64,128,200 ]"
check "resident CSV rows are consistent" "csv_ok '$TMP/mul.csv' 4 3 0"
check "table on stdout" "grep -q 'pp tok/s' '$TMP/mul.out' && [ \$(grep -cE '^ +[0-9]+ ' '$TMP/mul.out') -eq 4 ]"

printf 'A short text, walked again and again.\n' >"$TMP/short.txt"
"$BIN" bench -m "$M" --prompt-file "$TMP/short.txt" --ctx-start 40 --ctx-max 120 --step-incr 40 \
    --gen-tokens 0 -t 1 --no-stream --csv "$TMP/incr.csv" >/dev/null 2>"$TMP/incr.err"
check "bench (+40 steps, no probe) exits 0" "[ $? -eq 0 ]"
check "short text is repeated and said so" "grep -q 'repeated' '$TMP/incr.err'"
check "incremental CSV rows are consistent" "csv_ok '$TMP/incr.csv' 3 0 0"

"$BIN" bench -m "$M" --prompt-file "$TEXT" --ctx-start 48 --ctx-max 96 --gen-tokens 2 -t 1 \
    --stream --cache-experts 4 --csv "$TMP/stream.csv" >/dev/null 2>"$TMP/stream.err"
check "streaming bench exits 0" "[ $? -eq 0 ]"
check "streaming CSV rows read bytes" "csv_ok '$TMP/stream.csv' 2 2 1"

# --fresh --frontiers: every row is a prompt of that length from empty
"$BIN" bench -m "$M" --prompt-file "$TEXT" --fresh --frontiers 16,40,72 --gen-tokens 2 -t 1 \
    --no-stream --csv "$TMP/fresh.csv" >/dev/null 2>&1
check "bench --fresh --frontiers exits 0" "[ $? -eq 0 ]"
check "fresh rows: interval == context" "[ \"\$(tail -n +2 '$TMP/fresh.csv' | cut -d, -f1,2 | paste -sd' ')\" = '16,16 40,40 72,72' ]"

# --warmup: an unrecorded run first; the walk still starts from empty
"$BIN" bench -m "$M" --prompt-file "$TEXT" --warmup --frontiers 16,40 --gen-tokens 2 -t 1 \
    --no-stream --csv "$TMP/warm.csv" >"$TMP/warm.out" 2>&1
check "bench --warmup exits 0" "[ $? -eq 0 ]"
check "warm rows start from empty" "[ \"\$(tail -n +2 '$TMP/warm.csv' | cut -d, -f1,2 | paste -sd' ')\" = '16,16 40,24' ]"
check "warm CSV rows are consistent" "csv_ok '$TMP/warm.csv' 2 2 0"

usage_err() { # NAME PATTERN ARGS...
  local name=$1 pat=$2
  shift 2
  "$BIN" bench "$@" >/dev/null 2>"$TMP/usage.err"
  local rc=$?
  check "$name is a usage error" "[ $rc -eq 2 ] && grep -q -- '$pat' '$TMP/usage.err'"
}
usage_err "missing -m" "-m MODEL" --ctx-max 64
usage_err "non-numeric --ctx-start" "--ctx-start" -m "$M" --ctx-start x
usage_err "zero --ctx-max" "--ctx-max" -m "$M" --ctx-max 0
usage_err "negative --gen-tokens" "--gen-tokens" -m "$M" --gen-tokens -1
usage_err "--step-mul <= 1" "--step-mul" -m "$M" --step-mul 1
usage_err "--step-incr with --step-mul" "exclude" -m "$M" --step-incr 8 --step-mul 2
usage_err "start > max" "larger than" -m "$M" --ctx-start 64 --ctx-max 32
usage_err "-c too small" "cannot hold" -m "$M" -c 64 --ctx-start 32 --ctx-max 64 --gen-tokens 8
usage_err "decreasing --frontiers" "--frontiers" -m "$M" --frontiers 64,32
usage_err "unknown flag" "unknown option" -m "$M" --frobnicate
"$BIN" bench -m "$TMP/missing.gguf" --prompt-file "$TEXT" >/dev/null 2>"$TMP/missing.err"
check "missing model is a runtime error" "[ $? -eq 1 ] && grep -q 'missing.gguf' '$TMP/missing.err'"
"$BIN" bench -m "$M" --prompt-file "$TMP/no-such-text" >/dev/null 2>"$TMP/notext.err"
check "missing text is a runtime error" "[ $? -eq 1 ] && grep -q 'no-such-text' '$TMP/notext.err'"

finish cli_bench
