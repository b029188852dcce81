#!/usr/bin/env bash
# cli_stream.sh BIN TMPDIR - streaming from the command line: a greedy run
# gives the same text resident and streamed (tight and automatic caches), the
# stats JSON carries its fields, and bad cache options are usage errors.
. "$(dirname "$0")/lib.sh"

M=$TMP/tiny-q4k.gguf
tiny_model "$M" --experts-type q4_k --dense-type q8_0 --seed 3
P="The quick brown fox jumps over the lazy dog, then streams experts from disk."
"$BIN" run -m "$M" -p "$P" -n 24 --temp 0 --no-stream >"$TMP/resident.txt" 2>/dev/null
# resident weights: a private copy on huge pages by default, the file mapping
# with --mmap; the same text either way
"$BIN" run -m "$M" -p "$P" -n 24 --temp 0 --no-stream --mmap >"$TMP/resident-mmap.txt" 2>"$TMP/resident-mmap.err"
check "resident --mmap == resident copy" "cmp -s '$TMP/resident.txt' '$TMP/resident-mmap.txt'"
check "--mmap: no warning" "! grep -qi 'warn\|huge pages' '$TMP/resident-mmap.err'"
"$BIN" bench -m "$M" --no-stream --frontiers 8 --gen-tokens 1 --mmap >/dev/null 2>"$TMP/bench-mmap.err"
check "bench --mmap plan line says mapped" "grep -q 'GiB of weights (mapped)' '$TMP/bench-mmap.err'"
if grep -qs -e '\[always\]' -e '\[madvise\]' /sys/kernel/mm/transparent_hugepage/enabled; then
  "$BIN" bench -m "$M" --no-stream --frontiers 8 --gen-tokens 1 >/dev/null 2>"$TMP/bench-copy.err"
  check "bench plan line says copied" "grep -q 'GiB of weights (copied to huge pages)' '$TMP/bench-copy.err'"
  check "the copy was made (no fallback warning)" "! grep -q 'no private copy' '$TMP/bench-copy.err'"
fi
for cache in 3 5 64MB; do
  "$BIN" run -m "$M" -p "$P" -n 24 --temp 0 --stream --cache-experts $cache \
      --stats-json "$TMP/stats-$cache.json" >"$TMP/stream-$cache.txt" 2>"$TMP/stream-$cache.err"
  check "streamed (cache $cache) == resident" "cmp -s '$TMP/resident.txt' '$TMP/stream-$cache.txt'"
  check "plan line printed (cache $cache)" "grep -q 'streaming experts' '$TMP/stream-$cache.err'"
done
for key in prefill_tokens prefill_seconds decode_tokens decode_seconds bytes_read proc_read_bytes \
           routed_bytes passes cache_hits cache_misses io_wait_seconds compute_seconds \
           peak_rss_bytes cache_budget_bytes prefill_io_wait_seconds decode_io_wait_seconds; do
  check "stats has $key" "grep -q '\"$key\":' '$TMP/stats-3.json'"
done
check "run line splits I/O wait" "grep -q '^run: .*I/O wait: prefill [0-9.]* s, decode [0-9.]* s' '$TMP/stream-3.err'"
check "I/O wait split adds up" "python3 -c \"import json,sys; d=json.load(open('$TMP/stats-3.json')); sys.exit(0 if abs(d['prefill_io_wait_seconds']+d['decode_io_wait_seconds']-d['io_wait_seconds'])<1e-6 else 1)\""
check "tight cache reads from disk" "python3 -c \"import json,sys; d=json.load(open('$TMP/stats-3.json')); sys.exit(0 if d['bytes_read']>0 and d['cache_misses']>0 and d['streaming'] else 1)\""
check "large cache hits" "python3 -c \"import json,sys; d=json.load(open('$TMP/stats-64MB.json')); sys.exit(0 if d['cache_hits']>0 else 1)\""

