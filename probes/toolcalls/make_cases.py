"""Write the fixed tool-call suite, `cases_v1.json` (run once; the JSON is committed, never regenerated
in place: a changed suite is a new version).

    python -m probes.toolcalls.make_cases [--out probes/toolcalls/cases_v1.json]

Kinds: `single` (one call, arguments spelled out: deterministic), `parallel` (two calls),
`nested` (an object argument), `open` (a call is expected, its arguments are free),
`no_call` (tool_choice "none", small talk, or a tool the prompt forbids). Schemas use only what a
JSON-schema grammar enforces (types, enums, required, nested objects, arrays), so an honest
grammar-constrained engine always validates. Every tool requires at least one argument, so a
dropped argument is always a schema mismatch.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

VERSION = 1
CALL_TOKENS = 96
PARALLEL_TOKENS = 128
TEXT_TOKENS = 24

STR = {"type": "string"}
NUM = {"type": "number"}
INT = {"type": "integer"}


def _tool(name: str, description: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    schema = {"type": "object", "properties": props, "required": required}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": schema}}


TOOLS = {
    "get_weather": _tool(
        "get_weather",
        "Current weather in a city.",
        {"city": STR, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        ["city", "unit"],
    ),
    "convert_currency": _tool(
        "convert_currency",
        "Convert an amount of money.",
        {
            "amount": NUM,
            "source": {"type": "string", "enum": ["USD", "EUR", "GBP", "JPY"]},
            "target": {"type": "string", "enum": ["USD", "EUR", "GBP", "JPY"]},
        },
        ["amount", "source", "target"],
    ),
    "set_alarm": _tool(
        "set_alarm",
        "Set an alarm.",
        {"hour": INT, "minute": INT, "repeat": {"type": "string", "enum": ["once", "daily"]}},
        ["hour", "minute"],
    ),
    "translate": _tool(
        "translate",
        "Translate a short text.",
        {"text": STR, "language": {"type": "string", "enum": ["french", "german", "spanish", "italian"]}},
        ["text", "language"],
    ),
    "lookup_order": _tool("lookup_order", "Find an order by its id.", {"order_id": STR}, ["order_id"]),
    # Optional fields are enums or numbers: an optional free-text field lets a tiny model write
    # until max_tokens inside the call.
    "send_email": _tool(
        "send_email",
        "Send an email.",
        {"to": STR, "subject": STR, "priority": {"type": "string", "enum": ["low", "normal", "high"]}},
        ["to", "subject"],
    ),
    "create_event": _tool(
        "create_event",
        "Add a calendar event.",
        {
            "title": STR,
            "date": STR,
            "location": {"type": "object", "properties": {"city": STR, "room": STR}, "required": ["city", "room"]},
            "attendees": {"type": "array", "items": STR},
        },
        ["title", "date", "location"],
    ),
    "search_products": _tool(
        "search_products",
        "Search the shop.",
        {"query": STR, "category": {"type": "string", "enum": ["books", "electronics", "clothing"]}, "max_price": NUM},
        ["query", "category"],
    ),
}
DISTRACTORS = list(TOOLS)


def _tools_for(names: list[str], i: int) -> list[dict[str, Any]]:
    """The case's tools plus one distractor, picked by the case number."""
    extra = next(d for k in range(len(DISTRACTORS)) if (d := DISTRACTORS[(i + k) % len(DISTRACTORS)]) not in names)
    return [TOOLS[n] for n in [*names, extra]]


def _named(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name}}


def _choice(i: int, name: str) -> Any:
    """Spread the forcing styles over the deterministic cases: forced (named or required) but one in ten
    auto, so that a tiny model still makes about 100 calls per run."""
    return "auto" if i % 10 == 9 else (_named(name), "required")[i % 2]


def _case(
    cid: str, kind: str, prompt: str, tools: list[dict[str, Any]], tool_choice: Any, calls: list[dict[str, Any]] | None,
    *, call: bool, max_tokens: int, parallel: bool = False,
) -> dict[str, Any]:
    case: dict[str, Any] = {
        "id": cid,
        "kind": kind,
        "messages": [{"role": "user", "content": prompt}],
        "tools": tools,
        "tool_choice": tool_choice,
        "max_tokens": max_tokens,
        "expect": {"call": call, "calls": calls},
    }
    if parallel:
        case["parallel_tool_calls"] = True
    return case


