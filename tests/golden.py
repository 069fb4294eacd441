"""Golden copies of our own /metrics per recorded scenario: a renamed series or a changed HELP shows up.

Each recorded real-vLLM timeline (tests/fixtures/vllm-*/<scenario>/timeline.jsonl.gz) is fed frame by frame,
on the recording's clock, through a real Target with the recorded flags, /v1/models and /version, up to the
frame at `snapshot_t`; the sidecar's exposition at that moment is the golden file (our exposition carries
no timestamps; scrape durations are absent because nothing was fetched).

    python -m tests.golden            # rewrite every golden-metrics.prom (make golden)
    python -m tests.golden --check    # exit 1 naming the stale ones
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from exporter.expose.collector import HeadroomCollector
from exporter.pipeline.target import Settings, Target
from exporter.replay import recording
from tests import fixtures

FIXTURES = Path(__file__).parent / "fixtures"
NAME = "golden-metrics.prom"


def scenarios() -> list[Path]:
    """Every recorded scenario folder that has a timeline."""
    return sorted(p.parent for p in FIXTURES.glob("vllm-*/*/timeline.jsonl.gz"))


def render(folder: Path) -> str:
    rec = recording.load(folder)
    meta = rec.meta
    argv = [str(a) for a in meta.get("server_argv") or []]
    target = Target(Settings(url="http://vllm:8000", vllm_args=argv or None, discover_cmdline=False))
    fixtures.as_recorded(target, meta)
    start = rec.frames[0][0]
    until = float(meta.get("snapshot_t", rec.duration))
    for t, text in rec.frames:
        if t - start > until + 1e-9:
            break
        target.last = target.observe(t - start, text)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(HeadroomCollector([target]))
    return generate_latest(reg).decode()


def stale() -> list[Path]:
    return [f for f in scenarios() if not (f / NAME).is_file() or (f / NAME).read_text() != render(f)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.golden", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only report stale golden files (exit 1 when any)")
    args = ap.parse_args(argv)
    if args.check:
        bad = stale()
        for f in bad:
            print(f"stale: {f / NAME} (run make golden)", file=sys.stderr)
        return 1 if bad else 0
    for f in scenarios():
        (f / NAME).write_text(render(f))
        print(f"wrote {(f / NAME).relative_to(FIXTURES.parent.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
