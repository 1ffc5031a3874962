// The official Anthropic Node SDK (@anthropic-ai/sdk) against a running gateway's /v1/messages:
// each check's outcome as one JSON object.
//
//   node anthropic_check.mjs <gateway_root_url> <api_key>
//
// tests/e2e/test_node_anthropic.py starts the gateway in front of the fake Chat Completions
// upstream, runs this, and asserts on what it prints. A check that throws is recorded as
// {error: {...}} with the SDK's error class.
import Anthropic from "@anthropic-ai/sdk";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new Anthropic({ baseURL, apiKey, maxRetries: 0, timeout: 10_000 });
const wrongKey = new Anthropic({ baseURL, apiKey: "sk-not-a-gateway-key", maxRetries: 0, timeout: 10_000 });
const HELLO = [{ role: "user", content: "hello there" }];
const WEATHER = {
  name: "get_weather",
  description: "Current weather in a city",
  input_schema: {
    type: "object",
    properties: { city: { type: "string" }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } },
    required: ["city", "unit"],
  },
};

function describe(err) {
  return {
    class: err.constructor.name,
    isAPIError: err instanceof Anthropic.APIError,
    status: err.status ?? null,
    type: err.error?.error?.type ?? null,
    message: String(err.message),
  };
}

const checks = {
  async create() {
    const m = await client.messages.create({ model: "chat-model", max_tokens: 64, messages: HELLO });
    return { type: m.type, text: m.content[0].text, stop: m.stop_reason, usage: m.usage };
  },

  async stream() {
    const stream = client.messages.stream({ model: "chat-model", max_tokens: 64, messages: HELLO });
    let text = "";
    stream.on("text", (delta) => { text += delta; });
    const final = await stream.finalMessage();
    return { text, finalText: final.content[0].text, stop: final.stop_reason, usage: final.usage };
  },

  async toolStream() {
    const request = { model: "chat-model", max_tokens: 64, messages: [{ role: "user", content: "weather?" }], tools: [WEATHER] };
    const whole = await client.messages.create(request);
    const stream = client.messages.stream(request);
    let pieces = 0;
    stream.on("inputJson", () => { pieces += 1; });
    const final = await stream.finalMessage();
    const block = final.content.find((b) => b.type === "tool_use");
    return { pieces, input: block.input, wholeInput: whole.content.find((b) => b.type === "tool_use").input,
             stop: final.stop_reason, id: block.id };
  },

  async toolRoundTrip() {
    const question = { role: "user", content: "weather?" };
    const first = await client.messages.create({ model: "chat-model", max_tokens: 64, messages: [question], tools: [WEATHER] });
    const call = first.content.find((b) => b.type === "tool_use");
    const second = await client.messages.create({
      model: "chat-model", max_tokens: 64, tools: [WEATHER], tool_choice: { type: "none" },
      messages: [question, { role: "assistant", content: first.content },
                 { role: "user", content: [{ type: "tool_result", tool_use_id: call.id, content: "18C" }] }],
    });
    return { firstStop: first.stop_reason, secondStop: second.stop_reason, text: second.content[0].text };
  },

  async missingMaxTokens() {
    await client.messages.create({ model: "chat-model", messages: HELLO });
  },

  async badKey() {
    await wrongKey.messages.create({ model: "chat-model", max_tokens: 8, messages: HELLO });
  },

  async cutStream() {
    const stream = client.messages.stream({ model: "cut-stream", max_tokens: 64, messages: HELLO });
    const seen = [];
    try {
      for await (const event of stream) seen.push(event.type);
    } catch (err) {
      return { seen, error: describe(err) };
    }
    return { seen, error: null };
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
