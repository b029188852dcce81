// record_logits.mjs - llama.cpp's next-token probabilities for a token
// sequence, the reference side of the differential tests.
//
// Runs llama.cpp (node-llama-cpp 3.22.1) with the settings of tests/data/oracle/README.md
// that make it a precise reference: CPU, F32 K/V cache, flash attention off,
// the whole sequence in one decode call (batch = ubatch = context >= n).
// Probabilities are the softmax of the raw logits, computed here in double.
//
// usage: node record_logits.mjs MODEL.gguf TOKENS_CSV OUT.bin [POSITIONS]
// POSITIONS: which positions to store, as ranges "0-7,2040-2099" (default:
// all). Every position is still evaluated; only the file is smaller.
// OUT.bin: little-endian; u32 magic "MSPR", u32 version 2, u32 n_tokens,
// u32 n_vocab, u32 n_stored, then n_tokens u32 token ids, then n_stored u32
// positions (ascending), then n_stored x n_vocab f32 probabilities
// (position-major, in the order of the stored positions).
// env: ORACLE_DIR (default ~/.cache/moestream/oracle), ORACLE_THREADS (1).

import fs from "node:fs";

import { createReferenceContext, getCpuLlama, heldMismatch, loadCpuModel, parseTokenCsv } from "./llama.mjs";

const [modelPath, csv, outPath, posSpec] = process.argv.slice(2);
if (!modelPath || !csv || !outPath) {
    console.error("usage: node record_logits.mjs MODEL.gguf TOKENS_CSV OUT.bin [POSITIONS]");
    process.exit(2);
}
const tokens = parseTokenCsv(csv);
if (!tokens) {
    console.error("record_logits: bad token list");
    process.exit(2);
}
const n = tokens.length;
let stored = [...Array(n).keys()];
if (posSpec) {
    const set = new Set();
    for (const r of posSpec.split(",")) {
        const [a, b] = r.split("-").map((s) => Number.parseInt(s, 10));
        const hi = b === undefined ? a : b;
        if (!Number.isInteger(a) || !Number.isInteger(hi) || a < 0 || hi < a || hi >= n) {
            console.error(`record_logits: bad position range '${r}' for ${n} tokens`);
            process.exit(2);
        }
        for (let p = a; p <= hi; p++) set.add(p);
    }
    stored = [...set].sort((x, y) => x - y);
}

const llama = await getCpuLlama("error");
const model = await loadCpuModel(llama, modelPath);
const context = await createReferenceContext(model, n);
const seq = context.getSequence();
const out = await seq.controlledEvaluate(
    tokens.map((t) => [t, { generateNext: { logits: true } }]));
const mismatch = heldMismatch(seq, tokens);
if (mismatch) {
    console.error(`record_logits: ${mismatch}`);
    process.exit(1);
}
const V = out[0].next.logits.size;
const ns = stored.length;
const buf = Buffer.alloc(20 + 4 * n + 4 * ns + 4 * ns * V);
buf.write("MSPR", 0, "latin1");
buf.writeUInt32LE(2, 4);
buf.writeUInt32LE(n, 8);
buf.writeUInt32LE(V, 12);
buf.writeUInt32LE(ns, 16);
let off = 20;
for (let i = 0; i < n; i++, off += 4) buf.writeUInt32LE(tokens[i], off);
for (let i = 0; i < ns; i++, off += 4) buf.writeUInt32LE(stored[i], off);
for (const p of stored) {
    const logit = new Float64Array(V);
    let mx = -Infinity;
    for (const [tok, v] of out[p].next.logits) {
        logit[tok] = v;
        if (v > mx) mx = v;
    }
    let z = 0;
    for (let i = 0; i < V; i++) z += Math.exp(logit[i] - mx);
    for (let i = 0; i < V; i++, off += 4) buf.writeFloatLE(Math.exp(logit[i] - mx) / z, off);
}
fs.writeFileSync(outPath, buf);
await context.dispose();
await model.dispose();
console.log(`record_logits: ${n} positions (${ns} stored) x ${V} probabilities -> ${outPath}`);
