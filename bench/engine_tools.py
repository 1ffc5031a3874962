"""Tool calls on a bundled-engine model, through the real gateway, with the official openai SDK.

Starts `gwctl serve` (tests/engine/conftest.Gateway) with one llama-server engine on `--model` (a
shipped alias or a .gguf path) and sends the prompts below: 20 that clearly need one of two tools
(get_weather, get_stock_price), each with the argument a correct call carries, and 20 that clearly
need neither. For `tool_choice` omitted (OpenAI's default, non-streamed) and "auto" (streamed,
reassembled by the SDK's stream helper), it counts the prompts answered with a call, the calls that
are the right tool with the right argument, and the calls made where no tool was needed. Then `required` among both tools and a named tool_choice
(streamed and not), the tool-result round trip (does the model's answer use the tool's result),
and speed: decode tokens/s of a plain streamed answer and the time to answer a tool prompt.

Sampling is the gateway's default (OpenAI's temperature 1, top-p 1) unless `--temperature` is set;
`--rounds` repeats the auto rounds (with sampling, each round draws again).

usage: python bench/engine_tools.py [--model PATH|ALIAS] [--name SERVED] [--rounds 1]
                                    [--temperature T] [--threads N] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
from openai.types.chat import ChatCompletionMessage

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.engine.conftest import Gateway  # noqa: E402

WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city name, e.g. Paris"}},
            "required": ["city"],
        },
    },
}
STOCK_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "get_stock_price",
        "description": "Get the latest stock price for a ticker symbol",
        "parameters": {
            "type": "object",
            "properties": {"ticker": {"type": "string", "description": "The ticker symbol, e.g. AAPL"}},
            "required": ["ticker"],
        },
    },
}
TOOLS: list[Any] = [WEATHER_TOOL, STOCK_TOOL]
FORCE_WEATHER: Any = {"type": "function", "function": {"name": "get_weather"}}


@dataclass(frozen=True)
class ToolCase:
    prompt: str
    tool: str
    argument: str
    value: str

    def correct(self, name: str, arguments: str) -> bool:
        """Whether one call is this case's tool with the expected argument (case-insensitive)."""
        if name != self.tool:
            return False
        try:
            parsed = json.loads(arguments)
        except ValueError:
            return False
        got = parsed.get(self.argument) if isinstance(parsed, dict) else None
        return isinstance(got, str) and self.value.lower() in got.lower()


def _weather(prompt: str, city: str) -> ToolCase:
    return ToolCase(prompt, "get_weather", "city", city)


def _stock(prompt: str, ticker: str) -> ToolCase:
    return ToolCase(prompt, "get_stock_price", "ticker", ticker)


NEEDS_TOOL: tuple[ToolCase, ...] = (
    _weather("What's the weather like in Paris right now?", "Paris"),
    _weather("Is it raining in London today?", "London"),
    _weather("How hot is it in Tokyo at the moment?", "Tokyo"),
    _weather("Tell me the current weather in Berlin.", "Berlin"),
    _weather("Do I need an umbrella in Seattle today?", "Seattle"),
    _weather("What's the temperature in Madrid right now?", "Madrid"),
    _weather("Check the weather in Sydney for me.", "Sydney"),
    _weather("Is it snowing in Moscow right now?", "Moscow"),
    _weather("What is the weather in Cairo today?", "Cairo"),
    _weather("Is it sunny in Lisbon at the moment?", "Lisbon"),
    _weather("How windy is it in Chicago today?", "Chicago"),
    _weather("Get me the current weather for Toronto.", "Toronto"),
    _stock("What is the current stock price of AAPL?", "AAPL"),
    _stock("Get me the latest price of MSFT stock.", "MSFT"),
    _stock("How much is one share of TSLA trading at right now?", "TSLA"),
    _stock("What's NVDA's stock price today?", "NVDA"),
    _stock("Look up the latest share price for the ticker AMZN.", "AMZN"),
    _stock("Check the stock price of GOOGL for me.", "GOOGL"),
    _stock("What is IBM stock trading at right now?", "IBM"),
    _stock("Give me the latest stock price for NFLX.", "NFLX"),
)

