// Drives a running llmflow gateway with the official openai npm package.
// Environment: LLMFLOW_BASE_URL (…/v1), LLMFLOW_KEY, LLMFLOW_MODEL.
// Prints one JSON line with what it saw; exits non-zero on any failure.
import OpenAI from "openai";

const client = new OpenAI({
  baseURL: process.env.LLMFLOW_BASE_URL,
  apiKey: process.env.LLMFLOW_KEY,
  maxRetries: 0,
  timeout: 20000,
});
const model = process.env.LLMFLOW_MODEL;
const out = {};

const models = await client.models.list();
out.models = models.data.map((m) => m.id);

const chat = await client.chat.completions.create({
  model,
  messages: [{ role: "user", content: "Hello" }],
  max_tokens: 4,
});
out.chat = { content: chat.choices[0].message.content, usage: chat.usage };

const stream = await client.chat.completions.create({
  model,
  messages: [{ role: "user", content: "Hello" }],
  max_tokens: 5,
  stream: true,
  stream_options: { include_usage: true },
});
let text = "";
let usage = null;
let chunks = 0;
for await (const chunk of stream) {
  chunks++;
  if (chunk.choices.length > 0) text += chunk.choices[0].delta.content ?? "";
  if (chunk.usage) usage = chunk.usage;
}
out.stream = { text, usage, chunks };

try {
  await client.chat.completions.create({ model: "no-such-model", messages: [] });
  out.unknownModel = "no error";
} catch (e) {
  out.unknownModel = { status: e.status, type: e.type ?? e.error?.type, message: e.message };
}
console.log(JSON.stringify(out));
