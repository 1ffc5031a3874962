"""Probe requests shaped like users' (issue 22: probe traffic no provider can spot).

A fixed one-word prompt with `max_tokens: 1`, sent hundreds of times, is a fingerprint. Where a
probe's statistic allows it, its requests are drawn instead from a pool that resembles real
traffic: a system prompt, earlier turns, tool definitions, and a user request, with `max_tokens`
jittered where only the first token is read. What stays fixed is what the statistics need:
temperature for logprob probes, the frozen prompts of the drift and distribution tests (their
golden windows and pools are keyed by them), and one conversation per fidelity round (its χ² is
over samples of one distribution). Fidelity's conversation carries no tools: an answer that
becomes a tool call has no first token to count, so dropping it would test the distribution
given "no tool call" against the full one, and an honest endpoint would fail. Every draw comes from the RNG the runner gives the probe
(seeded by `probes.seed`), never the global one: a fixed seed replays the same requests.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from probes.settings import TrafficSettings

SYSTEM_PROMPTS: tuple[str, ...] = (
    "You are a helpful assistant.",
    "You are a friendly assistant for a small online bookshop. Keep answers short.",
    "You are a concise assistant. Answer in plain language and avoid jargon.",
    "You are a helpful assistant that writes for a general audience.",
    "You are an assistant inside a note-taking app. Help the user brainstorm.",
    "You are a cheerful assistant for a family trivia night.",
    "You are an assistant for a travel blog. Be warm and brief.",
    "You help users pick names, titles and ideas. Offer one suggestion at a time.",
)

# Earlier turns of a conversation (user, assistant), as a client would resend them.
HISTORIES: tuple[tuple[tuple[str, str], ...], ...] = (
    (("Hi!", "Hello! How can I help you today?"),),
    (("Can you help me with some ideas?", "Of course. What are you working on?"),),
    (
        ("I'm planning a party for my niece.", "That sounds fun! How old is she turning?"),
        ("She'll be eight.", "Lovely. Eight is a great age for a themed party."),
    ),
    (("I need a break from work.", "Sounds like a good idea. A short walk or a game can help."),),
    (
        ("We're playing a word game.", "Great, I'm ready. What are the rules?"),
        ("Just answer quickly, no explanations.", "Got it. Ask away."),
    ),
    (("Quick question.", "Sure, go ahead."),),
)

# Requests whose first token is genuinely uncertain (a choice, a name, an idea), as users ask
# them: the fidelity test's power comes from that spread.
USER_REQUESTS: tuple[str, ...] = (
    "Give me a random word.",
    "Name any animal.",
    "Pick a number between 1 and 100.",
    "Suggest a name for a pet cat.",
    "Name a colour, any colour.",
    "Suggest one thing I could cook tonight.",
    "Name a city you'd recommend visiting.",
    "Give me one word that describes autumn.",
    "Pick a fruit.",
    "Suggest a title for a short story.",
    "Name a musical instrument.",
    "Give me a random first name.",
    "What's a good name for a goldfish?",
    "Name a board game.",
    "Suggest a hobby I could try this weekend.",
    "Pick a letter of the alphabet.",
)

TOOL_SETS: tuple[tuple[dict[str, Any], ...], ...] = (
    (
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            },
        },
    ),
    (
        {
            "type": "function",
            "function": {
                "name": "search_notes",
                "description": "Search the user's notes.",
                "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
            },
        },
        {
            "type": "function",
            "function": {
                "name": "create_note",
                "description": "Create a note.",
                "parameters": {
                    "type": "object",
                    "properties": {"title": {"type": "string"}, "body": {"type": "string"}},
                    "required": ["title"],
                },
            },
        },
    ),
    (
        {
            "type": "function",
            "function": {
                "name": "convert_currency",
                "description": "Convert an amount between currencies.",
                "parameters": {
                    "type": "object",
                    "properties": {"amount": {"type": "number"}, "from": {"type": "string"}, "to": {"type": "string"}},
                    "required": ["amount", "from", "to"],
                },
            },
        },
    ),
)


def _pick(rng: np.random.Generator, pool: tuple[Any, ...]) -> Any:
    return pool[int(rng.integers(len(pool)))]


def conversation(
    rng: np.random.Generator, settings: TrafficSettings, user: str | None = None, *, tools: bool = True
) -> dict[str, Any]:
    """A request's `messages` (and `tools`, sometimes, unless `tools` is false) as a user's client
    would send them; the last message is `user`, or a request drawn from the pool. Tools only where
    the endpoint takes them and a tool call is an outcome the probe's statistic counts."""
    messages: list[dict[str, str]] = []
    if rng.random() < settings.system_share:
        messages.append({"role": "system", "content": _pick(rng, SYSTEM_PROMPTS)})
    if rng.random() < settings.history_share:
        for asked, answered in _pick(rng, HISTORIES):
            messages += [{"role": "user", "content": asked}, {"role": "assistant", "content": answered}]
    messages.append({"role": "user", "content": user if user is not None else _pick(rng, USER_REQUESTS)})
    body: dict[str, Any] = {"messages": messages}
    if tools and rng.random() < settings.tools_share:
        body["tools"] = [dict(t) for t in _pick(rng, TOOL_SETS)]
    return body


def first_token_budget(rng: np.random.Generator, settings: TrafficSettings) -> int:
    """`max_tokens` for a request of which only the first token is read: 1 plus a jitter."""
    return 1 + int(rng.integers(settings.max_tokens_jitter + 1))
