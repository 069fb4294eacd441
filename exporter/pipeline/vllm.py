"""Compatibility path: vLLM's names, readers and release rules moved to the vLLM wing, `exporter.engines.vllm`.

Nothing in `exporter/` imports this module (tests/unit/test_architecture.py); it keeps tools and tests written
against the old layout working. Import from `exporter.engines.vllm` (metrics, read, releases) instead.
"""

from __future__ import annotations

from ..engines.base import FIRST_CHUNK as FIRST_CHUNK
from ..engines.base import FULL_PROMPT as FULL_PROMPT
from ..engines.base import EngineSample as EngineSample
from ..engines.base import Histogram as Histogram
from ..engines.base import InvalidValue as InvalidValue
from ..engines.vllm.metrics import *  # noqa: F403  (the names table)
from ..engines.vllm.read import CacheInfo as CacheInfo
from ..engines.vllm.read import read as read
from ..engines.vllm.releases import Rules as Rules
from ..engines.vllm.releases import parse_release as parse_release
from ..engines.vllm.releases import rules as rules
from ..engines.vllm.releases import usage_counts_null_block as usage_counts_null_block
