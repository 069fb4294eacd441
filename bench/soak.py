"""Soak (issue 21): one sidecar, 100 targets of which a third are hostile in rotating ways, sampled every 30 s.

The fleet is `python -m tests.hostile` (real loopback servers: drips, stalls, resets, endless and 15 MiB bodies,
absurd values, flapping; each hostile target moves to the next mode every `ROTATE` seconds, shifted per target
so every mode is live at once). The sidecar runs `serve --targets-file` at the default 5 s interval and the
default 3 s scrape timeout. Every 30 s: RSS, open files, /healthz, and how many healthy targets are up in our
/metrics. At the end: every healthy target's gaps between consecutive /metrics requests (seen by the target):
an interval was missed when a gap exceeds 1.5 intervals.

    python -m bench.soak              30 minutes (the issue's figure)
    SOAK_SECONDS=300 python -m bench.soak
    SOAK_TRACEMALLOC=1 python -m bench.soak   the sidecar under tracemalloc (bench/traced_serve.py): a heap
                                              snapshot every minute, the largest growths printed and saved
"""

from __future__ import annotations

import itertools
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from .common import free_port, loadavg, percentile, rss_mb, save, sidecar_argv, spawn, wait_http

INTERVAL = 5.0
SAMPLE = 30.0
ROTATE = 60.0
COUNT, HOSTILE = 100, 33
WARMUP_MIN = 5.0  # minutes: the RSS rise before it is flat (bench/NOTES.md, "Soak"), measured with SOAK_TRACEMALLOC=1


def main() -> None:
    seconds = float(os.environ.get("SOAK_SECONDS", "1800"))
    traced = os.environ.get("SOAK_TRACEMALLOC") == "1"
    load_before = loadavg()
    with tempfile.TemporaryDirectory() as tmp:
        urls, sport, port = Path(tmp) / "targets", free_port(), free_port()
        snaps = Path(tmp) / "snapshots"
        fleet = [sys.executable, "-m", "tests.hostile", "--count", str(COUNT), "--hostile", str(HOSTILE),
                 "--rotate", str(ROTATE), "--urls-file", str(urls), "--stats-port", str(sport)]
        with spawn(fleet):
            deadline = time.monotonic() + 60.0
            while not urls.exists():
                assert time.monotonic() < deadline, "the hostile fleet did not start"
                time.sleep(0.1)
            healthy_urls = urls.read_text().split()[HOSTILE:]
            argv = sidecar_argv(None, port, "5s", targets_file=urls)
            if traced:
                argv = [sys.executable, "-m", "bench.traced_serve", str(snaps), str(SAMPLE * 2), *argv[3:]]
            with spawn(argv) as sc, httpx.Client() as client:
                base = f"http://127.0.0.1:{port}"
                wait_http(base + "/healthz", timeout=60.0)
                time.sleep(2 * INTERVAL)  # the first scrape of every target
                client.get(f"http://127.0.0.1:{sport}/stats/reset", timeout=30.0)
                t0 = time.monotonic()
                samples: list[dict[str, Any]] = []
                while (now := time.monotonic() - t0) <= seconds:
                    started = time.perf_counter()
                    health = client.get(base + "/healthz", timeout=60.0 if traced else 10.0).status_code
                    health_ms = 1000 * (time.perf_counter() - started)
                    text = client.get(base + "/metrics", timeout=120.0 if traced else 30.0).text
                    up = {ln.split('target="', 1)[1].split('"', 1)[0]: ln.endswith(" 1.0")
                          for ln in text.splitlines() if ln.startswith("vllm_headroom_up{")}
                    samples.append({"t": round(now), "rss_mb": round(rss_mb(sc.pid), 1),
                                    "fds": len(os.listdir(f"/proc/{sc.pid}/fd")), "healthz": health,
                                    "healthz_ms": round(health_ms, 1),
                                    "healthy_up": sum(up.get(u, False) for u in healthy_urls),
                                    "hostile_up": sum(v for u, v in up.items() if u not in healthy_urls)})
                    print(samples[-1], flush=True)
                    time.sleep(max(0.0, SAMPLE - (time.monotonic() - t0 - now)))
                stats = client.get(f"http://127.0.0.1:{sport}/stats", timeout=60.0).json()
                alive = sc.poll() is None
            heap = _heap_growth(snaps) if traced else None
    gaps: list[float] = []
    missed = 0
    for t in stats["targets"][HOSTILE:]:
        at = t["metrics_at"]
        g = [b - a for a, b in itertools.pairwise(at)]
        gaps += g
        missed += sum(x > 1.5 * INTERVAL for x in g)
    rss = [s["rss_mb"] for s in samples]
    fds = [s["fds"] for s in samples]
    first = samples[1] if len(samples) > 2 else samples[0]  # after one sample of warm-up
    result = {
        "seconds": seconds, "interval_s": INTERVAL, "targets": COUNT, "hostile": HOSTILE, "rotate_s": ROTATE,
        "sidecar_alive": alive, "samples": samples,
        "rss_mb_first": first["rss_mb"], "rss_mb_max": max(rss), "rss_mb_last": rss[-1],
        "rss_change": rss[-1] / first["rss_mb"] - 1, "fds_first": first["fds"], "fds_max": max(fds),
        "fds_last": fds[-1], "fds_change": fds[-1] / first["fds"] - 1,
        **curve_fields(samples, seconds),
        "healthy_gaps": len(gaps), "healthy_missed_intervals": missed,
        "healthy_gap_median_s": percentile(gaps, 0.5), "healthy_gap_max_s": max(gaps) if gaps else None,
        "healthy_up_min": min(s["healthy_up"] for s in samples),
        "healthz_ms_max": max(s["healthz_ms"] for s in samples),
        "load_before": load_before, "load_after": loadavg(),
    }
    if heap is not None:
        result["tracemalloc"] = heap
    save("soak_traced" if traced else "soak", result)
    print({k: v for k, v in result.items() if k != "samples"})