NO_TOOL: tuple[str, ...] = (
    "Write a haiku about autumn leaves.",
    "What is 12 times 7?",
    "Translate 'good morning' into Spanish.",
    "Tell me a short joke about cats.",
    "What is the capital of Italy?",
    "Explain what a prime number is in one sentence.",
    "Write a Python function that reverses a string.",
    "Who wrote Romeo and Juliet?",
    "Give me three synonyms for 'happy'.",
    "Summarize the story of Cinderella in two sentences.",
    "How many legs does a spider have?",
    "What does HTTP stand for?",
    "Suggest a name for a pet goldfish.",
    "Correct the grammar: 'she go to school every days'.",
    "At what temperature does water boil, in Celsius?",
    "Write a one-line motivational quote.",
    "Hello! How are you today?",
    "Sort these numbers from smallest to largest: 5, 2, 9, 1.",
    "What is the opposite of 'cold'?",
    "Describe the color blue in one sentence.",
)


def messages(prompt: str) -> list[Any]:
    return [{"role": "user", "content": prompt}]


# A call is about 20-30 tokens; a text answer needs none of its tokens to show it made no call.
MAX_TOKENS = 64


def ask(
    client: openai.OpenAI, model: str, prompt: str, *, stream: bool, extra: dict[str, Any]
) -> list[tuple[str, str]]:
    """The (name, arguments) of every call in the answer."""
    message: ChatCompletionMessage
    if stream:
        with client.chat.completions.stream(
            model=model, messages=messages(prompt), tools=TOOLS, max_tokens=MAX_TOKENS, **extra
        ) as s:
            for _ in s:
                pass
            try:
                message = s.get_final_completion().choices[0].message
            except openai.LengthFinishReasonError as cut:  # a text answer cut by max_tokens
                message = cut.completion.choices[0].message
    else:
        message = (
            client.chat.completions.create(
                model=model, messages=messages(prompt), tools=TOOLS, max_tokens=MAX_TOKENS, **extra
            )
            .choices[0]
            .message
        )
    return [(c.function.name, c.function.arguments) for c in message.tool_calls or () if c.type == "function"]


def auto_round(client: openai.OpenAI, model: str, *, stream: bool, extra: dict[str, Any]) -> dict[str, Any]:
    called = correct = false_calls = 0
    misses: list[str] = []
    for case in NEEDS_TOOL:
        calls = ask(client, model, case.prompt, stream=stream, extra=extra)
        called += bool(calls)
        # Correct: the first call is the right tool with the right argument.
        if calls and case.correct(*calls[0]):
            correct += 1
        else:
            misses.append(f"{case.prompt!r} -> {calls}")
    false_prompts = []
    for prompt in NO_TOOL:
        calls = ask(client, model, prompt, stream=stream, extra=extra)
        if calls:
            false_calls += 1
            false_prompts.append(f"{prompt!r} -> {calls}")
    return {
        "needs_tool": len(NEEDS_TOOL), "called": called, "correct": correct,
        "no_tool": len(NO_TOOL), "false_calls": false_calls, "misses": misses, "false": false_prompts,
    }  # fmt: skip


def forced(client: openai.OpenAI, model: str, extra: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, choice in (
        ("required", "required"),
        ("named", FORCE_WEATHER),
    ):
        for stream in (False, True):
            ok = 0
            cases = NEEDS_TOOL if label == "required" else [c for c in NEEDS_TOOL if c.tool == "get_weather"]
            for case in cases:
                calls = ask(client, model, case.prompt, stream=stream, extra={**extra, "tool_choice": choice})
                ok += bool(calls) and case.correct(*calls[0])
            out[f"{label}{'_stream' if stream else ''}"] = f"{ok}/{len(cases)}"
    # Named on a no-tool prompt: a call must come all the same.
    got = sum(
        bool(
            ask(
                client,
                model,
                p,
                stream=False,
                extra={**extra, "tool_choice": FORCE_WEATHER},
            )
        )
        for p in NO_TOOL[:5]
    )
    out["named_on_no_tool_prompts"] = f"{got}/5"
    return out


def round_trip(client: openai.OpenAI, model: str, extra: dict[str, Any]) -> dict[str, Any]:
    """A forced call, then the tool's result sent back with tool_choice omitted: does the answer use
    the result (a made-up, odd figure)?"""
    used = 0
    answers = []
    cases = [c for c in NEEDS_TOOL if c.tool == "get_weather"][:5]
    for case in cases:
        first = client.chat.completions.create(
            model=model,
            messages=messages(case.prompt),
            tools=TOOLS,
            max_tokens=MAX_TOKENS,
            tool_choice=FORCE_WEATHER,
            **extra,
        )
        calls = first.choices[0].message.tool_calls or []
        if not calls:
            answers.append(f"{case.prompt!r}: no call")
            continue
        call = calls[0]
        history: list[Any] = [
            *messages(case.prompt),
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": call.id, "type": "function", "function": {"name": call.function.name, "arguments": call.function.arguments}}
            ]},
            {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature_celsius": 37, "sky": "foggy"})},
        ]  # fmt: skip
        second = client.chat.completions.create(model=model, messages=history, tools=TOOLS, max_tokens=60, **extra)
        text = second.choices[0].message.content or ""
        used += "37" in text or "fog" in text.lower()
        answers.append(f"{case.prompt!r}: {text[:100]!r}")
    return {"used_result": f"{used}/{len(cases)}", "answers": answers}


