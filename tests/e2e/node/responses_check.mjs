// The official openai Node SDK's Responses API against a running gateway: each check's outcome
// as one JSON object (tests/e2e/test_responses.py runs it and asserts on what it prints).
//
//   node responses_check.mjs <base_url> <api_key>
//
// The "scripted" model's upstream answers from a script the Python side set up, in this order:
// a tool call, the text after its output, then two parallel calls (streamed).
import OpenAI from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 10_000 });
const WEATHER = { type: "object", properties: { city: { type: "string" } }, required: ["city"] };
const TOOLS = [
  { type: "function", name: "get_weather", parameters: WEATHER },
  { type: "function", name: "get_time", parameters: WEATHER },
];

function describe(err) {
  return { class: err.constructor.name, isAPIError: err instanceof OpenAI.APIError, status: err.status ?? null,
           message: String(err.message) };
}

const checks = {
  async create() {
    const r = await client.responses.create({ model: "chat-model", input: "hello there" });
    const again = await client.responses.retrieve(r.id);
    return { id: r.id, sameOnRetrieve: JSON.stringify(again) === JSON.stringify(r), text: r.output_text, usage: r.usage };
  },

  async streamText() {
    const stream = client.responses.stream({ model: "chat-model", input: "stream me" });
    const deltas = [];
    const types = [];
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === "response.output_text.delta") deltas.push(event.delta);
    }
    const final = await stream.finalResponse();
    // The helper's final response has no output_text unless it parsed something: read the items.
    const finalText = final.output.flatMap((o) => (o.type === "message" ? o.content : []))
      .filter((c) => c.type === "output_text").map((c) => c.text).join("");
    return { text: deltas.join(""), final: finalText, first: types[0], last: types.at(-1),
             usage: final.usage };
  },

  async toolRoundTrip() {
    const asked = await client.responses.create({ model: "scripted", input: "Weather in Paris?", tools: TOOLS });
    const call = asked.output[0];
    const answer = await client.responses.create({
      model: "scripted", previous_response_id: asked.id, tools: TOOLS,
      input: [{ type: "function_call_output", call_id: call.call_id, output: '{"sky": "sunny"}' }],
    });
    return { call: { type: call.type, name: call.name, arguments: call.arguments, call_id: call.call_id },
             text: answer.output_text };
  },

  async streamParallelCalls() {
    const stream = client.responses.stream({ model: "scripted", input: "both", tools: TOOLS });
    let deltas = 0;
    for await (const event of stream) if (event.type === "response.function_call_arguments.delta") deltas += 1;
    const final = await stream.finalResponse();
    return { deltas, calls: final.output.map((o) => ({ type: o.type, name: o.name, arguments: o.arguments })) };
  },

  async cutStream() {
    const stream = await client.responses.create({ model: "cut-stream", input: "a b c d e f", stream: true });
    const types = [];
    for await (const event of stream) types.push(event.type);
    return { types };
  },

  async unknownId() {
    return await client.responses.retrieve("resp_unknown");
  },
};

const outcomes = {};
for (const [name, check] of Object.entries(checks)) {
  try {
    outcomes[name] = { ok: await check() };
  } catch (err) {
    outcomes[name] = { error: describe(err) };
  }
}
process.stdout.write(JSON.stringify(outcomes));