def _singles() -> list[dict[str, Any]]:
    rows: list[tuple[str, str, dict[str, Any]]] = []
    for city, unit in [("Paris", "celsius"), ("Tokyo", "celsius"), ("Boston", "fahrenheit"), ("Lima", "celsius"),
                       ("Oslo", "celsius"), ("Denver", "fahrenheit"), ("Cairo", "celsius"), ("Miami", "fahrenheit"),
                       ("Rome", "celsius"), ("Dallas", "fahrenheit"), ("Seoul", "celsius"), ("Phoenix", "fahrenheit"),
                       ("Nairobi", "celsius"), ("Quito", "celsius")]:
        rows.append(("get_weather", f"Weather in {city}, in {unit}.", {"city": city, "unit": unit}))
    for amount, src, dst in [(100, "USD", "EUR"), (25, "EUR", "GBP"), (5000, "JPY", "USD"), (12.5, "GBP", "JPY"),
                             (40, "USD", "JPY"), (75, "EUR", "USD"), (300, "GBP", "EUR"), (9, "USD", "GBP"),
                             (60, "JPY", "EUR"), (18, "EUR", "JPY"), (250, "USD", "GBP"), (7, "GBP", "USD")]:
        rows.append(("convert_currency", f"Convert {amount} {src} to {dst}.",
                     {"amount": amount, "source": src, "target": dst}))
    for hour, minute in [(7, 30), (6, 0), (21, 15), (5, 45), (12, 0), (8, 10), (23, 5), (9, 50), (4, 20), (14, 40),
                         (18, 25), (10, 55)]:
        rows.append(("set_alarm", f"Set an alarm for {hour}:{minute:02d}.", {"hour": hour, "minute": minute}))
    for text, lang in [("good morning", "french"), ("thank you", "german"), ("where is the station", "spanish"),
                       ("see you soon", "italian"), ("I like tea", "french"), ("the bill please", "german"),
                       ("happy birthday", "spanish"), ("good night", "italian"), ("open the door", "french"),
                       ("it is raining", "german"), ("two coffees", "spanish"), ("welcome home", "italian")]:
        rows.append(("translate", f'Translate "{text}" into {lang}.', {"text": text, "language": lang}))
    for order in ["A1001", "B2002", "C3003", "D4004", "E5005", "F6006", "G7007", "H8008"]:
        rows.append(("lookup_order", f"Look up order {order}.", {"order_id": order}))
    for to, subject in [("ann@example.com", "Lunch"), ("bo@example.com", "Report"), ("cy@example.com", "Hello"),
                        ("di@example.com", "Invoice"), ("ed@example.com", "Meeting"), ("fay@example.com", "Tickets")]:
        rows.append(("send_email", f'Email {to} with the subject "{subject}".', {"to": to, "subject": subject}))
    for query, category in [("laptop", "electronics"), ("novel", "books"), ("scarf", "clothing"),
                            ("phone charger", "electronics"), ("atlas", "books"), ("rain jacket", "clothing")]:
        rows.append(("search_products", f'Search the {category} category for "{query}", no price limit.',
                     {"query": query, "category": category}))
    return [
        _case(f"single-{i:03d}", "single", prompt, _tools_for([name], i), _choice(i, name),
              [{"name": name, "arguments": args}], call=True, max_tokens=CALL_TOKENS)
        for i, (name, prompt, args) in enumerate(rows)
    ]


def _parallels() -> list[dict[str, Any]]:
    pairs = [("Paris", "Rome"), ("Tokyo", "Oslo"), ("Lima", "Cairo"), ("Boston", "Miami")]
    out = []
    for i, (a, b) in enumerate(pairs):
        calls = [{"name": "get_weather", "arguments": {"city": c, "unit": "celsius"}} for c in (a, b)]
        out.append(_case(f"parallel-{i:03d}", "parallel", f"Weather in {a} and in {b}, both in celsius.",
                         _tools_for(["get_weather"], i), "required", calls, call=True,
                         max_tokens=PARALLEL_TOKENS, parallel=True))
    for i, (h1, h2) in enumerate([(6, 7), (8, 9), (5, 22), (10, 11)], start=len(pairs)):
        calls = [{"name": "set_alarm", "arguments": {"hour": h, "minute": 0}} for h in (h1, h2)]
        out.append(_case(f"parallel-{i:03d}", "parallel", f"Set two alarms: {h1}:00 and {h2}:00.",
                         _tools_for(["set_alarm"], i), "required", calls, call=True,
                         max_tokens=PARALLEL_TOKENS, parallel=True))
    return out


