"""The `probes:` section of the config: schedules, budgets, sample sizes, thresholds and the
health state machine's minimum times. Starting points come from research/probes.md section 2."""

from __future__ import annotations

from pydantic import Field, field_validator

from kernel.frozen import Frozen
from probes.sentinels.settings import SentinelSettings


class DriftSettings(Frozen):
    """Logprob drift: one-token T=0 requests with top logprobs, a window of `requests` per prompt."""

    prompts: tuple[str, ...] = ("x", "Qz", "the 7", "reply in one token. 1+1=")
    requests: int = Field(10, ge=2)
    top_logprobs: int = Field(20, ge=1, le=20)  # capped by the deployment's max_top_logprobs
    alpha: float = Field(0.05, gt=0, lt=1)
    permutations: int = Field(1000, ge=50)
    # The reference comparison fails only beyond the honest cross-engine margin (probes.calibration):
    # a calibration file for the model to use before the bundled ones, and the nominal
    # false-positive rate per comparison that picks the margin; a calibration of too few engine
    # families to support it (1/(n + 1) at best) is not used: the equality test stays.
    calibration: str | None = None
    calibration_fpr: float = Field(0.01, gt=0, lt=1)


class DistributionSettings(Frozen):
    """MMD with a Hamming kernel over sampled completions, stratified by prompt."""

    prompts: int = Field(25, ge=1)
    samples_per_prompt: int = Field(10, ge=2)
    max_tokens: int = Field(50, ge=1)
    temperature: float = Field(1.0, gt=0)
    max_chars: int = Field(1000, ge=1)
    alpha: float = Field(0.01, gt=0, lt=1)
    permutations: int = Field(1000, ge=50)


class TrafficSettings(Frozen):
    """Probe requests shaped like users' (probes.traffic), where the probe's statistic allows it."""

    user_like: bool = True  # draw the fidelity probe's conversation from the pool (else `fidelity.prompt`)
    system_share: float = Field(0.7, ge=0, le=1)  # requests with a system prompt
    history_share: float = Field(0.4, ge=0, le=1)  # ...with earlier turns
    # ...with tool definitions, where a probe's statistic counts a tool call (not fidelity's)
    tools_share: float = Field(0.2, ge=0, le=1)
    # Extra max_tokens, drawn in [0, n], on requests of which only the first token is read.
    max_tokens_jitter: int = Field(6, ge=0)


class FidelitySettings(Frozen):
    """Sampled one-token continuations vs the distribution the endpoint's own logprobs imply."""

    prompt: str = "x"
    samples: int = Field(200, ge=10)
    temperature: float = Field(1.0, gt=0)
    top_logprobs: int = Field(20, ge=1, le=20)
    alpha: float = Field(0.01, gt=0, lt=1)
    # The tail truncation an honest sampler may apply (the gateway cannot set a provider's): min-p
    # up to this, before or after the temperature, and top-k down to `tolerated_top_k`.
    tolerated_min_p: float = Field(0.1, ge=0, lt=1)
    tolerated_top_k: int = Field(10, ge=1, le=20)
    # A confirmatory round rejects at `health.confirm_alpha` (0.001) instead of `alpha`: this many
    # times the samples keep its power (at 200, T x0.7 had 0.76-1.0 at 0.01 and far less at 0.001).
    confirm_samples_factor: int = Field(2, ge=1, le=10)


class ConsistencySettings(Frozen):
    """Usage consistency (probes.consistency): identical prompts of one round must report one
    prompt_tokens; read from the round's own traffic, no requests of its own."""

    enabled: bool = True
    # The share of requests an honest endpoint may count otherwise (the null's tolerance).
    tolerated_share: float = Field(0.01, gt=0, lt=1)
    alpha: float = Field(0.01, gt=0, lt=1)
    # The share of its e-value the fleet's e-BH stakes on this check (probes.fleet): its p-value is 1
    # on every honest endpoint, where the whole calibrator would cost 0.5 a round and hold back
    # other probes' demotions; a substitution it catches (p ~ 1e-50) still reaches any bar.
    fleet_weight: float = Field(0.05, ge=0, le=1)


