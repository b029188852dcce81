// record_tokens.mjs - records llama.cpp's token ids for the tokenizer test
// corpus (tests/data/tokenizer/corpus.json) on one GGUF vocabulary, through
// node-llama-cpp 3.22.1 (llama.cpp's llama_tokenize with add_special false),
// into a JSON vector file that test_tokenizer.c compares against.
//
// Every case is recorded twice, with special-token parsing on and off.
// Inputs are kept as hex bytes. node-llama-cpp only takes JS strings (valid
// UTF-8), so a case with invalid UTF-8 is given to llama.cpp as the string of
// the code points llama.cpp itself decodes those bytes to (each invalid byte
// U+FFFD, src/unicode.cpp unicode_cpts_from_utf8): llama.cpp tokenizes the
// re-encoded code points, so the ids are the ones it gives for the raw bytes.
// Cases whose decoding yields a surrogate or a code point above U+10FFFF
// cannot be passed that way and are left out (with a note on stderr).
//
// usage: node tests/oracle/record_tokens.mjs MODEL.gguf CORPUS.json OUT.json LABEL
// env:   ORACLE_DIR (default ~/.cache/moestream/oracle)
import fs from "node:fs";

import { getCpuLlama, loadCpuModel } from "./llama.mjs";

const [modelPath, corpusPath, outPath, label] = process.argv.slice(2);
if (!label) {
    console.error("usage: node record_tokens.mjs MODEL.gguf CORPUS.json OUT.json LABEL");
    process.exit(2);
}

// llama.cpp's UTF-8 decoding: no overlong or surrogate checks; a bad or
// truncated sequence is one byte -> U+FFFD.
function llamaCodepoints(b) {
    const out = [];
    for (let i = 0; i < b.length;) {
        const c0 = b[i];
        let len = c0 < 0x80 ? 1 : c0 < 0xc0 ? 0 : c0 < 0xe0 ? 2 : c0 < 0xf0 ? 3 : c0 < 0xf8 ? 4 : 0;
        let cp = len === 1 ? c0 : len === 2 ? c0 & 0x1f : len === 3 ? c0 & 0x0f : c0 & 0x07;
        if (len === 0 || i + len > b.length) len = 0;
        for (let k = 1; k < len; k++) {
            if ((b[i + k] & 0xc0) !== 0x80) { len = 0; break; }
            cp = (cp << 6) | (b[i + k] & 0x3f);
        }
        if (len === 0) { out.push(0xfffd); i += 1; } else { out.push(cp); i += len; }
    }
    return out;
}

const llama = await getCpuLlama("error");
const model = await loadCpuModel(llama, modelPath, { vocabOnly: true });
const corpus = JSON.parse(fs.readFileSync(corpusPath, "utf8"));
const cases = [];
for (const c of corpus.cases) {
    const bytes = c.hex !== undefined
        ? Buffer.from(c.hex.replace(/\s+/g, ""), "hex")
        : Buffer.from(c.text, "utf8");
    const cps = llamaCodepoints(bytes);
    if (cps.some((x) => (x >= 0xd800 && x <= 0xdfff) || x > 0x10ffff)) {
        console.error(`skip ${c.name}: decodes to a code point JS strings cannot carry`);
        continue;
    }
    const str = String.fromCodePoint(...cps);
    for (const special of [true, false]) {
        const ids = Array.from(model.tokenize(str, special));
        cases.push({ name: c.name, parse_special: special, hex: bytes.toString("hex"), ids });
    }
}
const out = {
    comment: "llama.cpp token ids (node-llama-cpp 3.22.1, llama.cpp de3ff815, add_special false); " +
        "regenerate with scripts/record-tokenizer-vectors.sh",
    vocab: label,
    n_vocab: model.fileInsights?.tokenizer?.n_vocab ?? null,
    cases,
};
fs.writeFileSync(outPath, JSON.stringify(out, null, 0).replace(/\{"name"/g, '\n{"name"') + "\n");
console.log(`${label}: ${cases.length} vectors -> ${outPath}`);
await model.dispose();
await llama.dispose();
