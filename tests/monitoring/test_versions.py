"""The recording rules on every recorded real vLLM exposition (tests/fixtures/vllm-*/, one folder per version):
capacity, used and free blocks from the rules equal the sidecar's on the same exposition.

Each snapshot's vLLM series become constant promtool input series; the sidecar judges the same text with the
recorded flags and version. A version folder added under tests/fixtures is covered without a change here.
Synthetic 0.8- and 0.10-shaped series (old usage name, null block counted) are in the promtool suite.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.pipeline.scrape import parse_version
from exporter.pipeline.target import Settings, one_shot
from grafana.config import DEFAULT
from grafana.generate import to_yaml
from grafana.rules import rule_groups
from tests.monitoring.promql import require

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
# V0 (0.8.5 with VLLM_USE_V1=0) has no null block and no `engine` label; the rules recognise it by the missing label
# (instance_engine:vllm_null_block:bool). Before its first request V0 exports no scheduler gauge at all, so the
# sidecar derives no engine from the idle recording: nothing to compare there.
V0_IDLE = pytest.mark.xfail(reason="V0 exports no scheduler gauge before its first request: no engine to compare",
                            strict=True)
SNAPSHOTS = [pytest.param(p, marks=V0_IDLE) if p.parent.parent.name.endswith("-v0") and p.parent.name == "idle"
             else p for p in sorted(FIXTURES.glob("vllm-*/*/snapshot.prom"))]
READ = ("vllm:cache_config_info", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:num_requests_running",
        "vllm:num_requests_waiting", "vllm:request_prompt_tokens_bucket", "vllm:request_params_max_tokens_bucket",
        "vllm:num_preemptions_total")
POD = {"job": "vllm", "instance": "10.0.0.5:8000"}


def _quote(v: str) -> str:
    return json.dumps(v)


def _series(text: str) -> list[dict[str, str]]:
    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in READ:
                labels = ",".join(f"{k}={_quote(v)}" for k, v in sorted({**s.labels, **POD}.items()))
                out.append({"series": f"{s.name}{{{labels}}}", "values": f"{s.value:g}x10"})
    return out


def _sidecar(folder: Path, text: str) -> list[Any]:
    meta = json.loads((folder / "meta.json").read_text())
    argv = [str(a) for a in meta.get("server_argv") or []]
    t = one_shot(Settings("http://vllm:8000", vllm_args=argv or None, discover_cmdline=False))
    if meta.get("version"):
        t.version = parse_version(json.dumps(meta["version"]))
    elif meta.get("vllm_version"):
        t.version = str(meta["vllm_version"])
    return t.observe(1.0, text).engines


@pytest.mark.parametrize("snapshot", SNAPSHOTS,
                         ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}" if isinstance(p, Path) else None)
def test_rules_agree_with_the_sidecar_on_a_recorded_exposition(snapshot: Path, tmp_path: Path) -> None:
    text = snapshot.read_text()
    engines = _sidecar(snapshot.parent, text)
    assert engines, "the sidecar derived nothing from this exposition"
    exprs = []
    for rule, field in (("instance_engine:vllm_kv_capacity_blocks:usable", "kv_capacity_blocks"),
                        ("instance_engine:vllm_kv_used_blocks:round", "kv_used_blocks"),
                        ("instance_engine:vllm_kv_free_blocks:sub", "kv_free_blocks")):
        samples = []
        v0 = 'engine="' not in text  # V0's series carry no engine label (every V1's do)
        for e in engines:
            labels = {**POD} if v0 else {**POD, "engine": e.engine}
            if field != "kv_capacity_blocks":
                labels["model_name"] = e.model_name
            body = ",".join(f"{k}={_quote(v)}" for k, v in sorted(labels.items()))
            samples.append({"labels": f"{rule}{{{body}}}", "value": getattr(e.headroom, field)})
        exprs.append({"expr": rule, "eval_time": "5m", "exp_samples": samples})
    (tmp_path / "rules.yaml").write_text(to_yaml(rule_groups(DEFAULT)))
    (tmp_path / "test.yaml").write_text(to_yaml({
        "rule_files": ["rules.yaml"], "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": _series(text), "promql_expr_test": exprs}]}))
    done = subprocess.run([require("promtool"), "test", "rules", str(tmp_path / "test.yaml")], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
