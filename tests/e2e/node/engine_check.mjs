// The official openai Node SDK against a gateway in front of the bundled engines (local.yaml):
// what the Done-when lists, each outcome printed as one JSON object.
//
//   node engine_check.mjs <base_url> <api_key> <timeout_ms>
//
// tests/engine/test_quickstart.py runs it against a real gateway and asserts on what it prints.
import OpenAI from "openai";

const [baseURL, apiKey, timeoutMs] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: Number(timeoutMs) });
const MODEL = "smollm2-135m-instruct";
const HELLO = [{ role: "user", content: "Say hello." }];
const WEATHER = {
  type: "function",
  function: { name: "get_weather", description: "Get the weather for a city",
              parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } },
};
const PREFIX = "You are a librarian. " + Array.from({ length: 60 }, (_, i) => `Shelf ${i} holds books about topic ${i}.`).join(" ");

async function collect(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

const checks = {
  async streamUsage() {
    const chunks = await collect(await client.chat.completions.create({
      model: MODEL, messages: HELLO, max_tokens: 6, stream: true, stream_options: { include_usage: true } }));
    const last = chunks.at(-1);
    return { lastChoices: last.choices.length, usage: last.usage };
  },
  async logprobs() {
    const r = await client.chat.completions.create({ model: MODEL, messages: HELLO, max_tokens: 3, logprobs: true, top_logprobs: 5 });
    return r.choices[0].logprobs.content.map((t) => ({ bytes: t.bytes, top: t.top_logprobs.map((a) => ({ logprob: a.logprob, bytes: a.bytes })) }));
  },
  async cached() {
    const ask = (q) => client.chat.completions.create({ model: MODEL, max_tokens: 2,
      messages: [{ role: "system", content: PREFIX }, { role: "user", content: q }] });
    const first = await ask("Shelf 3?");
    const again = await ask("Shelf 7?");
    return { first: first.usage, again: again.usage };
  },
  async embeddings() {
    const r = await client.embeddings.create({ model: "smollm2-135m-embed", input: ["a cat", "a dog"] });
    return { count: r.data.length, dims: r.data.map((d) => d.embedding.length) };
  },
  async toolCall() {
    const r = await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "What is the weather in Paris?" }],
      tools: [WEATHER], tool_choice: "required", max_tokens: 200, temperature: 0 });
    const calls = r.choices[0].message.tool_calls ?? [];
    return { finish: r.choices[0].finish_reason, calls: calls.map((c) => ({ name: c.function.name, arguments: c.function.arguments })) };
  },
  async toolAuto() {
    const r = await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "What is the weather in Paris?" }],
      tools: [WEATHER], max_tokens: 8 });
    return { finish: r.choices[0].finish_reason, hasAnswer: Boolean(r.choices[0].message.content || r.choices[0].message.tool_calls) };
  },
  async fourStreams() {
    const one = async () => {
      const chunks = await collect(await client.chat.completions.create({ model: MODEL, messages: HELLO, max_tokens: 24,
        stream: true, stream_options: { include_usage: true }, ignore_eos: true }));
      return { finish: chunks.filter((c) => c.choices[0]?.finish_reason).map((c) => c.choices[0].finish_reason),
               tokens: chunks.at(-1).usage?.completion_tokens };
    };
    return await Promise.all([one(), one(), one(), one()]);
  },
};

const out = {};
for (const [name, check] of Object.entries(checks)) {
  try {
    out[name] = await check();
  } catch (err) {
    out[name] = { error: { class: err.constructor.name, status: err.status ?? null, message: String(err.message) } };
  }
}
console.log(JSON.stringify(out));
