"""The one base of every configuration model: frozen (hashable, never mutated after validation)
and strict about unknown fields, so a misspelt key is an error rather than ignored."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