class ToolCallSettings(Frozen):
    """The active tool-call suite, judged K2VV style: pass mark = the reference self-run minus a margin."""

    cases: int | None = Field(None, ge=1)  # cases sampled per run; None runs the whole suite
    alpha: float = Field(0.01, gt=0, lt=1)  # one-sided binomial test of bad responses vs the reference rate
    schema_margin: float = Field(0.03, ge=0, le=1)
    f1_margin: float = Field(0.10, ge=0, le=1)
    exact_margin: float = Field(0.10, ge=0, le=1)
    schema_floor: float = Field(0.97, ge=0, le=1)  # the schema pass mark without a reference
    hard_floor: float = Field(0.95, ge=0, le=1)  # schema accuracy below it demotes outright (if the reference meets it)
    min_calls: int = Field(20, ge=1)  # judged responses (and calls) needed for a verdict and a pass mark
    concurrency: int = Field(4, ge=1)  # requests at once to start with...
    # ...raised, up to this, when the measured latency says the suite would not finish in time.
    max_concurrency: int = Field(8, ge=1)
    # Seconds the suite may take per side; cases still unanswered then are left out (and said so).
    time_budget: float | None = Field(300.0, gt=0)


class AgentSettings(Frozen):
    """Agent evals: each task `attempts` times, up to `max_steps` model turns; pass rates against the
    endpoint's own frozen baseline and the reference (research/probes.md 2.4)."""

    tasks: tuple[str, ...] = ()  # names of built-in tasks; empty runs them all
    attempts: int = Field(3, ge=1)
    max_steps: int = Field(8, ge=1)
    max_tokens: int = Field(1024, ge=16)
    temperature: float = Field(0.7, ge=0)
    alpha: float = Field(0.05, gt=0, lt=1)  # one-sided Fisher exact test: fewer passes than the baseline
    demote_drop: float = Field(0.25, gt=0, le=1)  # a pass rate this far below the baseline demotes...
    min_attempts: int = Field(20, ge=1)  # ...once both sides have this many attempts


class HealthSettings(Frozen):
    """Evidence thresholds and minimum times of HEALTHY -> SUSPECT -> DEMOTED -> PROBATION -> HEALTHY."""

    # A monitoring window's e-value: e = low + high * 1{p <= alpha} (mean 1 under H0 when
    # low + high * alpha == 1), accumulated e-CUSUM style: M = e * max(1, M).
    window_e_low: float = Field(0.5, ge=0)
    window_e_high: float = Field(10.0, gt=0)
    # Hourly windows: null e-CUSUM alarms average at least suspect_e windows (~42 days) apart,
    # and an alarm demotes only if the alarming probe fails its confirmatory re-run
    # (bench/health_sim.py). demote_e >= (low + high) * suspect_e: no null path skips that re-run.
    suspect_e: float = Field(1000.0, gt=1)
    demote_e: float = Field(20_000.0, gt=1)
    # A confirmatory re-run must reject at this level (probes raise their permutation counts so
    # their p-value floor sits below it).
    confirm_alpha: float = Field(0.001, gt=0, lt=1)
    # Routing weight (the quality score routing multiplies in) while suspect and on probation.
    suspect_weight: float = Field(0.5, gt=0, le=1)
    probation_weight: float = Field(0.1, gt=0, le=1)
    demoted_min_seconds: float = Field(86_400.0, ge=0)
    probation_seconds: float = Field(86_400.0, ge=0)
    # After a demotion held back on reference disagreement alone, scheduled rounds ask for no new
    # confirmatory round for this long unless something on the endpoint's own grounds fails: an
    # honest endpoint that another engine's reference always fails would otherwise be re-confirmed
    # every window (~740 rounds a month), and one of them fails its own tests by chance.
    reference_hold_seconds: float = Field(7 * 86_400.0, ge=0)
    clean_windows: int = Field(3, ge=0)
    # Bernoulli CUSUM on passive tool-call error rates (rates per call).
    tool_error_baseline: float = Field(0.002, gt=0, lt=1)
    tool_error_alarm: float = Field(0.05, gt=0, lt=1)
    tool_cusum_h: float = Field(5.0, gt=0)


class FleetSettings(Frozen):
    """False discovery control over the fleet (probes.fleet): a demotion happens only when e-BH at
    `alpha` over every endpoint's e-value of the current audit round rejects that endpoint."""

    enabled: bool = True
    alpha: float = Field(0.1, gt=0, lt=1)  # the FDR bound over the demotions of one round
    round_seconds: float = Field(86_400.0, gt=0)  # one audit round (UTC-aligned)
    # The p-to-e calibrator kappa * p^(kappa - 1); None (the default) averages it over kappa in (0, 1),
    # which gives strong evidence 3-6 times the e-value of kappa 0.5 (probes.stats.evalues).
    kappa: float | None = Field(None, gt=0, lt=1)

    @field_validator("kappa", mode="before")
    @classmethod
    def _mixture_by_name(cls, value: object) -> object:
        """`mixture` (or an empty value) selects the default from the environment, where null cannot be written."""
        if isinstance(value, str) and value.strip().lower() in ("", "mixture", "none", "null"):
            return None
        return value


