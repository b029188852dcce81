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
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [modelPath, csv, nArg, outPath] = process.argv.slice(2);
const nGen = Number.parseInt(nArg, 10);
if (!modelPath || !csv || !outPath || !(nGen > 0)) {
    console.error("usage: node record_greedy.mjs MODEL.gguf TOKENS_CSV N OUT.json");
    process.exit(2);
}
const prompt = csv.split(",").map((s) => Number.parseInt(s, 10));
if (prompt.some((t) => !Number.isInteger(t) || t < 0)) {
    console.error("record_greedy: bad token list");
    process.exit(2);
}

const oracleDir = process.env.ORACLE_DIR || path.join(os.homedir(), ".cache/moestream/oracle");
const entry = path.join(oracleDir, "node_modules/node-llama-cpp/dist/index.js");
const { getLlama, LlamaLogLevel } = await import(pathToFileURL(entry).href);
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
const ctxSize = Math.max(64, Math.ceil((prompt.length + nGen) / 64) * 64);
const context = await model.createContext({
    contextSize: ctxSize,
    batchSize: ctxSize,
    sequences: 1,
    threads: Number(process.env.ORACLE_THREADS || 1),
    flashAttention: false,
    experimentalKvCacheKeyType: "F32",
    experimentalKvCacheValueType: "F32",
});
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
const held = seq.contextTokens;
const want = fed.slice(0, fed.length - 1);
if (held.length !== want.length || held.some((t, i) => t !== want[i])) {
    console.error(`record_greedy: sequence holds ${held.length} tokens, not the ${want.length} fed`);
    process.exit(1);
}
fs.writeFileSync(outPath, JSON.stringify({ prompt, tokens: gen, margins }) + "\n");
await context.dispose();
await model.dispose();
console.log(`record_greedy: ${nGen} tokens -> ${outPath}`);