"$BIN" run -m "$M" -p "$P" -n 2 --cache-experts 12XB >/dev/null 2>"$TMP/bad.err"
check "bad --cache-experts is a usage error" "[ $? -eq 2 ] && grep -q 'cache-experts' '$TMP/bad.err'"
"$BIN" run -m "$M" -p "$P" -n 2 --cache-pct 0 >/dev/null 2>&1
check "bad --cache-pct is a usage error" "[ $? -eq 2 ]"
"$BIN" run -m "$M" -p "$P" -n 2 --stream --hotlist "$TMP/missing-hotlist" >/dev/null 2>"$TMP/hl.err"
check "missing hotlist is a runtime error" "[ $? -eq 1 ] && grep -q 'missing-hotlist' '$TMP/hl.err'"

# One-pass prefill: a long prompt in one step reads each layer once, gives the
# resident text (also with --prefill-chunk 8), and the routing profile it
# writes is a hotlist that --hotlist accepts, with n_tokens * k hits a layer.
LP="$P $P $P $P"
"$BIN" run -m "$M" -p "$LP" -n 8 --temp 0 --no-stream >"$TMP/long-resident.txt" 2>/dev/null
"$BIN" run -m "$M" -p "$LP" -n 8 --temp 0 --stream --cache-experts 4 --prefill-chunk 0 \
    --stats-json "$TMP/long.json" --profile-routing "$TMP/routing.hot" >"$TMP/long-stream.txt" 2>/dev/null
check "whole-prompt streamed prefill == resident" "cmp -s '$TMP/long-resident.txt' '$TMP/long-stream.txt'"
check "one pass over the routed weights" "python3 -c \"import json,sys; d=json.load(open('$TMP/long.json')); sys.exit(0 if d['layer_reads']>0 and 1.0<=d['passes']<=1.05 and d['prefill_chunk']==-1 else 1)\""
"$BIN" run -m "$M" -p "$LP" -n 8 --temp 0 --stream --cache-experts 4 --prefill-chunk 8 \
    --stats-json "$TMP/chunk8.json" >"$TMP/chunk8.txt" 2>/dev/null
check "--prefill-chunk 8 == resident" "cmp -s '$TMP/long-resident.txt' '$TMP/chunk8.txt'"
check "chunked prefill reads more than once" "python3 -c \"import json,sys; d=json.load(open('$TMP/chunk8.json')); sys.exit(0 if d['passes']>1.5 and d['prefill_chunk']==8 else 1)\""
# Disk KV checkpoints inside the prompt (cold, continued at 32, 64, ...) are
# captured in the one pass: no extra read of the routed weights.
rm -rf "$TMP/kv1p"
"$BIN" run -m "$M" -p "$LP" -n 8 --temp 0 --stream --cache-experts 4 --kv-dir "$TMP/kv1p" \
    --kv-min-tokens 8 --kv-interval 32 --kv-align 1 --kv-trim 3 \
    --stats-json "$TMP/kv1p.json" >"$TMP/kv1p.txt" 2>"$TMP/kv1p.err"
