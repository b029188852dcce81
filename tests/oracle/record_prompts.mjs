// record_prompts.mjs - the fixed prompts of the differential tests: token id
// lists drawn uniformly from [0, n_vocab) by a seeded generator (mulberry32),
// so the committed tests/data/oracle/prompts.json can be remade exactly.
//
// usage: node record_prompts.mjs OUT.json [N_VOCAB] [SEED]
// OUT.json: {"generator", "seed", "n_vocab", "prompts": {"p1": [...], "p20":
// [...], "p400": [...], "p2100": [...]}} (the key names the length).

import fs from "node:fs";

const [outPath, vArg, sArg] = process.argv.slice(2);
if (!outPath) {
    console.error("usage: node record_prompts.mjs OUT.json [N_VOCAB] [SEED]");
    process.exit(2);
}
const nVocab = Number.parseInt(vArg || "512", 10);
const seed = Number.parseInt(sArg || "20260401", 10);

// mulberry32: 32-bit state, one output per step in [0, 2^32)
let state = seed >>> 0;
function next() {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
}
const prompts = {};
for (const len of [1, 20, 400, 2100])
    prompts[`p${len}`] = Array.from({ length: len }, () => next() % nVocab);
fs.writeFileSync(outPath, JSON.stringify({ generator: "mulberry32", seed, n_vocab: nVocab, prompts }) + "\n");
console.log(`record_prompts: ${Object.keys(prompts).length} prompts -> ${outPath}`);
