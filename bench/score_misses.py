"""Every frame the engine-truth score counts as a miss, per mode, with the engine's step next to our answer.

`python -m bench.score_misses [RECORDING ...] [--mode sidecar|one-shot|one-shot-noflags] [--all]`: for each scored
recording with engine steps (tests/engine_score.py), one line per missed frame: the engine's reason and what it also
reports, the step's state (frame gauges, the stats it was joined by, running/waiting entering it, free blocks, budget
left, the head's blocks and its refusal's need, admitted and preempted this step), then our verdict, binding limit,
admission headroom, free blocks, worst case, max_num_seqs, the token budget's use and the `decided_by` cases.
`--all` lists agreeing frames too. Ends with the misses counted by (mode, recording, engine reason, our verdict):
the groups to read against vLLM's scheduler source."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from exporter.pipeline.report import EngineReport
from exporter.pipeline.target import Settings, Target, one_shot
from exporter.pipeline.verdict import Thresholds
from tests import engine_score as es
from tests import fixtures
from tests.truth import not_scored_reason

ROOT = Path(__file__).resolve().parents[1] / "tests" / "fixtures"


def describe(e: EngineReport) -> str:
    cases = ";".join(f"{c.input}={c.value}->{c.limit}" for c in e.decided_by)
    hr = e.headroom
    return (f"{e.verdict} [{e.binding_limit}] ff={int(e.false_full)} adm={hr.admission_headroom_requests} "
            f"free={hr.kv_free_blocks} head={hr.prompt_blocks} worst={hr.worst_case_blocks_profile} "
            f"seqs={e.max_num_seqs} budget={e.budget} cases=[{cases}]")


def step_text(tr: es.Truthful, i: int) -> str:
    a = tr.aligned[i]
    s = a.step
    if s is None:
        return "-"
    return (f"frame r/w={es.frame_gauges(tr.frames[i][1])} k={s.k} sr/sw={s['sr']}/{s['sw']} r0={s['r0']} "
            f"w0={s['w0']} r={s['r']} free0={s['free0']} left={s['left']} hb={s['hb']} "
            f"need={tr.head_need.get(s.k)} adm={len(s.adm)} pre={len(s.pre)} lag={a.lag} m={int(a.matched)}")


def agrees(lab: es.Label, mode: str, e: EngineReport) -> bool:
    verdict = str(e.verdict)
    return verdict in lab.accepts(mode) or (mode == "one-shot-noflags" and verdict == "undecided"
                                            and es.named_case(lab, e.decided_by))


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.score_misses", description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="substrings of release/scenario to keep")
    ap.add_argument("--mode", action="append", choices=es.MODES)
    ap.add_argument("--all", action="store_true", help="list agreeing frames too")
    args = ap.parse_args()
    modes = args.mode or list(es.MODES)
    folders = [f for f in es.recordings(ROOT) if not_scored_reason(f) is None]
    if args.names:
        folders = [f for f in folders if any(n in f"{f.parent.name}/{f.name}" for n in args.names)]
    groups: Counter[tuple[str, str, str, str]] = Counter()
    for folder in folders:
        tr = es.load(folder)
        argv = [str(a) for a in tr.meta["server_argv"]]
        th = Thresholds(false_full_hold=es._hold_s(tr.meta))
        settings = Settings("recorded", vllm_args=argv, discover_cmdline=False, thresholds=th)
        bare = Settings("recorded", vllm_args=None, discover_cmdline=False, thresholds=th)
        sidecar = fixtures.as_recorded(Target(settings), tr.meta)
        print(f"== {tr.name} ({len(tr.frames)} frames, pool {tr.pool})")
        for i, (t, text) in enumerate(tr.frames):
            lab = es.judge(tr, i)
            reports = {"sidecar": sidecar.observe(t, text).engines}
            for mode, st in (("one-shot", settings), ("one-shot-noflags", bare)):
                reports[mode] = fixtures.as_recorded(one_shot(st), tr.meta).observe(t, text, gauges_only=True).engines
            for m in modes:
                if not reports[m]:
                    continue
                ours = reports[m][0]
                ok = agrees(lab, m, ours)
                if ok and not args.all:
                    continue
                if not ok:
                    groups[(m, tr.name, lab.label, str(ours.verdict))] += 1
                also = "+" + ",".join(sorted(lab.also)) if lab.also else ""
                print(f"  {i:4d} t={t:6.1f} {m:16s} {'ok  ' if ok else 'MISS'} engine={lab.label}{also}"
                      f"{' storm' if lab.storm else ''} ({lab.why}) | {step_text(tr, i)} | ours {describe(ours)}")
    print("\nmisses by mode, recording, engine reason, ours:")
    for (m, name, lab_name, verdict), n in sorted(groups.items()):
        print(f"  {m:16s} {name:28s} {lab_name:12s} -> {verdict:12s} {n}")


if __name__ == "__main__":
    main()
