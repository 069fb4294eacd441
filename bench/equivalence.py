"""Every answer of the sidecar and of one-shot diagnosis on every recorded timeline, dumped for a refactor's
before/after comparison (a refactor must leave each one byte-identical).

For each recording under tests/fixtures/vllm-*/<scenario>/ and each frame, on the recording's clock:

- sidecar, with the recorded vLLM flags and without them (max_num_seqs then inferred): `Target.observe` as the
  scrape loop calls it, then the JSON diagnosis, the text diagnosis and our /metrics exposition;
- one-shot (`exporter.pipeline.oneshot.observe`, what `diagnose FILE` runs), with and without the flags: the
  JSON and text diagnosis and `recommend`'s answer (or its refusal).

    python -m bench.equivalence dump /tmp/before.jsonl.gz
    python -m bench.equivalence compare /tmp/before.jsonl.gz /tmp/after.jsonl.gz   # exit 1 on any difference
    python -m bench.equivalence compare --by-verdict BEFORE AFTER   # a change that alters answers on purpose:
                                                                    # changed answers per verdict, before -> after
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from exporter.expose import diagnosis
from exporter.expose.collector import HeadroomCollector
from exporter.pipeline import oneshot
from exporter.pipeline.target import Settings, Target
from exporter.planning.recommend import recommend
from exporter.replay import recording
from tests import fixtures

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"


def _recommend(report: Any) -> Any:
    out = []
    for e in report.engines:
        try:
            out.append(recommend(e, 20))
        except ValueError as exc:
            out.append(f"refused: {exc}")
    return out


def answers() -> Iterator[dict[str, Any]]:
    for folder in sorted(p.parent for p in FIXTURES.glob("vllm-*/*/timeline.jsonl.gz")):
        rec = recording.load(folder)
        name = str(folder.relative_to(FIXTURES))
        argv = [str(a) for a in rec.meta.get("server_argv") or []] or None
        start = rec.frames[0][0]
        for flags in (argv, None):
            mode = "flags" if flags else "no-flags"
            target = Target(Settings(url="http://vllm:8000", vllm_args=flags, discover_cmdline=False))
            fixtures.as_recorded(target, rec.meta)
            reg = CollectorRegistry(auto_describe=False)
            reg.register(HeadroomCollector([target]))
            for i, (t, text) in enumerate(rec.frames):
                target.last = target.observe(t - start, text)
                yield {"scenario": name, "path": f"sidecar/{mode}", "frame": i,
                       "json": diagnosis.document([target.last]), "text": diagnosis.render_text([target.last]),
                       "metrics": generate_latest(reg).decode()}
            if flags is None and argv is None:
                break
        for flags in (argv, None):
            mode = "flags" if flags else "no-flags"
            settings = Settings(url="x", vllm_args=flags, discover_cmdline=False)
            for i, (_t, text) in enumerate(rec.frames):
                report = oneshot.observe(f"{name}#{i}", settings, text=text)
                yield {"scenario": name, "path": f"one-shot/{mode}", "frame": i,
                       "json": diagnosis.document([report]), "text": diagnosis.render_text([report]),
                       "recommend": _recommend(report)}
            if flags is None and argv is None:
                break


def dump(path: Path) -> int:
    n = 0
    with gzip.open(path, "wt") as out:
        for a in answers():
            out.write(json.dumps(a, sort_keys=True) + "\n")
            n += 1
    print(f"{n} answers written to {path}")
    return 0


def _key(a: dict[str, Any]) -> tuple[str, str, int]:
    return a["scenario"], a["path"], a["frame"]


def _verdicts(line: str) -> list[str]:
    doc = json.loads(line)["json"]
    return [str(e.get("verdict")) for t in doc["targets"] for e in t.get("engines", [])]


def by_verdict(a: dict[tuple[str, str, int], str], b: dict[tuple[str, str, int], str]) -> str:
    """Changed answers per path and verdict: `before -> after` when the verdict changed, `verdict (same)` when only
    other fields did (explanation, advice, flags, series)."""
    from collections import Counter

    counts: Counter[tuple[str, str]] = Counter()
    for k in sorted(a.keys() & b.keys()):
        if a[k] == b[k]:
            continue
        for x, y in zip(_verdicts(a[k]), _verdicts(b[k]), strict=False):
            counts[(k[1].split("/")[0] + "/" + k[1].split("/")[1], f"{x} -> {y}" if x != y else f"{x} (same)")] += 1
    lines = ["| path | verdict before -> after | answers |", "|---|---|---|"]
    lines += [f"| {path} | {change} | {n} |" for (path, change), n in sorted(counts.items(), key=lambda kv: (kv[0][0],
                                                                                                         -kv[1]))]
    return "\n".join(lines)


def compare(before: Path, after: Path, verdicts: bool = False) -> int:
    def load(p: Path) -> dict[tuple[str, str, int], str]:
        with gzip.open(p, "rt") as f:
            return {_key(d): line for line in f if (d := json.loads(line))}

    a, b = load(before), load(after)
    differ = sorted(k for k in a.keys() & b.keys() if a[k] != b[k])
    missing = sorted(a.keys() ^ b.keys())
    digest = hashlib.sha256("".join(a[k] for k in sorted(a)).encode()).hexdigest()[:16]
    print(f"{len(a)} answers before (sha256 {digest}), {len(b)} after; {len(differ)} differ, {len(missing)} only "
          "on one side")
    if verdicts:
        print(by_verdict(a, b))
        return 1 if differ or missing else 0
    for k in differ[:5]:
        x, y = json.loads(a[k]), json.loads(b[k])
        for field in sorted(x.keys() | y.keys()):
            if x.get(field) != y.get(field):
                print(f"  {k} {field}:\n    before {json.dumps(x.get(field))[:600]}\n    after  "
                      f"{json.dumps(y.get(field))[:600]}")
    return 1 if differ or missing else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.equivalence", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("path", type=Path)
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    c.add_argument("--by-verdict", action="store_true",
                   help="count the changed answers per path and verdict (before -> after) instead of showing them")
    args = ap.parse_args(argv)
    return dump(args.path) if args.cmd == "dump" else compare(args.before, args.after, args.by_verdict)


if __name__ == "__main__":
    sys.exit(main())