class ToolMonitorSettings(Frozen):
    """The passive tool-call monitor: live responses checked against the clients' own schemas
    (untrusted input, checked in a worker process) are evidence that can only start an active run
    of the gateway's suite, never move an endpoint's state themselves."""

    schema_max_bytes: int = Field(64 * 1024, ge=16)  # one tool's parameters, as canonical JSON
    schema_max_depth: int = Field(32, ge=2, le=64)
    check_timeout: float = Field(1.0, gt=0)  # seconds one response's check may take; then unchecked
    max_pending: int = Field(16, ge=1)  # checks waiting (each holds its request); past it, not checked
    # An alarm counts only with bad responses from this many distinct client keys since the
    # statistic last started from zero; each key adds at most one bad step to it.
    min_keys: int = Field(2, ge=1)
    # Seconds between the active confirmations alarms may start on one endpoint.
    confirm_cooldown: float = Field(3600.0, ge=0)
    # ...or this many after one that reached no verdict (it raised, or every probe in it came back
    # error/inconclusive): such a run said nothing, so it must not hold off a real confirmation.
    confirm_retry: float = Field(300.0, ge=0)


# What a scheduled job may take beyond probes.audit.seconds: a probe's unwinding at the end of its
# time (probes.runner.STOP_GRACE_S) and the round's untimed work (stores, the consistency check, the decision).
AUDIT_MARGIN_S = 120.0


class AuditSettings(Frozen):
    """How long one audit (its rounds, template checks and probes) may take (probes.deadline): a
    safety net, so that no probe holds the scheduler (or an operator's `gwctl probe`) for good. A
    scheduled run renews its lease while it lasts; the scheduler's liveness limit outlasts it."""

    seconds: float = Field(1800.0, gt=0)
    # Kept for each probe still to run in the round, so one slow probe cannot starve the rest.
    keep_seconds: float = Field(60.0, ge=0)
    # The share of `seconds` the first round leaves for a confirmatory round.
    confirm_share: float = Field(0.3, ge=0, lt=1)


class ProbeSettings(Frozen):
    # Run the scheduler inside the gateway's lifespan (or run `gwctl worker` instead).
    enabled: bool = False
    # Seconds between scheduled runs, per probe; a probe missing here is never scheduled.
    intervals: dict[str, float] = Field(
        default_factory=lambda: {
            "logprob_drift": 3600.0,
            "distribution": 86_400.0,
            "fidelity": 86_400.0,
            "toolcalls": 86_400.0,
            "sentinels": 86_400.0,
            "agent": 604_800.0,
        }
    )
    jitter: float = Field(0.1, ge=0, le=1)  # a fraction of each interval
    # Demoted endpoints are probed this many times less often.
    demoted_slowdown: float = Field(4.0, ge=1)
    lease_seconds: float = Field(900.0, gt=0)
    # Model name -> endpoint id of the reference for that model (default: a local engine
    # endpoint serving the same model, when there is one).
    references: dict[str, str] = Field(default_factory=dict)
    # At an audit's start, compare prompt_tokens with the reference's; a different template drops it.
    template_check: bool = True
    budget_requests_per_day: int = Field(5000, ge=0)
    budget_tokens_per_day: int = Field(500_000, ge=0)
    request_timeout: float = Field(120.0, gt=0)
    seed: int | None = None
    drift: DriftSettings = DriftSettings()
    distribution: DistributionSettings = DistributionSettings()
    fidelity: FidelitySettings = FidelitySettings()
    traffic: TrafficSettings = TrafficSettings()
    consistency: ConsistencySettings = ConsistencySettings()
    toolcalls: ToolCallSettings = ToolCallSettings()
    agent: AgentSettings = AgentSettings()
    sentinels: SentinelSettings = SentinelSettings()
    health: HealthSettings = HealthSettings()
    fleet: FleetSettings = FleetSettings()
    tool_monitor: ToolMonitorSettings = ToolMonitorSettings()
    audit: AuditSettings = AuditSettings()

    def lease_for(self, interval: float) -> float:
        """Seconds a replica holds the lease of a scheduled run due every `interval` (probes.scheduler),
        renewed while the run lasts: most of the interval, so no other replica starts it meanwhile."""
        return max(self.lease_seconds, interval * (1.0 - self.jitter) * 0.95)
