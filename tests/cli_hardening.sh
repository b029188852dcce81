#!/usr/bin/env bash
# cli_hardening.sh - damaged or unusual model files get a clear one-line
# error and exit 1, never a signal or silent garbage: non-finite float
# metadata (every float key), misaligned GGUF data sections, unbounded
# Sinkhorn iterations, a token list that does not match the vocabulary rows.
# The files are mkmodel output rewritten by tests/gguf_edit.py.
# Usage: bash cli_hardening.sh BIN TMPDIR
. "$(dirname "$0")/lib.sh"

command -v python3 >/dev/null || { echo "cli_hardening: python3 missing"; exit 1; }
EDIT="python3 $SRC/tests/gguf_edit.py"
M="$TMP/tiny.gguf"
tiny_model "$M" --seed 3 --dense-type f32
E="$TMP/edit.gguf"

# rejected EDIT-ARGS PATTERN: the edited model is refused by run (exit 1,
# one line naming the problem) and by logits.
rejected() {
    local pat=$1; shift
    $EDIT "$M" "$E" "$@" || { fail "gguf_edit $*"; return; }
    "$BIN" run -m "$E" -p hi -n 2 -t 1 >"$TMP/r.out" 2>"$TMP/r.err"
    local rc=$?
    [ $rc -eq 1 ] || fail "$*: run exit $rc, want 1"
    [ "$(wc -l <"$TMP/r.err")" -eq 1 ] || fail "$*: not one line: $(cat "$TMP/r.err")"
    grep -q -- "$pat" "$TMP/r.err" || fail "$*: no '$pat' in: $(cat "$TMP/r.err")"
    "$BIN" logits -m "$E" --tokens 1,2 -t 1 >/dev/null 2>&1
    rc=$?
    [ $rc -eq 1 ] || fail "$*: logits exit $rc, want 1"
}

# ---- non-finite float hyperparameters: every float key, NaN and both infinities
for key in attention.layer_norm_rms_epsilon attention.compress_rope_freq_base rope.freq_base \
    hyper_connection.epsilon rope.scaling.factor rope.scaling.yarn_beta_fast \
    rope.scaling.yarn_beta_slow expert_weights_scale; do
    for v in nan inf -inf; do
        rejected "deepseek4.$key = .*must be\|deepseek4.$key must be" --set "deepseek4.$key=f32:$v"
    done
done
# f64-typed keys are read too
rejected "deepseek4.expert_weights_scale = nan" --set "deepseek4.expert_weights_scale=f64:nan"
# per-layer clamp arrays: any element
rejected "deepseek4.swiglu_clamp_exp\[2\] = nan" --set-f32-elem deepseek4.swiglu_clamp_exp=2:nan
rejected "deepseek4.swiglu_clamp_exp\[0\] = inf" --set-f32-elem deepseek4.swiglu_clamp_exp=0:inf
rejected "deepseek4.swiglu_clamp_exp\[1\] = -1" --set-f32-elem deepseek4.swiglu_clamp_exp=1:-1
echo "ok: non-finite float metadata rejected"

# ---- GGUF alignment: below 8 rejected (the data would sit at misaligned
# addresses), 8 and larger powers of two load and give the same tokens
for a in 1 2 4; do rejected "general.alignment $a is below 8" --alignment $a; done
"$BIN" run -m "$M" -p "hello world" -n 6 --temp 0 -t 1 >"$TMP/ref.out" 2>/dev/null || fail "reference run"
for a in 8 64; do
    $EDIT "$M" "$E" --alignment $a || fail "gguf_edit --alignment $a"
    "$BIN" run -m "$E" -p "hello world" -n 6 --temp 0 -t 1 >"$TMP/a.out" 2>"$TMP/a.err" \
        || fail "alignment $a: exit $?: $(cat "$TMP/a.err")"
    cmp -s "$TMP/ref.out" "$TMP/a.out" || fail "alignment $a: different text"
done
echo "ok: alignment"

# ---- unbounded metadata
rejected "sinkhorn_iterations = 1000000: must be at most 100" \
    --set deepseek4.hyper_connection.sinkhorn_iterations=u32:1000000
rejected "sinkhorn_iterations = 101: must be at most 100" \
    --set deepseek4.hyper_connection.sinkhorn_iterations=u32:101
