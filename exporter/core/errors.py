"""Errors shared by several wings."""

from __future__ import annotations


class Unsupported(ValueError):
    """The model's KV layout (or a config value the engine derives from) is one this version cannot compute
    exactly; the message is one sentence naming the key."""
