"""Per-key and per-team limits and budgets: a pipeline stage (`stage.Limiter.admit`, before
dispatch) and an observer of the finished request (`Limiter.finished`, settlement)."""
