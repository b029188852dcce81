#!/usr/bin/env bash
# cli_inspect.sh - `moestream inspect` from the outside: the report of a
# tiny model (metadata, totals, bytes per expert, layout, check), the full
# tensor table, JSON that parses and agrees with the file size, a GGUF of
# another architecture, and one-line errors (exit 1) for missing, non-GGUF,
# truncated files; usage errors exit 2.
# Usage: bash cli_inspect.sh BIN TMPDIR
. "$(dirname "$0")/lib.sh"

M="$TMP/tiny.gguf"
tiny_model "$M" --experts-type q4_k --dense-type q8_0 --seed 5

"$BIN" inspect "$M" >"$TMP/out" 2>"$TMP/err" || fail "inspect exit $?"
for pat in '^file: .*GGUF v3' '^metadata: [0-9]* keys' 'general.architecture = "deepseek4"' \
           'tokenizer.ggml.tokens = \[str x 512\] ' '^tensors: 126 ' '^dense bytes: [0-9]' \
           '^routed expert bytes: [0-9]' '^bytes by type: .*q4_K [0-9]' \
           '^bytes per expert: [0-9]* (4 layers x 8 experts)' \
           '^layout: llama.cpp deepseek4 (no MTP block)' \
           '^check: all 126 expected deepseek4 tensors present'; do
    grep -q -- "$pat" "$TMP/out" || fail "report lacks /$pat/"
done
# The tensor table is only printed with --tensors.
grep -q 'blk.0.attn_q_a.weight' "$TMP/out" && fail "tensor table shown without --tensors"

"$BIN" inspect "$M" --tensors >"$TMP/outt" || fail "--tensors exit $?"
grep -Eq '^  blk\.2\.ffn_down_exps\.weight +q4_K +\{256, 256, 8\} +[0-9]+ +[0-9]+  exp_down$' "$TMP/outt" \
    || fail "tensor table row for ffn_down_exps"
grep -Eq '^  blk\.0\.ffn_gate_tid2eid\.weight +i32 +\{3, 512\} ' "$TMP/outt" || fail "tid2eid row"
[ "$(grep -c '^  blk\.' "$TMP/outt")" -eq 120 ] || fail "expected 120 per-layer rows"

if command -v python3 >/dev/null; then
    "$BIN" inspect "$M" --json >"$TMP/j" || fail "--json exit $?"
    python3 - "$TMP/j" "$M" <<'PY' || fail "json content"
import json, os, sys
j = json.load(open(sys.argv[1]))
assert j["deepseek4"] is True and j["problem_count"] == 0, j["problems"]
assert len(j["tensors"]) == 126
t = {x["name"]: x for x in j["tensors"]}
assert t["blk.1.attn_output_a.weight"]["shape"] == [256, 256]
routed = sum(x["bytes"] for x in j["tensors"] if x["class"].startswith("exp_"))
assert routed == j["routed_bytes"] and routed + j["dense_bytes"] == j["total_bytes"]
end = max(x["offset"] + x["bytes"] for x in j["tensors"])
assert j["data_offset"] + end <= os.path.getsize(sys.argv[2]) == j["file_size"]
assert j["metadata"]["deepseek4.attention.compress_ratios"]["head"] == [0, 4, 128, 4]
assert len(j["expert_bytes_by_layer"]) == 4
PY
fi

# Another architecture: a minimal hand-made GGUF v3 (one key, no tensors).
python3 - "$TMP/llama.gguf" <<'PY'
import struct, sys
k, v = b"general.architecture", b"llama"
d = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(k)) + k \
    + struct.pack("<I", 8) + struct.pack("<Q", len(v)) + v
open(sys.argv[1], "wb").write(d)
PY
"$BIN" inspect "$TMP/llama.gguf" >"$TMP/ol" 2>&1 || fail "other arch exit $?"
grep -q '^layout: unknown/not deepseek4 (general.architecture = llama)' "$TMP/ol" || fail "other arch: $(cat "$TMP/ol")"

# Runtime errors: one line on stderr, exit 1.
expect_err() {
    local what=$1; shift
    "$BIN" inspect "$@" >"$TMP/o" 2>"$TMP/e"
    local rc=$?
    [ $rc -eq 1 ] || fail "$what: exit $rc, expected 1"
    [ "$(wc -l <"$TMP/e")" -eq 1 ] || fail "$what: not one line: $(cat "$TMP/e")"
    grep -q '^moestream inspect: ' "$TMP/e" || fail "$what: message $(cat "$TMP/e")"
}
expect_err "missing file" "$TMP/nope.gguf"
printf 'this is not a gguf file at all\n' >"$TMP/text.gguf"
expect_err "non-GGUF" "$TMP/text.gguf"
head -c 20000 "$M" >"$TMP/trunc.gguf"
expect_err "truncated" "$TMP/trunc.gguf"