def _nested() -> list[dict[str, Any]]:
    rows = [("Team sync", "2025-03-14", "Berlin", "A1"), ("Review", "2025-04-02", "Madrid", "B2"),
            ("Lunch", "2025-05-20", "Dublin", "C3"), ("Planning", "2025-06-11", "Vienna", "D4"),
            ("Retro", "2025-07-09", "Prague", "E5"), ("Demo", "2025-08-18", "Lisbon", "F6"),
            ("Kickoff", "2025-09-01", "Warsaw", "G7"), ("Offsite", "2025-10-23", "Athens", "H8")]
    out = []
    for i, (title, date, city, room) in enumerate(rows):
        args = {"title": title, "date": date, "location": {"city": city, "room": room}}
        prompt = f'Create an event "{title}" on {date} in {city}, room {room}.'
        out.append(_case(f"nested-{i:03d}", "nested", prompt, _tools_for(["create_event"], i),
                         _named("create_event") if i % 2 else "required",
                         [{"name": "create_event", "arguments": args}], call=True, max_tokens=CALL_TOKENS))
    return out


def _open() -> list[dict[str, Any]]:
    rows = [("search_products", "Find me a cheap novel."), ("search_products", "I want headphones under 50."),
            ("search_products", "Look for a warm winter coat."), ("search_products", "Any good cookbooks?"),
            ("get_weather", "Should I take an umbrella in London today?"), ("get_weather", "Is it hot in Madrid?"),
            ("set_alarm", "Wake me up early tomorrow."), ("set_alarm", "Remind me at noon."),
            ("translate", "How do you say cheese in french?"), ("send_email", "Tell bo@example.com I am late."),
            ("create_event", "Book a meeting room in Berlin next Monday."), ("lookup_order", "Where is my order Z9?"),
            ("convert_currency", "How many yen is a few dollars?"), ("translate", "Say good luck in italian.")]
    return [
        _case(f"open-{i:03d}", "open", prompt, _tools_for([name], i), "auto" if i % 5 == 4 else "required", None,
              call=True, max_tokens=CALL_TOKENS)
        for i, (name, prompt) in enumerate(rows)
    ]


def _no_calls() -> list[dict[str, Any]]:
    out = []
    prompts = ["Weather in Paris, in celsius.", "Convert 10 USD to EUR.", "Set an alarm for 7:00.",
               "Look up order A1001.", "Translate hello into german.", "Find a cheap book.",
               "Email ann@example.com.", "Create an event tomorrow."]
    for i, prompt in enumerate(prompts):
        name = list(TOOLS)[i % len(TOOLS)]
        out.append(_case(f"none-{i:03d}", "no_call", prompt, _tools_for([name], i), "none", None,
                         call=False, max_tokens=TEXT_TOKENS))
    chat = ["Say hello.", "What is 2 plus 2?", "Name a color.", "Thank you!", "Tell me a short joke.",
            "What day comes after Monday?", "Spell cat.", "Is water wet?"]
    for i, prompt in enumerate(chat):
        out.append(_case(f"chat-{i:03d}", "no_call", prompt, _tools_for(["get_weather"], i), "auto", None,
                         call=False, max_tokens=TEXT_TOKENS))
    forbidden = [("send_email", "Do not send any email. Just say hi."),
                 ("set_alarm", "Do not set an alarm; what time is a good bedtime?"),
                 ("convert_currency", "Without converting anything, name a currency."),
                 ("lookup_order", "Do not look anything up. Say thanks.")]
    for i, (name, prompt) in enumerate(forbidden):
        out.append(_case(f"forbid-{i:03d}", "no_call", prompt, _tools_for([name], i), "auto", None,
                         call=False, max_tokens=TEXT_TOKENS))
    return out


def build() -> dict[str, Any]:
    cases = [*_singles(), *_parallels(), *_nested(), *_open(), *_no_calls()]
    return {"version": VERSION, "cases": cases}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the tool-call suite JSON.")
    parser.add_argument("--out", default=str(Path(__file__).with_name(f"cases_v{VERSION}.json")))
    args = parser.parse_args(argv)
    suite = build()
    lines = ",\n".join(json.dumps(case) for case in suite["cases"])  # one case a line: readable diffs
    Path(args.out).write_text(f'{{"version": {suite["version"]}, "cases": [\n{lines}\n]}}\n')


if __name__ == "__main__":
    main()
