"""The sentinels' knobs. Starting points follow research/probes.md section 2.5."""

from __future__ import annotations

from pydantic import Field, field_validator

from kernel.frozen import Frozen


class UsageSettings(Frozen):
    # Filler sizes (local cl100k tokens) whose reported counts fix the slope: short enough that no
    # real deployment truncates them.
    fit_sizes: tuple[int, ...] = (16, 48, 96, 160)
    # A long prompt whose reported count falls this share below the fitted line was cut (a real
    # cut is large: 4k of a 128k window; see bench/sentinel_power.py for noisy tokenizers).
    rel_tolerance: float = Field(0.1, gt=0, lt=1)
    # Reported counts must match the reference's (or the frozen baseline's) within this many tokens.
    abs_tolerance: int = Field(2, ge=0)
    # Any real tokenizer lands within ~0.5-2 tokens per cl100k token on English words.
    min_slope: float = Field(0.4, gt=0)


class NeedleSettings(Frozen):
    # A cut that keeps the prompt's tail to C tokens loses a needle at depth d once (1 - d) * size
    # exceeds C, so only an early needle reveals a cut above half the window: at depth 0.05 every
    # prompt longer than ~1.05 C loses it (at 0.5, only those longer than 2 C). A cut that keeps
    # the head loses the question at every depth; one that drops the middle ("middle-out") loses
    # the 0.5 needle; 0.9 is the recency control (it survives a tail cut).
    depths: tuple[float, ...] = Field((0.05, 0.5, 0.9), max_length=8)
    # Sizes halve from the largest down to `min_size` (local cl100k tokens), which is always probed.
    min_size: int = Field(128, ge=32)
    shrink: float = Field(2.0, gt=1)
    # And besides that ladder, sizes at these shares of the largest: with the largest at ~0.86 of
    # the window, prompts at ~0.86, 0.73 and 0.6 of it sit between half and the whole window, so a
    # tail-keeping cut to half loses the early needle of three sizes, not of the largest alone.
    upper_shares: tuple[float, ...] = Field((0.85, 0.7), max_length=8)
    # The largest size stays this far below the advertised window (tokens), plus `max_tokens`.
    margin_tokens: int = Field(64, ge=0)
    # And this share below it, for the gap between the endpoint's tokenizer and ours.
    margin_share: float = Field(0.1, ge=0, lt=1)
    # A cap on the largest size: probing the whole window of a 128k model costs ~0.5M tokens a run.
    max_prompt_tokens: int = Field(32_768, ge=64)
    max_tokens: int = Field(16, ge=4)
    code_digits: int = Field(6, ge=3, le=12)
    # A truncation pattern needs at least this many retrievals lost against the expectation.
    min_lost: int = Field(2, ge=1)
    # A cut's pattern tolerates this many lost cells found again at a larger size of their depth,
    # all below the cut: a borderline retrieval flips with the engine's numerics (batch splits,
    # prompt-cache reuse) between the reference and an honest endpoint.
    noise_cells: int = Field(1, ge=0)

    @field_validator("depths")
    @classmethod
    def _depths_in_the_prompt(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if any(not 0 <= d <= 1 for d in v):
            raise ValueError("each depth is a share of the filler, between 0 and 1")
        return v

    @field_validator("upper_shares")
    @classmethod
    def _shares_below_the_largest(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if any(not 0 < s < 1 for s in v):
            raise ValueError("each upper share is a share of the largest size, strictly between 0 and 1")
        return v


class LoopSettings(Frozen):
    prompts: tuple[str, ...] = (
        "List the days of the week, one per line.",
        "Write a numbered list of ten fruits.",
        "Name every planet of the solar system and say one fact about each.",
        "Explain in a few sentences how a bicycle works.",
    )
    # Sent as the system message of every loop prompt (None: the model's own default).
    system: str | None = None
    # T=0 requests per prompt, and seeded samples per prompt at `temperature` (for the first
    # `sampled_prompts` prompts); seeds run from `seed` upward.
    repeats: int = Field(25, ge=1)
    sampled_prompts: int = Field(2, ge=0)
    samples: int = Field(25, ge=0)
    temperature: float = Field(0.8, gt=0)
    seed: int = 1000
    max_tokens: int = Field(48, ge=8)
    ngram: int = Field(3, ge=1)
    char_ngram: int = Field(12, ge=2)
    # A response loops when it ends on `length` with repetition above this ratio.
    repetition: float = Field(0.5, gt=0, lt=1)
    # T=0 repeats that disagree with their prompt's answer, looping or not, are held to this share
    # (nondeterministic stacks flip now and then).
    floor: float = Field(0.002, gt=0, lt=1)
    # An honest model's answer loops this often on an engine other than the reference's (greedy
    # answers differ between engines: SmolLM2's looped on one of four prompts on llama-cpp-python's
    # `Llama`, on none on llama-server). Held to it: the prompts whose greedy answer loops, and the
    # sampled answers where nothing is expected of them.
    answer_floor: float = Field(0.1, gt=0, lt=1)
    # Cells where the reference itself loops at least this often carry no signal and are left out.
    informative_below: float = Field(0.5, gt=0, le=1)
    alpha: float = Field(0.01, gt=0, lt=1)


class SentinelSettings(Frozen):
    usage: UsageSettings = UsageSettings()
    needle: NeedleSettings = NeedleSettings()
    loops: LoopSettings = LoopSettings()
    # Requests in flight at once, per endpoint.
    concurrency: int = Field(2, ge=1)
