#!/usr/bin/env bash
# cli_mkmodel.sh - `moestream mkmodel` from the outside: exit codes and
# one-line messages for bad input (2), determinism of the written bytes,
# a different seed giving different bytes, --f32-twin, mixed expert types,
# --ds4-mix, hyperparameter overrides landing in the metadata, errors that
# name the option, and -o refusing to replace a file without --force.
# Usage: bash cli_mkmodel.sh BIN TMPDIR
. "$(dirname "$0")/lib.sh"
rm -f "$TMP"/*.gguf "$TMP"/*.tmp-*

# expect_usage "what" args... : exit 2 and a one-line "moestream mkmodel:" message
expect_usage() {
    local what=$1; shift
    "$BIN" mkmodel "$@" >"$TMP/out" 2>"$TMP/err"
    local rc=$?
    [ $rc -eq 2 ] || fail "$what: exit $rc, expected 2"
    grep -q '^moestream mkmodel: ' "$TMP/err" || fail "$what: no clear message: $(cat "$TMP/err")"
    [ -s "$TMP/out" ] && fail "$what: wrote to stdout"
    [ -e "$TMP/bad.gguf" ] && fail "$what: left a file behind"
    rm -f "$TMP/bad.gguf"
}
expect_usage "unknown type" --preset tiny --experts-type q8_K -o "$TMP/bad.gguf"
expect_usage "unknown dense type" --preset tiny --dense-type bogus -o "$TMP/bad.gguf"
expect_usage "bad preset" --preset huge -o "$TMP/bad.gguf"
expect_usage "missing preset" -o "$TMP/bad.gguf"
expect_usage "missing -o" --preset tiny
expect_usage "unknown option" --preset tiny --frobnicate 3 -o "$TMP/bad.gguf"
expect_usage "non-numeric override" --preset tiny --n-embd abc -o "$TMP/bad.gguf"
expect_usage "n_hc != 4" --preset tiny --n-hc 3 -o "$TMP/bad.gguf"
expect_usage "bad ratio" --preset tiny --compress-ratios 0,5,4,128 -o "$TMP/bad.gguf"
expect_usage "no ratio-4 layer" --preset tiny --compress-ratios 0,128,0,128 -o "$TMP/bad.gguf"
expect_usage "ratio count vs layers" --preset tiny --n-layer 3 --compress-ratios 0,4,128,4 -o "$TMP/bad.gguf"
expect_usage "q4_K with n_embd 288" --preset tiny --n-embd 288 --experts-type q4_k -o "$TMP/bad.gguf"
expect_usage "--size outside bench" --preset tiny --size 1G -o "$TMP/bad.gguf"
expect_usage "bad last-layers spec" --preset tiny --experts-type-last-layers q4_k -o "$TMP/bad.gguf"
"$BIN" mkmodel --preset tiny --n-embd 288 --experts-type q4_k -o "$TMP/bad.gguf" 2>"$TMP/err"
grep -q "not a multiple of q4_K's block size 256" "$TMP/err" || fail "divisibility message: $(cat "$TMP/err")"

# A hyperparameter rule broken through an option names the option.
flag_named() { # FLAG PATTERN ARGS...
    local flag=$1 pat=$2; shift 2
    expect_usage "$flag" --preset tiny "$@" -o "$TMP/bad.gguf"
    grep -q -- "^moestream mkmodel: $flag: .*$pat" "$TMP/err" || fail "$flag not named: $(cat "$TMP/err")"
}
flag_named --n-expert 'expert_count must be > 0' --n-expert 0
flag_named --n-expert-used 'exceeds' --n-expert-used 9
flag_named --n-ff-exp 'must be > 0' --n-ff-exp 0
flag_named --sinkhorn-iters 'at most 100' --sinkhorn-iters 1000
flag_named --n-head-kv 'must be 1' --n-head-kv 2
flag_named --rms-eps 'must be > 0' --rms-eps 0
flag_named --expert-weights-scale 'finite' --expert-weights-scale inf
flag_named --n-hash-layer 'main layers' --n-hash-layer 9
[ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "not one line: $(cat "$TMP/err")"

# -o never replaces a file unless --force; the write goes through a
# temporary file renamed into place
printf 'precious, not a model\n' >"$TMP/keep.txt"
"$BIN" mkmodel --preset tiny -o "$TMP/keep.txt" >/dev/null 2>"$TMP/err"
[ $? -eq 1 ] || fail "existing output: exit not 1"
grep -q "^moestream mkmodel: .*keep.txt already exists; pass --force to replace it$" "$TMP/err" \
    || fail "existing output message: $(cat "$TMP/err")"
grep -q precious "$TMP/keep.txt" || fail "existing file was changed"
"$BIN" mkmodel --preset tiny --seed 5 -o "$TMP/f.gguf" 2>/dev/null || fail "first write"
cp "$TMP/f.gguf" "$TMP/f0.gguf"
"$BIN" mkmodel --preset tiny --seed 6 -o "$TMP/f.gguf" 2>/dev/null && fail "second write without --force succeeded"
cmp -s "$TMP/f.gguf" "$TMP/f0.gguf" || fail "refused write changed the file"
"$BIN" mkmodel --preset tiny --seed 6 --force -o "$TMP/f.gguf" 2>/dev/null || fail "--force write"
cmp -s "$TMP/f.gguf" "$TMP/f0.gguf" && fail "--force did not replace the file"
"$BIN" mkmodel --preset tiny --seed 6 --force -o "$TMP/keep.txt" 2>/dev/null || fail "--force over a text file"
"$BIN" inspect "$TMP/keep.txt" >/dev/null || fail "--force output is not a model"
# --force does not change the bytes (it is not part of the provenance)
"$BIN" mkmodel --preset tiny --seed 6 -o "$TMP/g.gguf" 2>/dev/null || fail "write g"
cmp -s "$TMP/f.gguf" "$TMP/g.gguf" || fail "--force changed the bytes"
ls "$TMP" | grep -q 'tmp-' && fail "temporary files left behind: $(ls "$TMP")"
# an unwritable directory: one line, nothing left behind
"$BIN" mkmodel --preset tiny -o "$TMP/no/such/dir/x.gguf" >/dev/null 2>"$TMP/err"
[ $? -eq 1 ] || fail "unwritable path: exit not 1"
[ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "unwritable path: $(cat "$TMP/err")"
rm -f "$TMP/keep.txt"

# --help works and exits 0
"$BIN" mkmodel --help >"$TMP/out" 2>&1 || fail "--help exit $?"
grep -q -- '--experts-type' "$TMP/out" || fail "--help lacks --experts-type"

# Determinism
"$BIN" mkmodel --preset tiny --seed 3 --experts-type q4_k --dense-type q8_0 -o "$TMP/a.gguf" 2>/dev/null || fail "write a"
"$BIN" mkmodel --preset tiny --seed 3 --experts-type q4_k --dense-type q8_0 --threads 1 -o "$TMP/b.gguf" 2>/dev/null || fail "write b"
"$BIN" mkmodel --preset tiny --seed 4 --experts-type q4_k --dense-type q8_0 -o "$TMP/c.gguf" 2>/dev/null || fail "write c"
cmp -s "$TMP/a.gguf" "$TMP/b.gguf" || fail "same seed differs"
cmp -s "$TMP/a.gguf" "$TMP/c.gguf" && fail "different seed gives the same file"
"$BIN" inspect "$TMP/a.gguf" >"$TMP/ia" || fail "inspect a"
grep -q 'general.name = "moestream mkmodel tiny seed 3"' "$TMP/ia" || fail "provenance name"
grep -q 'moestream.mkmodel.options = .*--experts-type q4_k' "$TMP/ia" || fail "provenance options"

# Q5_K experts and Q3_K dense matrices (their quantizers): deterministic
# across thread counts, and the file checks out
"$BIN" mkmodel --preset tiny --seed 5 --experts-type q5_k --dense-type q3_k -o "$TMP/k.gguf" 2>/dev/null || fail "write q5_k/q3_k"
"$BIN" mkmodel --preset tiny --seed 5 --experts-type q5_k --dense-type q3_k --threads 1 -o "$TMP/k1.gguf" 2>/dev/null || fail "write q5_k/q3_k, 1 thread"
cmp -s "$TMP/k.gguf" "$TMP/k1.gguf" || fail "q5_k/q3_k: same seed differs"
"$BIN" inspect "$TMP/k.gguf" >"$TMP/ik" || fail "inspect q5_k/q3_k"
grep -q '^check: all' "$TMP/ik" || fail "q5_k/q3_k check"
grep -q 'q5_K' "$TMP/ik" && grep -q 'q3_K' "$TMP/ik" || fail "q5_k/q3_k: types not in the file"
rm -f "$TMP/k.gguf" "$TMP/k1.gguf"

# Twin: same tensors, all float types F32
"$BIN" mkmodel --preset tiny --seed 3 --experts-type q4_k --dense-type q8_0 --f32-twin -o "$TMP/t.gguf" 2>/dev/null || fail "twin"
"$BIN" inspect "$TMP/t.gguf" >"$TMP/it"
grep -q '^bytes by type: f32 [0-9]* i32 [0-9]*$' "$TMP/it" || fail "twin not all f32: $(grep 'by type' "$TMP/it")"
grep -q '^check: all' "$TMP/it" || fail "twin check"

# Overrides land in the metadata
"$BIN" mkmodel --preset tiny --n-layer 5 --n-expert 16 --sinkhorn-iters 2 --hc-eps 0.05 \
    --experts-type f16 --dense-type f16 -o "$TMP/o.gguf" 2>/dev/null || fail "overrides"
"$BIN" inspect "$TMP/o.gguf" >"$TMP/io"
grep -q 'deepseek4.block_count = 5' "$TMP/io" || fail "n-layer override"
grep -q 'deepseek4.expert_count = 16' "$TMP/io" || fail "n-expert override"
grep -q 'sinkhorn_iterations = 2' "$TMP/io" || fail "sinkhorn override"
grep -q 'hyper_connection.epsilon = 0.0500' "$TMP/io" || fail "hc-eps override"
grep -q 'compress_ratios = \[u32 x 5\] 0, 4, 128, 4, 128' "$TMP/io" || fail "default ratios for 5 layers"
grep -q '^check: all' "$TMP/io" || fail "override check"

# Mixed expert sizes: per-layer bytes per expert are reported
"$BIN" mkmodel --preset tiny --experts-type q2_k --experts-type-last-layers q8_0:2 -o "$TMP/m.gguf" 2>/dev/null || fail "mixed"
"$BIN" inspect "$TMP/m.gguf" >"$TMP/im"
grep -q '^bytes per expert by layer: 0:[0-9]* 1:[0-9]* 2:[0-9]* 3:[0-9]*' "$TMP/im" || fail "per-layer expert bytes"

# --tensor-type: per-tensor types over every other rule (llama-quantize's
# mixes), a pair (gate/up) in two types runs, and bad specs are refused
expect_usage "tensor-type without =" --preset tiny --tensor-type output -o "$TMP/bad.gguf"
expect_usage "tensor-type naming nothing" --preset tiny --tensor-type outptu=q8_0 -o "$TMP/bad.gguf"
expect_usage "tensor-type bad type" --preset tiny --tensor-type output=q9_K -o "$TMP/bad.gguf"
expect_usage "tensor-type on a lookup table" --preset tiny --tensor-type attn_compressor_ape=q8_0 -o "$TMP/bad.gguf"
# a broken hyperparameter is still reported with its own option
expect_usage "n-head with tensor-type" --preset tiny --n-head 3 --tensor-type output=q6_K -o "$TMP/bad.gguf"
grep -q '^moestream mkmodel: --n-head: ' "$TMP/err" || fail "tensor-type took the blame: $(cat "$TMP/err")"
"$BIN" mkmodel --preset tiny --experts-type q4_K --tensor-type output=q2_K \
    --tensor-type ffn_down_exps=q8_0 --tensor-type blk.2.attn_kv=f16 \
    --tensor-type blk.1.ffn_up_exps.weight=iq2_xxs -o "$TMP/tt.gguf" 2>/dev/null || fail "tensor-type"
"$BIN" inspect "$TMP/tt.gguf" --tensors >"$TMP/it"
type_of() { awk -v n="$1" '$1 == n { print $2 }' "$TMP/it"; }
[ "$(type_of output.weight)" = q2_K ] || fail "tensor-type output: $(type_of output.weight)"
[ "$(type_of blk.3.ffn_down_exps.weight)" = q8_0 ] || fail "tensor-type ffn_down_exps"
[ "$(type_of blk.2.attn_kv.weight)" = f16 ] || fail "tensor-type blk.2.attn_kv"
[ "$(type_of blk.1.attn_kv.weight)" = q8_0 ] || fail "tensor-type touched another layer"
[ "$(type_of blk.1.ffn_up_exps.weight)" = iq2_xxs ] || fail "tensor-type blk.1.ffn_up_exps"
[ "$(type_of blk.1.ffn_gate_exps.weight)" = q4_K ] || fail "tensor-type touched the gate"
"$BIN" run -m "$TMP/tt.gguf" -p "hello" -n 4 --temp 0 >"$TMP/rt" 2>&1 ||
    fail "a gate/up pair in two types does not run: $(tail -n 1 "$TMP/rt")"
# Q6_K (llama-quantize keeps output.weight and more in it): written, and
# fast mode's logits are the same bits whether the prompt goes in at once
# (token-lane GEMM, x4 dots), in pieces of 5 or a token at a time
# (many-rows dots), with each kernel set
"$BIN" mkmodel --preset tiny --dense-type q6_K --experts-type q6_K -o "$TMP/q6.gguf" 2>/dev/null || fail "q6_K"
"$BIN" inspect "$TMP/q6.gguf" | grep -q '^bytes by type: .*q6_K' || fail "q6_K tensors"
Q6P="one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen"
for isa in scalar avx2 avx512; do
    for c in 0 1 5; do
        ch=""
        [ "$c" = 0 ] || ch="--chunk $c"
        MS_ISA=$isa "$BIN" logits -m "$TMP/q6.gguf" --text "$Q6P" -t 1 --top 3 $ch >"$TMP/q6.$c" 2>/dev/null ||
            fail "q6_K logits $isa chunk $c"
    done
    cmp -s "$TMP/q6.0" "$TMP/q6.1" && cmp -s "$TMP/q6.0" "$TMP/q6.5" || fail "q6_K logits depend on chunking ($isa)"
done
rm -f "$TMP"/q6.*

# ds4 mix is recognised
"$BIN" mkmodel --preset tiny --ds4-mix -o "$TMP/d.gguf" 2>/dev/null || fail "ds4-mix"
"$BIN" inspect "$TMP/d.gguf" | grep -q '^layout: ds4' || fail "ds4 layout not detected"

rm -f "$TMP"/*.gguf
finish cli_mkmodel