# Usage errors: exit 2.
"$BIN" inspect >/dev/null 2>&1; [ $? -eq 2 ] || fail "no file: not exit 2"
"$BIN" inspect "$M" --bogus >/dev/null 2>&1; [ $? -eq 2 ] || fail "bad option: not exit 2"

# The memory plan of DeepSeek V4 Flash's full layout (a sparse file): at
# -c 32768 with 24 GiB the sessions (KV + residual + scratch) take <= 4 GiB
# and two layer buffers fit; with 16 GiB the layers go through the cache.
# Both give the sessions 2048-token MoE spans (more scratch than without).
F="$TMP/flash-sparse.gguf"
"$BIN" mkmodel --preset flash --layers 43 --sparse -o "$F" >/dev/null 2>&1 || fail "mkmodel flash sparse"
plan_json() { "$BIN" inspect "$F" --plan --json "$@" 2>/dev/null; }
plan_json --ctx 32768 --mem 24GiB >"$TMP/p24.json" || fail "plan at 24 GiB"
plan_json --ctx 32768 --mem 16GiB >"$TMP/p16.json" || fail "plan at 16 GiB"
plan_json --ctx 32768 --mem 24GiB --moe-span -1 >"$TMP/p24n.json" || fail "plan at 24 GiB, no span"
python3 - "$TMP/p24.json" "$TMP/p16.json" "$TMP/p24n.json" <<'PY' || fail "flash plans"
import json, sys
a, b, c = (json.load(open(f)) for f in sys.argv[1:4])
session = a['kv_bytes'] + a['resid_bytes'] + a['scratch_bytes']
assert a['stream'] and a['n_ctx'] == 32768 and session <= 4 << 30, a
assert a['layer_buffer_bytes'] > 0 and a['moe_span'] == 2048, a
assert b['stream'] and b['layer_buffer_bytes'] == 0 and b['moe_span'] == 2048, b
assert c['moe_span'] == 0 and c['scratch_bytes'] < a['scratch_bytes'], (a, c)
PY
"$BIN" inspect "$F" --plan --ctx 32768 --mem 16GiB 2>/dev/null | grep -q 'MoE rows of 2048-token spans' \
    || fail "plan text names the span"

# A streamed pass holds at most 32,768 tokens' residual stream by default
# (64 KiB a token at Flash's shape); --prefill-chunk 0 plans a whole
# 131,072-token prompt in one pass, and the cache gets the difference
plan_json --ctx 131072 --mem 64GiB >"$TMP/p128.json" || fail "plan at 128 K"
plan_json --ctx 131072 --mem 64GiB --prefill-chunk 0 >"$TMP/p128w.json" || fail "plan at 128 K, one pass"
python3 - "$TMP/p128.json" "$TMP/p128w.json" <<'PY' || fail "plans of the pass length"
import json, sys
a, w = (json.load(open(f)) for f in sys.argv[1:3])
assert a['stream'] and a['resid_bytes'] == 32768 * 65536, a
assert w['resid_bytes'] == 131072 * 65536, w
assert a['cache_bytes'] - w['cache_bytes'] == w['resid_bytes'] - a['resid_bytes'], (a, w)
PY

# --for serve counts the snapshot serve keeps (the window rings, frontiers
# and logits: about 23 MiB at Flash's shape, whatever the context), --kv a
# disk KV cache's checkpoint captures (at the default interval of 8192,
# five for -c 32768: four frontiers and the cold point; as much each)
plan_json --ctx 32768 --mem 24GiB --for serve >"$TMP/ps.json" || fail "plan --for serve"
plan_json --ctx 32768 --mem 24GiB --for serve --kv >"$TMP/pk.json" || fail "plan --kv"
python3 - "$TMP/p24.json" "$TMP/ps.json" "$TMP/pk.json" <<'PY' || fail "plans with kept states"
import json, sys
a, s, k = (json.load(open(f)) for f in sys.argv[1:4])
# (serve also keeps session states, --kv-ram-mb: here a tenth of 19.2 GiB usable)
assert s['kept_state_bytes'] == k['kept_state_bytes'] and 0 < s['kept_state_bytes'] <= s['usable_bytes'] / 10, s
snap, cap = s['kv_bytes'] - a['kv_bytes'] - s['kept_state_bytes'], (k['kv_bytes'] - s['kv_bytes']) / 5
assert snap == cap and 22 << 20 < cap < 24 << 20, (snap, cap)
assert snap < a['kv_bytes'] / 15, (a['kv_bytes'], snap)
PY
"$BIN" inspect "$F" --plan --for nobody >/dev/null 2>&1; [ $? -eq 2 ] || fail "bad --for: not exit 2"