def curve_fields(samples: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    """The RSS curve at 0, 5, 10, 20 and 30 minutes, the change after the warm-up (from the 5-minute sample to
    the last), and the floor of open files in the first and the last five minutes: the count of one sample swings
    with the hostile modes live at that moment (dripping connections held open), its floor does not."""
    def at(minute: float) -> dict[str, Any]:  # the sample nearest to `minute`
        return min(samples, key=lambda s: abs(s["t"] - 60 * minute))

    curve = {f"{m:g}": {"t": at(m)["t"], "rss_mb": at(m)["rss_mb"], "fds": at(m)["fds"]}
             for m in (0, 5, 10, 20, 30) if 60 * m <= seconds + SAMPLE / 2}
    warm = at(WARMUP_MIN) if seconds >= 2 * 60 * WARMUP_MIN else samples[0]
    last_t = samples[-1]["t"]
    return {"rss_curve": curve, "warmup_min": WARMUP_MIN, "rss_mb_warm": warm["rss_mb"],
            "rss_change_after_warmup": samples[-1]["rss_mb"] / warm["rss_mb"] - 1,
            "rss_mb_max_after_warmup": max(s["rss_mb"] for s in samples if s["t"] >= warm["t"]),
            "fds_floor_first_5min": min(s["fds"] for s in samples if s["t"] <= 300),
            "fds_floor_last_5min": min(s["fds"] for s in samples if s["t"] >= last_t - 300)}


def _heap_growth(snaps: Path, top: int = 15) -> dict[str, Any]:
    """The traced heap per snapshot (MB) and the sites that grew most from the second snapshot to the last."""
    import tracemalloc
    files = sorted(snaps.glob("*.snap"))
    if len(files) < 3:
        return {"snapshots": len(files)}
    loaded = []
    for f in files:
        try:
            loaded.append(tracemalloc.Snapshot.load(str(f)))
        except Exception:  # the last one may be cut short when the sidecar stops
            break
    sizes = [round(sum(s.size for s in snap.statistics("filename")) / 1e6, 2) for snap in loaded]
    diff = loaded[-1].compare_to(loaded[1], "traceback")
    grew = []
    for d in diff[:top]:
        frames = [f"{f.filename.split('site-packages/')[-1].split('h4-iso/')[-1]}:{f.lineno}"
                  for f in d.traceback[-6:]]
        grew.append({"kb": round(d.size_diff / 1e3, 1), "count": d.count_diff, "where": frames})
        print(f"{d.size_diff / 1e3:+9.1f} KB {d.count_diff:+6d}  " + " < ".join(reversed(frames)))
    print("traced heap per snapshot (MB):", sizes)
    return {"snapshots": len(files), "heap_mb": sizes, "grew": grew}


if __name__ == "__main__":
    main()
