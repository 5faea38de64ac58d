// llama.cpp itself (npm's node-llama-cpp: prebuilt llama.cpp, CPU) against ringtrain on
// The same exported model (the acceptance test of GGUF export):
//   1. the f32 GGUF loads; a Vietnamese prompt with tone marks, đ/Đ, digits and a
//      newline tokenizes to exactly ringtrain's ids;
//   2. greedy decoding of N tokens gives ringtrain's ids (`sample --temperature 0`);
//   3. the next-token log-probabilities agree within 1e-3 after the prompt and after
//      every generated prefix (node-llama-cpp exposes softmax(logits), so logits are
//      compared up to softmax's additive constant);
//   4. the f16 GGUF gives the same ids, or diverges only where ringtrain's two best
//      logits are within NEAR_TIE of each other (a near-tie that f16 rounding may flip).
// Usage: node llama_cpp_check.mjs --modules DIR --ringtrain BIN --ckpt DIR
//          --f32 MODEL.gguf [--f16 MODEL.gguf] [--tokens 32]
// (DIR from tools/install-node-llama-cpp). Prints figures; exits 1 on any mismatch.
import {execFileSync} from "node:child_process";
import path from "node:path";
import {pathToFileURL} from "node:url";

const LOGPROB_TOLERANCE = 1e-3;
const NEAR_TIE = 0.05;  // nats between ringtrain's best and the id f16 chose
const PROMPT = "Đà Nẵng có 8 quận, huyện; năm 2019 dân số là 1.134.310 người.\n" +
    "Việt Nam nằm ở Đông Nam Á.";

function parseArgs(argv) {
  const a = {tokens: 32};
  for (let i = 2; i < argv.length; i += 2) a[argv[i].replace(/^--/, "")] = argv[i + 1];
  for (const k of ["modules", "ringtrain", "ckpt", "f32"]) {
    if (!a[k]) throw new Error(`missing --${k}`);
  }
  a.tokens = Number(a.tokens);
  return a;
}

const args = parseArgs(process.argv);
const {getLlama, LlamaLogLevel} = await import(
    pathToFileURL(path.join(args.modules, "node_modules/node-llama-cpp/dist/index.js")).href);
let failures = 0;
function check(ok, what) {
  console.log(`${ok ? "ok  " : "FAIL"} ${what}`);
  if (!ok) failures++;
}

// ringtrain: `sample --json --logits` (fp32, greedy): prompt_ids, ids, and for each id
// the logits it was drawn from.
function ringtrain(prompt, tokens) {
  const out = execFileSync(args.ringtrain, [
    "sample", "--ckpt", args.ckpt, "--prompt", prompt, "--temperature=0", `--tokens=${tokens}`,
    "--json", "--logits", "--precision=fp32", "--threads=1",
  ], {encoding: "utf8", stdio: ["ignore", "pipe", "inherit"], maxBuffer: 1 << 30});
  return JSON.parse(out);
}

function logSoftmax(logits) {
  let max = -Infinity;
  for (const x of logits) max = Math.max(max, x);
  let sum = 0;
  for (const x of logits) sum += Math.exp(x - max);
  const lse = max + Math.log(sum);
  return logits.map((x) => x - lse);
}

// max |log p_llama - log p_ringtrain| over the vocabulary; ids whose llama.cpp
// probability underflowed to 0 must be very unlikely for ringtrain too.
function logprobDistance(probabilities, ourLogits) {
  const ours = logSoftmax(ourLogits);
  let worst = 0;
  for (let id = 0; id < ours.length; id++) {
    const p = probabilities.get(id) ?? 0;
    const d = p > 0 ? Math.abs(Math.log(p) - ours[id]) : (ours[id] < -80 ? 0 : Infinity);
    worst = Math.max(worst, d);
  }
  return worst;
}

function argmaxMargin(logits, chosen) {
  let best = 0;
  for (let i = 1; i < logits.length; i++) if (logits[i] > logits[best]) best = i;
  return logits[best] - logits[chosen];
}

const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});