check "prefill with checkpoints == resident" "cmp -s '$TMP/long-resident.txt' '$TMP/kv1p.txt'"
check "checkpoints written (cold and continued)" "grep -q 'kv: saved .*(cold' '$TMP/kv1p.err' && [ \$(grep -c 'kv: saved .*(continued' '$TMP/kv1p.err') -ge 2 ]"
check "checkpoints cost no extra pass" "python3 -c \"import json,sys; d=json.load(open('$TMP/kv1p.json')); sys.exit(0 if d['layer_reads']>0 and 1.0<=d['passes']<=1.05 else 1)\""
check "the default streamed pass: 32768 tokens" "python3 -c \"import json,sys; d=json.load(open('$TMP/kv1p.json')); sys.exit(0 if d['prefill_chunk']==32768 else 1)\""
# On a terminal (script(1) gives stderr a pty) the prefill draws a progress
# bar from the engine's per-layer progress and still reads each layer once.
if command -v script >/dev/null 2>&1; then
  script -qec "'$BIN' run -m '$M' -p '$LP $LP' -n 8 --temp 0 --stream --cache-experts 4 \
      --stats-json '$TMP/tty.json'" /dev/null >"$TMP/tty.out" 2>&1
  check "a terminal shows the prefill bar" "grep -q 'prefill \[#' '$TMP/tty.out'"
  check "the bar costs no extra pass" "python3 -c \"import json,sys; d=json.load(open('$TMP/tty.json')); sys.exit(0 if d['prefill_tokens']>64 and d['layer_reads']>0 and 1.0<=d['passes']<=1.05 else 1)\""
  # checkpoint log lines during the prefill start on a line of their own
  rm -rf "$TMP/kvtty"
  script -qec "'$BIN' run -m '$M' -p '$LP $LP' -n 2 --temp 0 --no-stream --kv-dir '$TMP/kvtty' \
      --kv-interval 64 --kv-min-tokens 1" /dev/null >"$TMP/kvtty.out" 2>&1
  check "log lines do not run into the bar" "grep -q 'kv: saved' '$TMP/kvtty.out' && ! tr '\\r' '\\n' <'$TMP/kvtty.out' | grep -q 'tok/smoestream'"
  # a narrow terminal: every redraw stays one column short of its width
  # (a line that wraps cannot be redrawn in place)
  script -qec "stty cols 40; '$BIN' run -m '$M' -p '$LP $LP' -n 2 --temp 0 --stream --prefill-chunk 7" \
      /dev/null >"$TMP/tty40.out" 2>&1
  check "the bar fits a 40-column terminal" "tr '\\r' '\\n' <'$TMP/tty40.out' | grep '^prefill' | awk '{ if (length(\$0) > 39) bad = 1; n++ } END { exit !(n > 0 && !bad) }'"
fi
check "routing profile header" "head -1 '$TMP/routing.hot' | grep -qx '# moestream expert hotlist v1'"
K=$("$BIN" inspect "$M" 2>/dev/null | sed -n 's/.*expert_used_count = //p')
# every evaluated token: the prompt, then each sampled token but the last
check "routing profile hits = tokens * k per layer" "python3 -c \"
import json,sys,collections
d=json.load(open('$TMP/long.json')); s=collections.Counter()
for l in open('$TMP/routing.hot').read().splitlines()[1:]:
    a=l.split(); s[int(a[0])]+=int(a[2])
n=d['prefill_tokens']+d['decode_tokens']-1
sys.exit(0 if s and set(s.values())=={n*int('$K')} else 1)\""
"$BIN" run -m "$M" -p "$P" -n 4 --temp 0 --stream --hotlist "$TMP/routing.hot" >/dev/null 2>"$TMP/hl2.err"
check "the routing profile loads as a hotlist" "[ $? -eq 0 ]"
"$BIN" run -m "$M" -p "$P" -n 2 --prefill-chunk -3 >/dev/null 2>&1
check "bad --prefill-chunk is a usage error" "[ $? -eq 2 ]"

# Spans: a 658-token prompt (two ubatches) through a 4-expert cache (no
# whole-layer reads) runs each layer's experts once over the prompt
# (--moe-span default) instead of once per ubatch (-1): fewer reads. Spans
# also serve resident sessions and layer buffers (bigger expert matmuls):
# the text is the resident one without spans in every case.
XP=$(for i in $(seq 16); do printf '%s ' "$P"; done)
"$BIN" run -m "$M" -p "$XP" -n 6 --temp 0 --no-stream --moe-span -1 \
    --stats-json "$TMP/res-nospan.json" >"$TMP/xp-resident.txt" 2>/dev/null
