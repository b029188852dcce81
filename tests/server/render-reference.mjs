// render-reference.mjs - records reference renderings of DeepSeek V4's chat
// template for tests/test_chat_template_ref.c: renders each case of
// tests/data/chat_template/cases.json with the template file given on the
// command line, using a real Jinja engine (@huggingface/jinja), and writes
// tests/data/chat_template/<name>.txt. Run through
// scripts/record-chat-template.sh, which finds the template and the engine.
//   node render-reference.mjs TEMPLATE.jinja CASES.json OUTDIR
import fs from "node:fs";
import path from "node:path";
import { Template } from "@huggingface/jinja";

const [tplPath, casesPath, outDir] = process.argv.slice(2);
if (!tplPath || !casesPath || !outDir) {
  console.error("usage: node render-reference.mjs TEMPLATE.jinja CASES.json OUTDIR");
  process.exit(2);
}
const template = new Template(fs.readFileSync(tplPath, "utf8"));
const cases = JSON.parse(fs.readFileSync(casesPath, "utf8"));
for (const c of cases) {
  const ctx = {
    messages: c.messages,
    bos_token: "<｜begin▁of▁sentence｜>",
    eos_token: "<｜end▁of▁sentence｜>",
    add_generation_prompt: c.add_generation_prompt,
    thinking: c.thinking,
  };
  if (c.tools) ctx.tools = c.tools;
  if (c.response_format) ctx.response_format = c.response_format;
  if (c.reasoning_effort) ctx.reasoning_effort = c.reasoning_effort;
  const out = template.render(ctx);
  fs.writeFileSync(path.join(outDir, c.name + ".txt"), out);
  console.log(`${c.name}: ${Buffer.byteLength(out)} bytes`);
}
