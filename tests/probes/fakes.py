"""Fakes for probe tests: a `ProbeClient` that answers with scripted OpenAI JSON, and `ToyModel`,
a small seeded model over a fixed vocabulary whose faults (another model, shifted logits, a served
temperature) are the ones the probes look for. `live_clients` is the real thing, for tests that
probe testbed endpoints (`probes.testbed`)."""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import numpy as np

from gateway.catalog import Endpoint
from probes.budget import ProbeBudget
from probes.client import ProbeClient, ProbeUnavailable
from probes.prompt_identity import fingerprint, reported_prompt_tokens
from providers.http import AiohttpClient, Timeouts
from tests.fakes.catalog import make_endpoint

Responder = Callable[[dict[str, Any]], "dict[str, Any] | Exception"]


class FakeProbeClient:
    """Duck-types `probes.client.ProbeClient`: every request is recorded and answered by `respond`
    (an exception it returns is raised, as the real client raises `ProbeUnavailable`)."""

    def __init__(self, endpoint: Endpoint, respond: Responder) -> None:
        self.endpoint = endpoint
        self._respond = respond
        self.bodies: list[dict[str, Any]] = []
        self.requests = 0
        self.tokens = 0
        self.errors = 0
        self.prompt_counts: list[tuple[str, int | None]] = []

    @property
    def endpoint_id(self) -> str:
        return self.endpoint.id

    async def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._answer(body)

    async def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._answer(body)

    def _answer(self, body: dict[str, Any]) -> dict[str, Any]:
        self.requests += 1
        self.bodies.append(body)
        result = self._respond(body)
        if isinstance(result, Exception):
            self.errors += 1
            raise result
        self.prompt_counts.append((fingerprint({"model": self.endpoint.model, **body}), reported_prompt_tokens(result)))
        usage = result.get("usage") or {}
        self.tokens += int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))
        return result


def chat_json(
    content: str,
    *,
    token: str | None = None,
    top: Mapping[str, float] | None = None,
    prompt_tokens: int = 10,
    completion_tokens: int = 1,
) -> dict[str, Any]:
    """An OpenAI chat completion; with `top`, first-token logprobs (the sampled `token` first)."""
    message = {"role": "assistant", "content": content}
    choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": "length"}
    if top is not None:
        chosen = token if token is not None else content
        choice["logprobs"] = {
            "content": [
                {
                    "token": chosen,
                    "logprob": top.get(chosen, min(top.values())),
                    "top_logprobs": [{"token": t, "logprob": lp} for t, lp in top.items()],
                }
            ]
        }
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "choices": [choice],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


def unavailable(body: dict[str, Any]) -> Exception:
    return ProbeUnavailable("upstream down", status=503)


def _stable(*parts: object) -> int:
    return zlib.crc32("\x1f".join(map(str, parts)).encode())


class ToyModel:
    """A seeded model: per prompt, logits over `vocab` short tokens drawn from (name, prompt).

    `shift` adds a fixed logit perturbation (a re-quantized copy), `served_temperature` replaces the
    requested one while logprobs stay raw, `noise` adds per-request logprob jitter (batching), and
    another `name` is another model. Requests with a `seed` are reproducible. The sampler cuts the
    tail as a request's `top_k` and `min_p` say (0: no cut), else as `sampler` says (llama-server's
    defaults are top-k 40, min-p 0.05)."""

    def __init__(
        self, name: str = "toy", *, vocab: int = 40, shift: float = 0.0, served_temperature: float | None = None,
        noise: float = 0.0, scale: float = 2.0, seed: int = 0, sampler: Mapping[str, float] | None = None,
    ) -> None:
        self.name = name
        self.sampler = dict(sampler or {})
        self.tokens = [chr(ord("a") + i % 26) + ("" if i < 26 else chr(ord("a") + i // 26)) for i in range(vocab)]
        self.shift = shift
        self.served_temperature = served_temperature
        self.noise = noise
        self.scale = scale
        self._rng = np.random.default_rng(seed)

    def logprobs(self, prompt: str) -> np.ndarray:
        logits = np.random.default_rng(_stable(self.name, prompt)).normal(0, self.scale, len(self.tokens))
        if self.shift:
            shift_rng = np.random.default_rng(_stable(self.name, prompt, "shift"))
            logits = logits + shift_rng.normal(0, self.shift, logits.size)
        return logits - np.log(np.exp(logits).sum())

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = str(body["messages"][-1]["content"])
        rng = np.random.default_rng(body["seed"]) if body.get("seed") is not None else self._rng
        lp = self.logprobs(prompt)
        if self.noise:
            jittered = lp + self._rng.normal(0, self.noise, lp.size)
            lp = jittered - np.log(np.exp(jittered).sum())
        temperature = self.served_temperature
        if temperature is None:
            temperature = float(body.get("temperature", 1.0))
        top_k = int(body.get("top_k", self.sampler.get("top_k", 0)))
        min_p = float(body.get("min_p", self.sampler.get("min_p", 0.0)))
        cut = lp.copy()
        if top_k > 0:
            cut[np.argsort(lp)[::-1][top_k:]] = -np.inf
        if min_p > 0:
            cut[lp < lp.max() + np.log(min_p)] = -np.inf
        picks = [self._pick(cut, temperature, rng) for _ in range(int(body.get("max_tokens", 1)))]
        content = "".join(self.tokens[i] for i in picks)
        top = None
        if body.get("logprobs"):
            k = int(body.get("top_logprobs") or 0)
            order = np.argsort(lp)[::-1][:k]
            top = {self.tokens[i]: float(lp[i]) for i in order}
        return chat_json(content, token=self.tokens[picks[0]], top=top, completion_tokens=len(picks))

    @staticmethod
    def _pick(lp: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
        if temperature <= 0:
            return int(np.argmax(lp))
        z = lp / temperature
        p = np.exp(z - z.max())  # a cut token (-inf) has 0
        return int(rng.choice(lp.size, p=p / p.sum()))


@asynccontextmanager
async def live_clients(base_urls: Mapping[str, str], model: str = "smollm2") -> AsyncIterator[dict[str, ProbeClient]]:
    """Real `ProbeClient`s (endpoint id "testbed/<name>") for named base URLs, e.g. a testbed's."""
    http = AiohttpClient()
    budget = ProbeBudget(requests_per_day=0, tokens_per_day=0, clock=lambda: 0.0)
    timeouts = Timeouts(connect=5.0, first_byte=120.0, between_chunks=120.0, total=300.0)
    try:
        yield {
            name: ProbeClient(make_endpoint(f"testbed/{name}", model, base_url=url), http, timeouts, budget)
            for name, url in base_urls.items()
        }
    finally:
        await http.aclose()
