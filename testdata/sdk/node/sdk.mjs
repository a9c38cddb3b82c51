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

const card = await client.models.retrieve(model);
out.retrieved = { id: card.id, object: card.object, owned_by: card.owned_by };
try {
  await client.models.retrieve("no-such-model");
  out.retrieveUnknown = "no error";
} catch (e) {
  out.retrieveUnknown = { status: e.status };
}

const response = await client.responses.create({
  model,
  instructions: "Answer briefly",
  input: "Hello",
  max_output_tokens: 3,
});
out.response = { model: response.model, text: response.output_text, status: response.status, usage: response.usage };

const rstream = await client.responses.create({
  model,
  input: [{ role: "user", content: "Hello" }],
  max_output_tokens: 5,
  stream: true,
});
const types = [];
let rtext = "";
let final = null;
for await (const event of rstream) {
  types.push(event.type);
  if (event.type === "response.output_text.delta") rtext += event.delta;
  if (event.type === "response.incomplete" || event.type === "response.completed") final = event.response;
}
out.responseStream = { types, text: rtext, model: final?.model, usage: final?.usage };

try {
  await client.chat.completions.create({ model: "no-such-model", messages: [] });
  out.unknownModel = "no error";
} catch (e) {
  out.unknownModel = { status: e.status, type: e.type ?? e.error?.type, message: e.message };
}
console.log(JSON.stringify(out));