def speed(client: openai.OpenAI, model: str) -> dict[str, float]:
    decode = []
    for prompt in ("Write a long story about a dragon who lives in a river.", "Explain how a steam engine works."):
        first = last = None
        usage = None
        stream = client.chat.completions.create(
            model=model, messages=messages(prompt), max_tokens=128, stream=True, stream_options={"include_usage": True}
        )
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            if chunk.choices and chunk.choices[0].delta.content:
                last = time.perf_counter()
                first = first or last
        if usage and first and last and last > first:
            decode.append((usage.completion_tokens - 1) / (last - first))
    to_call = []
    for case in NEEDS_TOOL[:4]:
        started = time.perf_counter()
        ask(client, model, case.prompt, stream=False, extra={"temperature": 0})
        to_call.append(time.perf_counter() - started)
    return {"decode_tok_s": statistics.median(decode), "tool_prompt_s": statistics.median(to_call)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2", help="a shipped alias or a .gguf path")
    parser.add_argument("--name", default="tools-model", help="the served model name")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--temperature", type=float, default=None)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: auto,stream,forced,roundtrip,speed")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    extra: dict[str, Any] = {} if args.temperature is None else {"temperature": args.temperature}
    engine: dict[str, Any] = {
        "name": "tools",
        "model": args.model,
        "served_model_name": args.name,
        "n_ctx": 2048,
        "parallel": 1,
    }
    if args.threads:
        engine["n_threads"] = args.threads
    print(
        f"cores {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}; model {args.model}, sampling {extra or 'default'}"
    )
    results: dict[str, Any] = {"model": args.model, "sampling": extra or "default"}
    with tempfile.TemporaryDirectory() as tmp:
        gw = Gateway(Path(tmp), engines=[engine])
        try:
            gw.wait_ready(timeout=300)
            with gw.client() as client:
                for r in range(args.rounds):
                    if "auto" not in skip:
                        results[f"omitted_{r}"] = res = auto_round(client, args.name, stream=False, extra=extra)
                        print(
                            f"tool_choice omitted, round {r}: called {res['called']}/20, correct {res['correct']}/20, false calls {res['false_calls']}/20"
                        )
                    if "stream" not in skip:
                        results[f"auto_stream_{r}"] = res = auto_round(
                            client, args.name, stream=True, extra={**extra, "tool_choice": "auto"}
                        )
                        print(
                            f"tool_choice auto, streamed, round {r}: called {res['called']}/20, correct {res['correct']}/20, false calls {res['false_calls']}/20"
                        )
                if "forced" not in skip:
                    results["forced"] = forced(client, args.name, extra)
                    print(f"forced: {results['forced']}")
                if "roundtrip" not in skip:
                    results["round_trip"] = round_trip(client, args.name, extra)
                    print(f"round trip: the answer used the tool result {results['round_trip']['used_result']}")
                if "speed" not in skip:
                    results["speed"] = speed(client, args.name)
                    print(
                        f"speed: decode {results['speed']['decode_tok_s']:.1f} tok/s, a tool prompt answered in {results['speed']['tool_prompt_s']:.2f}s (median)"
                    )
        finally:
            gw.close()
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
