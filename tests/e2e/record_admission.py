"""Record, from the real vLLM 0.32.0 CPU build, what its admission flags and a speculative drafter do (issue 23
items 2 and 4): `python -m tests.e2e.record_admission [names]` (under the shared lock; ~2 min per server).

Into tests/fixtures/admission-0.32.0/ (outside the `vllm-*/` folders the scorer and the golden files walk: the
scorer's truth does not model these flags):

* `watermark/`: the kv-full load (prompt 352 tokens = 11 blocks, max_tokens 32, 30 clients) on the shared
  server (40 blocks of 32, 39 usable) with `--watermark 0.25`: vLLM keeps int(0.25 × 40) = 10 blocks free when
  admitting beside a running request (vllm/v1/core/kv_cache_manager.py:207-208, 509-516 @0.32.0), so a third
  request (11 + 10 > 17 free) waits where without the flag three run (tests/fixtures/vllm-0.32.0/kv-full);
* `active-seqs/`: the false-full load (100 clients, prompt 16, max_tokens 64) with `--max-num-active-seqs 3`
  (max_num_seqs 8): vLLM admits into RUNNING up to 3 (vllm/v1/core/sched/scheduler.py:921-924 @0.32.0);
* `spec-draft-model/`: the start-up capacity of the tiny Llama (2 layers) with a 1-layer draft model of the same
  attention shape (`--speculative-config {"method": "draft_model", ..., "num_speculative_tokens": 2}`), no block
  override, 1 GiB of KV cache: the drafter's layer joins the target's KV-cache group, so one block holds 3 layers.

Not recordable here: 0.33's prefill cadence without data parallelism (no CPU build of 0.33), the cadence of 0.32
(it needs data-parallel coordination), reserved blocks of async KV loads (no KV connector runs on this CPU build
with a second instance to pull from), EAGLE/EAGLE3 and MTP drafters (no drafter checkpoints of the tiny model).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from exporter.engines.vllm import metrics as vllm
from exporter.pipeline import exposition

from . import record
from .capacity import llama
from .load import Wave
from .scenarios import SHARED_FLAGS, Scenario, _num
from .vllm_server import MODEL_DIR, VllmServer, parse_startup_capacity

OUT = Path(__file__).resolve().parents[1] / "fixtures" / "admission-0.32.0"
WATERMARK = 0.25
ACTIVE = 3

SCENARIOS = {
    s.name: s for s in [
        Scenario(
            name="watermark",
            flags={**SHARED_FLAGS, "extra_args": ("--watermark", str(WATERMARK))},
            waves=[Wave(30, 352, 32, duration=15.0)],
            description=(
                "The kv-full load (30 clients in closed loop for 15 s, prompt 352 tokens = 11 blocks, max_tokens 32) "
                f"with --watermark {WATERMARK}: {int(WATERMARK * 40)} of the 40 blocks stay free when a request is "
                "admitted beside a running one."),
            shows=lambda st, prev: _num(st, "waiting") > 0 and _num(st, "running") > 0,
            score=lambda st, prev: _num(st, "waiting"),
            min_hold_s=5.0,
        ),
        Scenario(
            name="active-seqs",
            flags={**SHARED_FLAGS, "extra_args": ("--max-num-active-seqs", str(ACTIVE))},
            waves=[Wave(100, 16, 64, duration=12.0)],
            description=(
                "The false-full load (100 clients in closed loop for 12 s, prompt 16, max_tokens 64) with "
                f"--max-num-active-seqs {ACTIVE} below --max-num-seqs 8: vLLM admits up to {ACTIVE} into RUNNING."),
            shows=lambda st, prev: _num(st, "waiting") > 0 and _num(st, "running") == ACTIVE,
            score=lambda st, prev: _num(st, "waiting"),
            min_hold_s=5.0,
        ),
    ]
}
DRAFT = llama(1, 2, 1, 64)  # one layer, the target's attention shape (1 KV head x 64)


def record_spec(out: Path) -> dict[str, Any]:
    """Start vLLM with the tiny model and a 1-layer draft model; keep its start-up capacity lines."""
    with tempfile.TemporaryDirectory(prefix="vllm-draft-") as tmp:
        draft = Path(tmp) / "draft"
        shutil.copytree(MODEL_DIR, draft)
        (draft / "config.json").write_text(json.dumps(DRAFT, indent=2))
        spec = {"method": "draft_model", "model": str(draft), "num_speculative_tokens": 2}
        server = VllmServer(num_gpu_blocks_override=None, max_model_len=512, block_size=32, max_num_seqs=8,
                            extra_args=["--speculative-config", json.dumps(spec)])
        server.start()
        try:
            log = server.log_text()
            cap = parse_startup_capacity(log)
            info = exposition.parse(httpx.get(server.url + "/metrics").text, {vllm.CACHE_CONFIG})
            cap["num_gpu_blocks"] = int(info.series(vllm.CACHE_CONFIG)[0][0]["num_gpu_blocks"])
            startup = record._scrub(server.startup_log(), server)
            argv = record._scrub(list(server.argv), server)
            argv[0] = "python"
        finally:
            server.stop()
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text((MODEL_DIR / "config.json").read_text())
    (out / "draft-config.json").write_text(json.dumps(DRAFT, indent=2) + "\n")
    (out / "startup.log").write_text(startup.replace(str(draft), "<draft>"))
    meta = {"block_size": 32, "max_model_len": 512, "dtype": "bfloat16", "VLLM_CPU_KVCACHE_SPACE": 1,
            "speculative_config": {**spec, "model": "<draft>"}, "server_argv": [str(a).replace(str(draft), "<draft>")
                                                                                for a in argv],
            "observed": {k: v for k, v in cap.items() if k != "lines"}}
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def main(names: list[str]) -> int:
    names = names or [*SCENARIOS, "spec-draft-model"]
    failed = []
    for name in names:
        if name == "spec-draft-model":
            print(name, record_spec(OUT / name)["observed"], flush=True)
            continue
        sc = SCENARIOS[name]
        server = VllmServer(**sc.flags)
        server.start()
        with server:
            server.pin_self()
            meta = record.record(sc, server, OUT)
            VllmServer.unpin_self()
        if meta["problems"]:
            failed.append((name, meta["problems"]))
    print("problems:", failed, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
