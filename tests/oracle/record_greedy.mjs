// record_greedy.mjs - llama.cpp's greedy continuation of a prompt: the
// argmax of each next-token distribution, fed back one token at a time, for
// the differential tests (tests/test_diff_llama.c).
//
// Settings as record_logits.mjs (CPU, F32 K/V cache, flash attention off,
// prompt in one decode call). The argmax is taken over the raw logits; an
// exact tie goes to the lowest id. The margin between the two largest
// probabilities of every step is recorded too, so a near-tie is visible.
//
// usage: node record_greedy.mjs MODEL.gguf TOKENS_CSV N OUT.json
// OUT.json: {"prompt": [ids], "tokens": [N ids], "margins": [N numbers]}
// env: ORACLE_DIR (default ~/.cache/moestream/oracle), ORACLE_THREADS (1).

import fs from "node:fs";

import { createReferenceContext, getCpuLlama, heldMismatch, loadCpuModel, parseTokenCsv } from "./llama.mjs";

const [modelPath, csv, nArg, outPath] = process.argv.slice(2);
const nGen = Number.parseInt(nArg, 10);
if (!modelPath || !csv || !outPath || !(nGen > 0)) {
    console.error("usage: node record_greedy.mjs MODEL.gguf TOKENS_CSV N OUT.json");
    process.exit(2);
}
const prompt = parseTokenCsv(csv);
if (!prompt) {
    console.error("record_greedy: bad token list");
    process.exit(2);
}

const llama = await getCpuLlama("error");
const model = await loadCpuModel(llama, modelPath);
const context = await createReferenceContext(model, prompt.length + nGen);
const seq = context.getSequence();

// argmax (lowest id on a tie) and the top-2 probability margin of a logits map
function pick(logits) {
    let best = -1, bv = -Infinity;
    for (const [tok, v] of logits)
        if (v > bv || (v === bv && tok < best)) [best, bv] = [tok, v];
    let second = -Infinity, z = 0;
    for (const [tok, v] of logits) {
        z += Math.exp(v - bv);
        if (tok !== best && v > second) second = v;
    }
    return [best, (1 - Math.exp(second - bv)) / z];
}

const fed = [...prompt];
const gen = [], margins = [];
let out = await seq.controlledEvaluate(
    prompt.map((t, i) => (i === prompt.length - 1 ? [t, { generateNext: { logits: true } }] : t)));
for (let k = 0; k < nGen; k++) {
    const [tok, margin] = pick(out[out.length - 1].next.logits);
    gen.push(tok);
    margins.push(margin);
    fed.push(tok);
    if (k + 1 < nGen) out = await seq.controlledEvaluate([[tok, { generateNext: { logits: true } }]]);
}
const mismatch = heldMismatch(seq, fed.slice(0, fed.length - 1));
if (mismatch) {
    console.error(`record_greedy: ${mismatch}`);
    process.exit(1);
}
fs.writeFileSync(outPath, JSON.stringify({ prompt, tokens: gen, margins }) + "\n");
await context.dispose();
await model.dispose();
console.log(`record_greedy: ${nGen} tokens -> ${outPath}`);
