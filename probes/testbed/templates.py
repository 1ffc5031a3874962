"""Chat templates for models whose GGUF carries none (the shipped Gemma 3 270M has none)."""

from __future__ import annotations

from typing import Any

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Gemma has no system role: system text is a user turn.
GEMMA = (
    "{{ bos_token }}{% for m in messages %}"
    "<start_of_turn>{{ 'model' if m.role == 'assistant' else 'user' }}\n{{ m.content }}<end_of_turn>\n"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
_BY_BASENAME = {"gemma": GEMMA}


def chat_template(metadata: dict[str, Any]) -> str:
    """The GGUF's own template, else one for its model family, else ChatML."""
    own = metadata.get("tokenizer.chat_template")
    if own:
        return str(own)
    basename = str(metadata.get("general.basename") or metadata.get("general.name") or "").lower()
    for family, template in _BY_BASENAME.items():
        if basename.startswith(family):
            return template
    return CHATML