rejected "tokenizer.ggml.tokens has 500 entries but the model has 512 vocabulary rows" \
    --trim-array tokenizer.ggml.tokens=500 --trim-array tokenizer.ggml.token_type=500
# logits --text: the context is checked before anything is allocated for
# the sequence (was: n_tokens x n_vocab floats first, a bare "out of memory")
long=$(printf 'word %.0s' $(seq 3000))
"$BIN" logits -m "$M" --text "$long" -c 64 -t 1 >/dev/null 2>"$TMP/l.err"
rc=$?
[ $rc -eq 1 ] && grep -q '^moestream logits: the sequence is [0-9]* tokens, longer than the context -c 64$' "$TMP/l.err" \
    || fail "logits --text over -c: exit $rc: $(cat "$TMP/l.err")"
"$BIN" logits -m "$M" --tokens "$(seq -s, 1 100)" -c 50 -t 1 >/dev/null 2>"$TMP/l.err"
[ $? -eq 1 ] && grep -q 'the sequence is 100 tokens, longer than the context -c 50' "$TMP/l.err" \
    || fail "logits --tokens over -c: $(cat "$TMP/l.err")"
echo "ok: bounded metadata"

# ---- non-finite numbers at run time: NaN rows in weights
# strict_json FILE: valid JSON without NaN/Infinity literals (python's
# parser accepts them unless told otherwise)
strict_json() {
    python3 -c 'import json,sys
def bad(x): raise ValueError("non-JSON constant " + x)
json.load(open(sys.argv[1]), parse_constant=bad)' "$1"
}
# logits with one NaN row of output.weight: valid JSON, that token null,
# every other probability finite and summing to 1, exit 1 with one line
for row in 7 300; do
    $EDIT "$M" "$E" --nan-row output.weight=$row || fail "gguf_edit nan-row"
    "$BIN" logits -m "$E" --tokens 1,2,3 --full -t 1 >"$TMP/l.json" 2>"$TMP/l.err"
    rc=$?
    [ $rc -eq 1 ] || fail "logits NaN row $row: exit $rc, want 1"
    [ "$(wc -l <"$TMP/l.err")" -eq 1 ] && grep -q "non-finite logits (first: position 0, token $row)" "$TMP/l.err" \
        || fail "logits NaN row $row: $(cat "$TMP/l.err")"
    strict_json "$TMP/l.json" || fail "logits NaN row $row: not valid JSON"
    python3 - "$TMP/l.json" $row <<'PY' || fail "logits NaN row $row: probabilities"
import json, math, sys
j = json.load(open(sys.argv[1])); bad = int(sys.argv[2])
for p in j["positions"]:
    probs = p["probs"]
    assert probs[bad] is None and p["non_finite"] == 1
    ok = [x for i, x in enumerate(probs) if i != bad]
    assert all(isinstance(x, float) and math.isfinite(x) for x in ok)
    assert abs(sum(ok) - 1) < 1e-6
PY
    "$BIN" logits -m "$E" --tokens 1,2,3 --top 5 -t 1 >"$TMP/l.json" 2>/dev/null
    strict_json "$TMP/l.json" || fail "logits --top NaN row $row: not valid JSON"
    python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert all(len(p["top"])==5 and all(t[0]!=int(sys.argv[2]) for t in p["top"]) for p in j["positions"])' \
        "$TMP/l.json" $row || fail "logits --top lists the NaN token"
    # run and chat stop instead of sampling from NaN
    "$BIN" run -m "$E" -p hi -n 8 --temp 0 -t 1 >/dev/null 2>"$TMP/r.err"
    rc=$?
    [ $rc -eq 1 ] && grep -q '^moestream run: the model produced a non-finite logit (nan for token '"$row"')' "$TMP/r.err" \
        || fail "run NaN row $row: exit $rc: $(cat "$TMP/r.err")"
    echo hello | "$BIN" chat -m "$E" -n 8 --temp 0 -t 1 >/dev/null 2>"$TMP/c.err"
    rc=$?
    [ $rc -eq 1 ] && grep -q '^moestream chat: the model produced a non-finite logit' "$TMP/c.err" \
        || fail "chat NaN row $row: exit $rc: $(cat "$TMP/c.err")"