// Greedy generation in llama.cpp with the probabilities of every step. The KV cache is
// f32 (llama.cpp's default is f16) so that the f32 file is compared in f32 throughout.
async function llamaGreedy(modelPath, ids, n) {
  const model = await llama.loadModel({modelPath});
  const context = await model.createContext({
    contextSize: model.trainContextSize, threads: 1, flashAttention: false,
    experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
  });
  const tokenized = Array.from(model.tokenize(PROMPT, false));
  const steps = [];
  const sequence = context.getSequence();
  const started = performance.now();
  for await (const r of sequence.evaluateWithMetadata(ids, {probabilities: true},
                                                      {temperature: 0, yieldEogToken: true})) {
    steps.push(r);
    if (steps.length >= n || r.token === model.tokens.eos) break;
  }
  const seconds = (performance.now() - started) / 1000;
  await context.dispose();
  await model.dispose();
  return {tokenized, steps, seconds};
}

const ours = ringtrain(PROMPT, args.tokens);
const promptIds = ours.prompt_ids;
console.log(`prompt: ${JSON.stringify(PROMPT)} -> ${promptIds.length} ringtrain ids`);
console.log(`ringtrain greedy: ${JSON.stringify(ours.ids)}`);

// 1-3: the f32 file.
const f32 = await llamaGreedy(args.f32, promptIds, args.tokens);
check(JSON.stringify(f32.tokenized) === JSON.stringify(promptIds),
      `llama.cpp tokenizes the prompt into ringtrain's ids` +
      (JSON.stringify(f32.tokenized) === JSON.stringify(promptIds)
           ? ""
           : `: llama.cpp ${JSON.stringify(f32.tokenized)}`));
const f32Ids = f32.steps.map((s) => s.token);
check(JSON.stringify(f32Ids) === JSON.stringify(ours.ids),
      `f32: greedy ${ours.ids.length} ids equal` +
      (JSON.stringify(f32Ids) === JSON.stringify(ours.ids) ? "" : `: llama.cpp ${JSON.stringify(f32Ids)}`));
// Logits after the prompt and after each generated prefix (ringtrain's --logits: one
// list per new id, the logits it was drawn from).
const ourLogitsAt = ours.logits;
let worst = 0, worstStep = 0;
for (let k = 0; k < Math.min(f32.steps.length, ourLogitsAt.length); k++) {
  const d = logprobDistance(f32.steps[k].probabilities, ourLogitsAt[k]);
  if (d > worst) [worst, worstStep] = [d, k];
}
const first = logprobDistance(f32.steps[0].probabilities, ourLogitsAt[0]);
check(first < LOGPROB_TOLERANCE,
      `f32: next-token log-probabilities after the prompt within ${LOGPROB_TOLERANCE}: ` +
      `max |diff| ${first.toExponential(2)} over ${ourLogitsAt[0].length} ids`);
check(worst < LOGPROB_TOLERANCE,
      `f32: ... and before each of the ${ourLogitsAt.length} generated ids: max |diff| ` +
      `${worst.toExponential(2)} (step ${worstStep})`);
console.log(`llama.cpp f32: ${f32.steps.length} tokens (prompt ${promptIds.length} + ` +
            `generation) in ${f32.seconds.toFixed(3)} s`);

// 4: the f16 file.
if (args.f16) {
  const f16 = await llamaGreedy(args.f16, promptIds, args.tokens);
  const f16Ids = f16.steps.map((s) => s.token);
  const d16 = logprobDistance(f16.steps[0].probabilities, ourLogitsAt[0]);
  console.log(`f16: next-token log-probabilities after the prompt: max |diff| ` +
              `${d16.toExponential(2)} (f16 weights against ringtrain's fp32)`);
  let k = 0;
  while (k < f16Ids.length && k < ours.ids.length && f16Ids[k] === ours.ids[k]) k++;
  if (k === ours.ids.length && f16Ids.length === ours.ids.length) {
    check(true, `f16: greedy ${k} ids equal`);
  } else {
    const margin = argmaxMargin(ourLogitsAt[k], f16Ids[k]);
    check(margin < NEAR_TIE,
          `f16: same ids for ${k} steps, then llama.cpp chose ${f16Ids[k]} where ringtrain ` +
          `chose ${ours.ids[k]}: ringtrain's logits differ there by ${margin.toExponential(2)} ` +
          `(a near-tie is < ${NEAR_TIE})`);
  }
}
console.log(failures === 0 ? "llama.cpp check passed" : `llama.cpp check: ${failures} failure(s)`);
process.exit(failures === 0 ? 0 : 1);
