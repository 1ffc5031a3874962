// The official openai Node SDK against a running gateway: each check's outcome as one JSON object.
//
//   node sdk_check.mjs <base_url> <api_key>
//
// tests/e2e/test_node_sdk.py starts the gateway and its fake upstreams, runs this, and asserts
// on what it prints. A check that throws is recorded as {error: {...}} with the SDK's error class,
// so the Python side can assert on typed errors the way a Node user would catch them.
import OpenAI from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 10_000 });
const wrongKey = new OpenAI({ baseURL, apiKey: "sk-not-a-gateway-key", maxRetries: 0, timeout: 10_000 });
const HELLO = [{ role: "user", content: "hello there" }];
const WEATHER_TOOL = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Current weather in a city",
    parameters: {
      type: "object",
      properties: { city: { type: "string" }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } },
      required: ["city", "unit"],
    },
  },
};

function describe(err) {
  return {
    class: err.constructor.name,
    isAPIError: err instanceof OpenAI.APIError,
    status: err.status ?? null,
    type: err.type ?? err.error?.type ?? null,
    code: err.code ?? null,
    param: err.param ?? null,
    message: String(err.message),
    requestID: err.requestID ?? null,
  };
}

const checks = {
  async chat() {
    const r = await client.chat.completions.create({ model: "chat-model", messages: HELLO });
    return { object: r.object, model: r.model, content: r.choices[0].message.content,
             finish: r.choices[0].finish_reason, usage: r.usage };
  },

  async chatWithResponse() {
    const { data, response } = await client.chat.completions
      .create({ model: "chat-model", messages: HELLO })
      .withResponse();
    return { content: data.choices[0].message.content, requestId: response.headers.get("x-request-id"),
             endpoint: response.headers.get("x-gateway-endpoint"), attempts: response.headers.get("x-gateway-attempts") };
  },

  async stream() {
    const stream = await client.chat.completions.create({ model: "chat-model", messages: HELLO, stream: true });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    return { chunks: chunks.length, objects: [...new Set(chunks.map((c) => c.object))],
             models: [...new Set(chunks.map((c) => c.model))],
             text: chunks.map((c) => c.choices[0]?.delta?.content ?? "").join(""),
             finish: chunks.at(-1).choices[0].finish_reason, usage: chunks.some((c) => c.usage) };
  },

  async streamUsage() {
    const stream = await client.chat.completions.create({
      model: "chat-model", messages: HELLO, stream: true, stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    const last = chunks.at(-1);
    return { lastChoices: last.choices.length, usage: last.usage };
  },

  async toolCall() {
    const r = await client.chat.completions.create({ model: "chat-model", messages: HELLO, tools: [WEATHER_TOOL] });
    const calls = r.choices[0].message.tool_calls;
    return { finish: r.choices[0].finish_reason, calls: calls.map((c) => ({ id: c.id, name: c.function.name, arguments: c.function.arguments })) };
  },

  async streamToolCall() {
    // The SDK's stream helper reassembles the tool-call deltas into one message.
    const runner = client.chat.completions.stream({ model: "chat-model", messages: HELLO, tools: [WEATHER_TOOL] });
    let deltas = 0;
    runner.on("chunk", () => { deltas += 1; });
    const final = await runner.finalChatCompletion();
    const calls = final.choices[0].message.tool_calls;
    return { chunks: deltas, finish: final.choices[0].finish_reason,
             calls: calls.map((c) => ({ id: c.id, name: c.function.name, arguments: c.function.arguments })) };
  },

  async logprobs() {
    const r = await client.chat.completions.create({ model: "chat-model", messages: HELLO, logprobs: true, top_logprobs: 3 });
    const content = r.choices[0].logprobs.content;
    return { text: r.choices[0].message.content, tokens: content.map((t) => t.token).join(""),
             tops: content.map((t) => t.top_logprobs.length), maxLogprob: Math.max(...content.map((t) => t.logprob)) };
  },

  async completion() {
    const r = await client.completions.create({ model: "chat-model", prompt: "hello there" });
    return { object: r.object, model: r.model, text: r.choices[0].text, finish: r.choices[0].finish_reason };
  },

  async embeddings() {
    // The Node SDK asks for base64 by default and decodes it to floats.
    const r = await client.embeddings.create({ model: "embed-model", input: ["one", "two"] });
    return { object: r.object, model: r.model, count: r.data.length,
             dims: r.data.map((d) => d.embedding.length), numbers: r.data.every((d) => d.embedding.every((x) => typeof x === "number")),
             usage: r.usage };
  },

  async models() {
    const ids = [];
    for await (const m of client.models.list()) ids.push(m.id);
    const one = await client.models.retrieve("chat-model");
    return { ids, retrieved: one.id, object: one.object };
  },

  // -- errors: each must throw the SDK's typed error --------------------------------------
  async wrongKey() { await wrongKey.chat.completions.create({ model: "chat-model", messages: HELLO }); },
  async unknownModel() { await client.chat.completions.create({ model: "no-such-model", messages: HELLO }); },
  async missingMessages() { await client.chat.completions.create({ model: "chat-model" }); },
  async wrongType() { await client.chat.completions.create({ model: "chat-model", messages: HELLO, temperature: "hot" }); },
  async unsupportedParameter() {
    await client.chat.completions.create({ model: "no-tools", messages: HELLO, tools: [WEATHER_TOOL] });
  },
  async rateLimited() { await client.chat.completions.create({ model: "ratelimited", messages: HELLO }); },
  async allFailing() { await client.chat.completions.create({ model: "all-500", messages: HELLO }); },
  async unknownModelRetrieve() { await client.models.retrieve("no-such-model"); },

  async streamCut() {
    // The upstream breaks after two events: the SDK must throw, not end cleanly.
    const stream = await client.chat.completions.create({ model: "cut-stream", messages: HELLO, stream: true });
    const chunks = [];
    try {
      for await (const chunk of stream) chunks.push(chunk);
    } catch (err) {
      return { chunks: chunks.length, firstRole: chunks[0]?.choices[0]?.delta?.role ?? null, error: describe(err) };
    }
    return { chunks: chunks.length, error: null };
  },
};

const out = {};
for (const [name, check] of Object.entries(checks)) {
  try {
    out[name] = { ok: (await check()) ?? null };
  } catch (err) {
    out[name] = { error: describe(err) };
  }
}
process.stdout.write(JSON.stringify(out) + "\n");
