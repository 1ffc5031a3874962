"""The agent-eval tasks: Flappy Bird as a headless game module, and six small single-file tasks."""

from __future__ import annotations

from probes.agent.tasks.base import Task
from probes.agent.tasks.calc import CALC
from probes.agent.tasks.flappy import FLAPPY
from probes.agent.tasks.ini import INI
from probes.agent.tasks.lru import LRU
from probes.agent.tasks.rate_limiter import RATE_LIMITER
from probes.agent.tasks.roman import ROMAN
from probes.agent.tasks.snake import SNAKE


def builtin_tasks() -> tuple[Task, ...]:
    return (FLAPPY, ROMAN, LRU, CALC, SNAKE, RATE_LIMITER, INI)


def tasks_named(names: tuple[str, ...] | list[str]) -> tuple[Task, ...]:
    """The built-in tasks with these names (all of them when `names` is empty)."""
    known = {t.name: t for t in builtin_tasks()}
    if not names:
        return tuple(known.values())
    missing = [n for n in names if n not in known]
    if missing:
        raise ValueError(f"unknown agent tasks {missing}; known: {', '.join(known)}")
    return tuple(known[n] for n in names)


__all__ = ["Task", "builtin_tasks", "tasks_named"]
