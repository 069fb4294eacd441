"""vLLM's own KV-cache grouping (0.32.0, the pinned venv) on the layer specs of gpt-oss-120b with an EAGLE3
drafter (vllm-project/vllm PR#29303), next to ours: the same groups, padding warning and bytes per block.

No GPU and no checkpoint are needed: `_get_kv_cache_groups_uniform_page_size` and `_get_kv_cache_bytes_per_block`
(vllm/v1/core/kv_cache_utils.py:1362 and :1520 @0.32.0; kv_cache_planning.py:416 and :574 @0.33.0) take the
per-layer specs the model runner would build: 18 sliding-window and 18 full-attention target layers (8 KV heads ×
head_dim 64, bf16, block 16, window 128) and the drafter's full-attention layer after them.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from exporter.model.kv_layout import drafter_of, plan
from exporter.planning.estimate import load_model

from .vllm_server import vllm_python

pytestmark = pytest.mark.e2e

CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "estimate-configs"
PROBE = r"""
import json, logging, io
import torch
from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec, KVCacheLayout
from vllm.v1.core import kv_cache_utils as u
buf = io.StringIO()
handler = logging.StreamHandler(buf)
logging.getLogger("vllm").addHandler(handler)
spec = {}
for i in range(36):
    kind = SlidingWindowSpec if i % 2 == 0 else FullAttentionSpec
    extra = {"sliding_window": 128} if i % 2 == 0 else {}
    spec[f"model.layers.{i}.self_attn.attn"] = kind(block_size=16, num_kv_heads=8, head_size=64,
                                                    dtype=torch.bfloat16, **extra)
spec["model.layers.36.self_attn.attn"] = FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=64,
                                                           dtype=torch.bfloat16)
groups = u._get_kv_cache_groups_uniform_page_size(spec)
print(json.dumps({"groups": sorted(len(g.layer_names) for g in groups),
                  "bytes_per_block": u._get_kv_cache_bytes_per_block(groups, list(KVCacheLayout)[0]),
                  "log": buf.getvalue()}))
"""


def test_vllms_grouping_of_gpt_oss_120b_with_an_eagle3_drafter_is_ours() -> None:
    out = subprocess.run([vllm_python(), "-c", PROBE], capture_output=True, text=True, timeout=600, check=True)
    theirs = json.loads(out.stdout.strip().splitlines()[-1])
    shape = load_model(CONFIGS / "gpt-oss-120b.json")[0]
    draft = load_model(CONFIGS / "gpt-oss-120b-eagle3-drafter.json")[0]
    lay = plan(shape, "bfloat16", 1, 16, drafter=drafter_of("eagle3", shape, "bfloat16", 1, draft))
    assert "Add 1 padding layers, may waste at most 5.56% KV cache memory" in theirs["log"] + out.stderr
    assert theirs["groups"] == sorted(len(g.layers) for g in lay.groups) == [18, 19]
    assert theirs["bytes_per_block"] == lay.bytes_per_block == 19 * 16 * 2 * 8 * 64 * 2
    assert [(kind, pad) for kind, pad, _n in lay.padding] == [("sliding", 1)]
