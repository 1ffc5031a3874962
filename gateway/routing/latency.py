"""Decaying latency statistics per endpoint and prompt-size band, and what they predict.

Each endpoint keeps one flat vector of exponentially decaying sums (half-life configurable), so
replicas merge theirs by adding deltas (`gateway.state_store`):

- per band of uncached prompt tokens: weight, sum of TTFT, sum of tokens, and a log-spaced TTFT
  histogram (percentiles);
- weighted sums for a least-squares fit TTFT = a + b * uncached_tokens across bands;
- the decode rate (completion tokens per second after the first token).

Prediction: ``ttft(u) = a + b*u + correction[band(u)]``, where each band's correction is its mean
TTFT minus the line at its mean size (so a band with samples predicts from its own mean, and the
line interpolates and extrapolates). The estimator runs on the endpoint's sums plus `prior_weight`
pseudo-samples: the model's pool (every endpoint of the same model, rescaled) when it has data,
else the deployment's prior (configured, or per-kind defaults). The estimator is scale-invariant,
so an endpoint never observed predicts exactly like its peers and ties keep configuration order.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass

from gateway.routing.settings import LatencySettings

# TTFT histogram: bucket i holds samples below EDGES[i] (the last one is open-ended).
EDGES = tuple(0.005 * 2 ** (i / 2) for i in range(23))
HIST = len(EDGES) + 1
FIT = ("fw", "fu", "ft", "fuu", "fut")
# Ridge on the slope towards the prior's, as a variance of prompt sizes (tokens^2): it takes
# prompts spread over more than about +-256 tokens to move the slope.
SLOPE_RIDGE = 256.0**2
# Where the prior's pseudo-samples sit (tokens).
PRIOR_AT = (0.0, 2048.0)


@dataclass(frozen=True, slots=True)
class Prior:
    ttft_s: float  # a tiny prompt's TTFT
    prefill_tps: float
    decode_tps: float


CLOUD_PRIOR = Prior(ttft_s=0.5, prefill_tps=8000.0, decode_tps=60.0)
ENGINE_PRIOR = Prior(ttft_s=0.05, prefill_tps=400.0, decode_tps=30.0)


def band_of(tokens: float, bands: tuple[int, ...]) -> int:
    return bisect_left(bands, tokens)


def decay(age: float, half_life: float) -> float:
    return 0.5 ** (age / half_life) if age > 0 else 1.0


@dataclass(slots=True)
class EndpointLatency:
    """Read-only predictions for one endpoint (rebuilt when its statistics change)."""

    a: float  # seconds
    b: float  # seconds per uncached prompt token
    decode_tps: float
    correction: tuple[float, ...]
    band_weight: tuple[float, ...]  # the endpoint's own samples per band
    band_p50: tuple[float | None, ...]
    band_p90: tuple[float | None, ...]
    samples: float
    bands: tuple[int, ...]

    def ttft(self, uncached_tokens: int) -> float:
        """Expected TTFT without queueing, for this many uncached prompt tokens."""
        value = self.a + self.b * uncached_tokens + self.correction[bisect_left(self.bands, uncached_tokens)]
        return max(0.0, value)

    def prefill_s(self, tokens: int) -> float:
        return self.b * tokens

    def p90(self, uncached_tokens: int) -> float | None:
        return self.band_p90[band_of(uncached_tokens, self.bands)]


class LatencyModel:
    """Local statistics: the last shared view plus this replica's unsynced observations."""

    def __init__(self, settings: LatencySettings) -> None:
        self._cfg = settings
        self._half_life = settings.half_life_s
        self._nbands = len(settings.bands) + 1
        # Shared view (decayed to base_t) and this replica's deltas since the last push.
        self._base: dict[str, dict[str, float]] = {}
        self._base_t: dict[str, float] = {}
        self._pending: dict[str, dict[str, float]] = {}
        self._summary: dict[str, EndpointLatency] = {}
        self._priors: dict[str, Prior] = {}
        self._explicit: set[str] = set()
        self._model_of: dict[str, str] = {}
        self._pool: dict[str, dict[str, float]] = {}
        self._dirty_models: set[str] = set()
        self._dirty_eps: set[str] = set()

    def configure(self, endpoint_id: str, model: str, prior: Prior, explicit: bool) -> None:
        self._model_of[endpoint_id] = model
        self._priors[endpoint_id] = prior
        if explicit:
            self._explicit.add(endpoint_id)
        self._dirty(endpoint_id)

    # -- observations -------------------------------------------------------------------

    def observe(self, endpoint_id: str, uncached_tokens: int, ttft_s: float | None, decode_tps: float | None, weight: float = 1.0) -> None:
        delta = self._pending.setdefault(endpoint_id, {})
        if ttft_s is not None and ttft_s >= 0:
            _add_sample(delta, band_of(uncached_tokens, self._cfg.bands), float(uncached_tokens), ttft_s, weight)
        if decode_tps is not None and decode_tps > 0 and math.isfinite(decode_tps):
            delta["dw"] = delta.get("dw", 0.0) + weight
            delta["ds"] = delta.get("ds", 0.0) + weight * decode_tps
        self._dirty(endpoint_id)

    def take_pending(self) -> dict[str, dict[str, float]]:
        pending, self._pending = self._pending, {}
        return pending

    def restore_pending(self, pending: dict[str, dict[str, float]]) -> None:
        """Put back deltas taken but not pushed (they stay visible to `raw` meanwhile)."""
        self._pending = pending

    def fold(self, deltas: Mapping[str, Mapping[str, float]], now: float) -> None:
        """Keep unpushed deltas in the local view (the store is away): add them to the base."""
        for endpoint_id, delta in deltas.items():
            base = self._decayed_base(endpoint_id, now)
            for name, value in delta.items():
                base[name] = base.get(name, 0.0) + value
            self._dirty(endpoint_id)

    def adopt(self, shared: Mapping[str, Mapping[str, float]], now: float) -> None:
        """Replace the base with the store's merged view (which includes our pushed deltas)."""
        for endpoint_id, fields in shared.items():
            self._base[endpoint_id] = dict(fields)
            self._base_t[endpoint_id] = now
            self._dirty(endpoint_id)

    def _decayed_base(self, endpoint_id: str, now: float) -> dict[str, float]:
        base = self._base.setdefault(endpoint_id, {})
        factor = decay(now - self._base_t.get(endpoint_id, now), self._half_life)
        if factor != 1.0:
            for name in base:
                base[name] *= factor
        self._base_t[endpoint_id] = now
        return base

    def _dirty(self, endpoint_id: str) -> None:
        self._dirty_models.add(self._model_of.get(endpoint_id, ""))
        self._dirty_eps.add(endpoint_id)

    def refresh(self) -> None:
        """Rebuild the predictions that new statistics changed. Called after each sync, so the
        decision path only ever reads prebuilt summaries."""
        if not self._dirty_eps:
            return
        models = self._dirty_models
        for model in models:
            self._pool.pop(model, None)
        stale = {e for e, m in self._model_of.items() if m in models} | self._dirty_eps
        self._dirty_models, self._dirty_eps = set(), set()
        for endpoint_id in stale:
            self._summary[endpoint_id] = self._build(endpoint_id)

    # -- reads --------------------------------------------------------------------------

    def raw(self, endpoint_id: str) -> dict[str, float]:
        """Base plus pending (undecayed since the last pull: at most one sync interval old)."""
        out = dict(self._base.get(endpoint_id, {}))
        for name, value in self._pending.get(endpoint_id, {}).items():
            out[name] = out.get(name, 0.0) + value
        return out

    def summary(self, endpoint_id: str) -> EndpointLatency:
        cached = self._summary.get(endpoint_id)
        if cached is None:
            cached = self._summary[endpoint_id] = self._build(endpoint_id)
        return cached

    def _pool_sums(self, model: str) -> dict[str, float]:
        pool = self._pool.get(model)
        if pool is None:
            pool = {}
            for endpoint_id, m in self._model_of.items():
                if m == model:
                    for name, value in self.raw(endpoint_id).items():
                        pool[name] = pool.get(name, 0.0) + value
            self._pool[model] = pool
        return pool

    def _pseudo(self, endpoint_id: str) -> dict[str, float]:
        """`prior_weight` pseudo-samples: the model's pool rescaled, else the static prior."""
        k = self._cfg.prior_weight
        prior = self._priors.get(endpoint_id, CLOUD_PRIOR)
        model = self._model_of.get(endpoint_id)
        if endpoint_id not in self._explicit and model is not None:
            pool = self._pool_sums(model)
            w, dw = pool.get("fw", 0.0), pool.get("dw", 0.0)
            if w > 1e-9:
                out = {n: v * k / w for n, v in pool.items() if n not in ("dw", "ds")}
                if dw > 1e-9:
                    out["dw"], out["ds"] = k, pool.get("ds", 0.0) * k / dw
                else:
                    out["dw"], out["ds"] = k, k * prior.decode_tps
                return out
        out = {}
        for u in PRIOR_AT:
            _add_sample(out, band_of(u, self._cfg.bands), u, prior.ttft_s + u / prior.prefill_tps, k / len(PRIOR_AT))
        out["dw"], out["ds"] = k, k * prior.decode_tps
        return out

    def _build(self, endpoint_id: str) -> EndpointLatency:
        own = self.raw(endpoint_id)
        sums = dict(self._pseudo(endpoint_id))
        for name, value in own.items():
            sums[name] = sums.get(name, 0.0) + value
        prior = self._priors.get(endpoint_id, CLOUD_PRIOR)
        a, b = _fit(sums, 1.0 / prior.prefill_tps)
        corrections: list[float] = []
        weights: list[float] = []
        p50s: list[float | None] = []
        p90s: list[float | None] = []
        for band in range(self._nbands):
            w = sums.get(f"n{band}", 0.0)
            weights.append(own.get(f"n{band}", 0.0))
            if w <= 1e-9:
                corrections.append(0.0)
                p50s.append(None)
                p90s.append(None)
                continue
            mean_u, mean_t = sums.get(f"u{band}", 0.0) / w, sums.get(f"s{band}", 0.0) / w
            corrections.append(mean_t - (a + b * mean_u))
            hist = [sums.get(f"h{band}.{i}", 0.0) for i in range(HIST)]
            p50s.append(_quantile(hist, 0.5))
            p90s.append(_quantile(hist, 0.9))
        dw = sums.get("dw", 0.0)
        return EndpointLatency(
            a=a,
            b=b,
            decode_tps=sums.get("ds", 0.0) / dw if dw > 1e-9 else prior.decode_tps,
            correction=tuple(corrections),
            band_weight=tuple(weights),
            band_p50=tuple(p50s),
            band_p90=tuple(p90s),
            samples=own.get("fw", 0.0),
            bands=self._cfg.bands,
        )