for span in 0 -1; do
  "$BIN" run -m "$M" -p "$XP" -n 6 --temp 0 --stream --cache-experts 4 --whole-layer-min -1 \
      --moe-span $span --stats-json "$TMP/span$span.json" >"$TMP/xp-span$span.txt" 2>/dev/null
  check "--moe-span $span == resident" "cmp -s '$TMP/xp-resident.txt' '$TMP/xp-span$span.txt'"
done
check "spans read less" "python3 -c \"import json,sys; a=json.load(open('$TMP/span0.json')); b=json.load(open('$TMP/span-1.json')); sys.exit(0 if a['prefill_tokens']>512 and a['passes']<b['passes'] else 1)\""
"$BIN" run -m "$M" -p "$XP" -n 6 --temp 0 --no-stream --stats-json "$TMP/res-span.json" \
    >"$TMP/xp-res-span.txt" 2>/dev/null
check "resident with spans == without" "cmp -s '$TMP/xp-resident.txt' '$TMP/xp-res-span.txt'"
"$BIN" run -m "$M" -p "$XP" -n 6 --temp 0 --stream --stats-json "$TMP/buf-span.json" \
    >"$TMP/xp-buf-span.txt" 2>/dev/null
check "layer buffers with spans == resident" "cmp -s '$TMP/xp-resident.txt' '$TMP/xp-buf-span.txt'"
check "resident and layer-buffer plans take spans, -1 none" "python3 -c \"import json,sys; f=lambda n: json.load(open('$TMP/'+n+'.json'))['plan']; a,b,c=f('res-span'),f('buf-span'),f('res-nospan'); sys.exit(0 if a['moe_span']>512 and not a['stream'] and b['moe_span']>512 and b['stream'] and b['layer_buffer_bytes']>0 and c['moe_span']==0 else 1)\""
# every position's top probabilities (9 digits: a float's every bit) too
"$BIN" logits -m "$M" --text "$XP" --top 4 --no-stream >"$TMP/lg-span.json" 2>/dev/null
"$BIN" logits -m "$M" --text "$XP" --top 4 --no-stream --moe-span -1 >"$TMP/lg-nospan.json" 2>/dev/null
check "resident logits with spans == without" \
    "[ -s '$TMP/lg-span.json' ] && cmp -s '$TMP/lg-span.json' '$TMP/lg-nospan.json'"
"$BIN" run -m "$M" -p "$P" -n 2 --moe-span x >/dev/null 2>&1
check "bad --moe-span is a usage error" "[ $? -eq 2 ]"

# Decode prefetch (on by default) and --full-layers keep the resident text;
# prefetch reads ahead, --no-prefetch does not; bad --full-layers is usage.
"$BIN" run -m "$M" -p "$P" -n 24 --temp 0 --stream --cache-experts 12 --full-layers 2 \
    --stats-json "$TMP/full.json" >"$TMP/full.txt" 2>/dev/null
check "--full-layers 2 == resident" "cmp -s '$TMP/resident.txt' '$TMP/full.txt'"
check "prefetch reads ahead" "python3 -c \"import json,sys; d=json.load(open('$TMP/full.json')); sys.exit(0 if d['prefetched_experts']>0 and 0<d['prefetch_accuracy']<=1 else 1)\""
"$BIN" run -m "$M" -p "$P" -n 24 --temp 0 --stream --cache-experts 12 --no-prefetch \
    --stats-json "$TMP/nopf.json" >"$TMP/nopf.txt" 2>/dev/null
check "--no-prefetch == resident" "cmp -s '$TMP/resident.txt' '$TMP/nopf.txt'"
check "--no-prefetch reads nothing ahead" "python3 -c \"import json,sys; d=json.load(open('$TMP/nopf.json')); sys.exit(0 if d['prefetched_experts']==0 else 1)\""
"$BIN" run -m "$M" -p "$P" -n 2 --full-layers x >/dev/null 2>&1
check "bad --full-layers is a usage error" "[ $? -eq 2 ]"

finish cli_stream
