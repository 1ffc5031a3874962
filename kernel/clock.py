"""Clocks are passed in, never read from a module global: a `Clock` returns seconds.

Monotonic clocks (`time.monotonic`, `time.perf_counter`) measure durations and deadlines; the
wall clock (`time.time`) stamps what is stored or shared between replicas. Tests pass fake ones.
"""

from __future__ import annotations

from collections.abc import Callable

Clock = Callable[[], float]