def _add_sample(out: dict[str, float], band: int, u: float, t: float, w: float) -> None:
    bucket = bisect_left(EDGES, t)
    for name, value in (
        (f"n{band}", w),
        (f"s{band}", w * t),
        (f"u{band}", w * u),
        (f"h{band}.{bucket}", w),
        ("fw", w),
        ("fu", w * u),
        ("ft", w * t),
        ("fuu", w * u * u),
        ("fut", w * u * t),
    ):
        out[name] = out.get(name, 0.0) + value


def _fit(sums: Mapping[str, float], prior_slope: float) -> tuple[float, float]:
    """TTFT = a + b*u by weighted least squares, the slope ridge-regularised towards the prior's
    (scale-invariant: multiplying every sum by c gives the same line)."""
    w = sums.get("fw", 0.0)
    if w <= 1e-12:
        return 0.0, prior_slope
    mu, mt = sums.get("fu", 0.0) / w, sums.get("ft", 0.0) / w
    var = max(0.0, sums.get("fuu", 0.0) / w - mu * mu)
    cov = sums.get("fut", 0.0) / w - mu * mt
    b = max(0.0, (cov + SLOPE_RIDGE * prior_slope) / (var + SLOPE_RIDGE))
    a = mt - b * mu
    if a < 0.0:
        # No negative TTFT at zero tokens: the line through the origin and the mean instead.
        a, b = 0.0, (mt / mu if mu > 0 else 0.0)
    return a, b


def _quantile(hist: list[float], q: float) -> float | None:
    total = sum(hist)
    if total <= 0:
        return None
    target = q * total
    running = 0.0
    for i, count in enumerate(hist):
        if count <= 0:
            continue
        if running + count >= target:
            lo = EDGES[i - 1] if i > 0 else 0.0
            hi = EDGES[i] if i < len(EDGES) else EDGES[-1] * 2
            return lo + (hi - lo) * (target - running) / count
        running += count
    return EDGES[-1] * 2