# Without --ctx, chat and serve plan the longest context memory allows up to
# 131072 (Flash's training context is 1 M), run plans 4096. On 20 GiB the
# 131072 plan would leave less than half the 4096 plan's expert cache, so
# chat's context is halved until it keeps half, with the layer buffers of
# whole-layer prefill reads (and twice it would not keep them); on 106 GiB the 4096 plan is resident and 131072 would stream, so
# serve's context is the longest that stays resident (chat, without
# serve's 2 GiB of kept states, gets at least as much).
plan_json --mem 64GiB --for serve >"$TMP/a64.json" || fail "serve plan at 64 GiB"
plan_json --mem 64GiB --for run >"$TMP/r64.json" || fail "run plan at 64 GiB"
plan_json --mem 20GiB --for chat >"$TMP/a16.json" || fail "chat plan at 20 GiB"
n16=$(python3 -c "import json; print(json.load(open('$TMP/a16.json'))['n_ctx'])")
plan_json --mem 20GiB --for chat --ctx $((2 * n16)) >"$TMP/a16x2.json" || : >"$TMP/a16x2.json"
plan_json --mem 20GiB --for chat --ctx 4096 >"$TMP/r16.json" || fail "chat plan at 20 GiB, 4096"
plan_json --mem 106GiB --for serve >"$TMP/a104.json" || fail "serve plan at 106 GiB"
n104=$(python3 -c "import json; print(json.load(open('$TMP/a104.json'))['n_ctx'])")
plan_json --mem 106GiB --for serve --ctx $((2 * n104)) >"$TMP/a104x2.json" || fail "serve plan at 2x"
plan_json --mem 106GiB --for chat >"$TMP/c104.json" || fail "chat plan at 106 GiB"
python3 - "$TMP" <<'PY' || fail "plans of the automatic context"
import json, os, sys
d = sys.argv[1]
def j(n):
    t = open(os.path.join(d, n + '.json')).read()
    return json.loads(t) if t.strip() else None
a64, r64, a16, a16x2, r16 = j('a64'), j('r64'), j('a16'), j('a16x2'), j('r16')
a104, a104x2, c104 = j('a104'), j('a104x2'), j('c104')
assert a64['stream'] and a64['n_ctx'] == 131072 and r64['n_ctx'] == 4096, (a64, r64)
assert a64['cache_bytes'] < r64['cache_bytes'], (a64, r64)
assert 4096 < a16['n_ctx'] < 131072 and a16['layer_buffer_bytes'] > 0, a16
assert r16['layer_buffer_bytes'] > 0 and a16['cache_bytes'] >= r16['cache_bytes'] / 2, (a16, r16)
assert a16x2 is None or a16x2['layer_buffer_bytes'] == 0 or a16x2['cache_bytes'] < r16['cache_bytes'] / 2, a16x2
assert not a104['stream'] and 4096 < a104['n_ctx'] < 131072, a104
assert a104x2['stream'], a104x2
assert not c104['stream'] and c104['n_ctx'] >= a104['n_ctx'], (c104, a104)
PY
# serve's kept session states give way: at most a tenth of the usable
# memory, less when the plan needs it; a small machine still serves
"$BIN" mkmodel --preset small --seed 1 -o "$TMP/small.gguf" >/dev/null 2>&1 || fail "mkmodel small"
"$BIN" inspect "$TMP/small.gguf" --plan --json --mem 2GiB --for serve >"$TMP/k2.json" 2>"$TMP/k2.err" \
    || fail "serve plan at 2 GiB: $(cat "$TMP/k2.err")"
python3 - "$TMP/k2.json" "$TMP/a64.json" <<'PY' || fail "kept states fitted"
import json, sys
k, a = (json.load(open(f)) for f in sys.argv[1:3])
assert 0 < k['kept_state_bytes'] <= k['usable_bytes'] / 10, k
assert a['kept_state_bytes'] == 2048 << 20, a
PY
# --ctx still rules
plan_json --mem 64GiB --for serve --ctx 8192 | grep -q '"n_ctx": 8192' || fail "--for serve --ctx 8192"

rm -f "$TMP"/*.gguf
finish cli_inspect