done
# other tensors: a NaN norm vector or embedding row poisons every logit
for spec in blk.1.ffn_norm.weight=0 token_embd.weight=2 blk.0.attn_q_a.weight=5; do
    $EDIT "$M" "$E" --nan-row "$spec" || fail "gguf_edit nan-row $spec"
    "$BIN" logits -m "$E" --tokens 1,2,3 -t 1 >"$TMP/l.json" 2>"$TMP/l.err"
    rc=$?
    [ $rc -eq 1 ] || fail "logits NaN $spec: exit $rc"
    strict_json "$TMP/l.json" || fail "logits NaN $spec: not valid JSON"
    case $spec in token_embd*) continue ;; esac # the prompt below may not hold token 2
    "$BIN" run -m "$E" -p "hi there" -n 4 --temp 0.7 -t 1 >/dev/null 2>"$TMP/r.err"
    rc=$?
    [ $rc -eq 1 ] && grep -q 'non-finite logit' "$TMP/r.err" || fail "run NaN $spec: exit $rc: $(cat "$TMP/r.err")"
done
# a NaN block scale in a quantized matrix: fast mode's int8 activations
# would turn the NaN into zeros (finite, meaningless logits); the head's
# input keeps it, so the logits are reported non-finite as in quality mode
Q="$TMP/tq.gguf"
tiny_model "$Q" --seed 3 --dense-type q8_0 --experts-type q6_K
"$BIN" inspect "$Q" --tensors --json >"$TMP/tq.json" || fail "inspect tq"
python3 - "$TMP/tq.json" "$Q" "$E" <<'PY' || fail "NaN block scale edit"
import json, shutil, sys
j = json.load(open(sys.argv[1]))
t = next(t for t in j["tensors"] if t["name"] == "blk.1.ffn_down_shexp.weight")
assert t["type"] == "q8_0"
shutil.copyfile(sys.argv[2], sys.argv[3])
with open(sys.argv[3], "r+b") as f:
    f.seek(j["data_offset"] + t["offset"] + 34 * 3)  # block 3's fp16 scale
    f.write(bytes([0x00, 0x7e]))                      # NaN
PY
for q in "" --quality; do
    "$BIN" logits -m "$E" --tokens 1,2,3 -t 1 $q >"$TMP/l.json" 2>"$TMP/l.err"
    rc=$?
    [ $rc -eq 1 ] && grep -q 'non-finite logits' "$TMP/l.err" || fail "logits NaN block scale ${q:-fast}: exit $rc: $(cat "$TMP/l.err")"
    strict_json "$TMP/l.json" || fail "logits NaN block scale ${q:-fast}: not valid JSON"
done
"$BIN" run -m "$E" -p "hi there" -n 4 --temp 0 -t 1 >/dev/null 2>"$TMP/r.err"
rc=$?
[ $rc -eq 1 ] && grep -q 'non-finite logit' "$TMP/r.err" || fail "run NaN block scale: exit $rc: $(cat "$TMP/r.err")"
echo "ok: non-finite logits"

# ---- inspect --json: always valid JSON (non-finite floats, invalid UTF-8)
$EDIT "$M" "$E" --set general.f32nan=f32:nan --set general.f64inf=f64:inf --set general.neginf=f32:-inf \
    --set-hex general.name=41ff42c328e282 --set $'bad\xffkey=u32:7' || fail "gguf_edit inspect"
"$BIN" inspect "$E" --json >"$TMP/i.json" || fail "inspect --json exit $?"
strict_json "$TMP/i.json" || fail "inspect --json: not valid JSON: $(grep -n 'nan\|inf' "$TMP/i.json" | head -3)"
python3 - "$TMP/i.json" <<'PY' || fail "inspect --json content"
import json, sys
m = json.load(open(sys.argv[1]))["metadata"]
assert m["general.f32nan"] == "NaN" and m["general.f64inf"] == "Infinity" and m["general.neginf"] == "-Infinity", m
assert m["general.name"] == "A\ufffdB\ufffd(\ufffd\ufffd", repr(m["general.name"])
assert m["bad\ufffdkey"] == 7
PY
"$BIN" inspect "$E" >/dev/null || fail "inspect text exit $?"
echo "ok: inspect --json"

rm -f "$TMP"/*.gguf
finish cli_hardening
