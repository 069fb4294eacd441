"""`vllm-headroom demo`: replay a recorded real false-full incident through a real sidecar, live.

The recorded vLLM expositions are served by a local replay server; the sidecar scrapes it over HTTP on the
recording's own clock, and the terminal shows what the usual panel says next to what the sidecar says.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
from typing import TextIO

import httpx
import uvicorn

from ..core import defaults
from ..expose import diagnosis
from ..expose.server import Sidecar, make_app
from ..pipeline.config import split_args
from ..pipeline.target import Settings, Target
from ..pipeline.verdict import Thresholds
from . import recording as replay

# The recorded incident is short; a 10 s hold lets the false-full flag rise within it.
DEMO_FALSE_FULL_HOLD = defaults.DEMO_FALSE_FULL_HOLD
HEADER = f"{'t':>6}  {'panel':>5}  {'effective':>9}  {'running':>7}  {'waiting':>7}  {'free':>4}  " \
         f"{'W':>3}  {'headroom':>8}  {'verdict':<12}  false_full"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _row(t: float, target: Target) -> str:
    r = target.last
    if not r.up or not r.engines:
        return f"{t:5.1f}s  target down: {r.error}"
    e = r.engines[0]
    h = e.headroom
    slots = f"{e.running}/{e.max_num_seqs}" if e.max_num_seqs else str(e.running)
    return (f"{t:5.1f}s  {100 * h.panel_usage_ratio:4.0f}%  {100 * h.effective_usage_ratio:8.0f}%  {slots:>7}  "
            f"{e.waiting:>7}  {h.kv_free_blocks:>4}  {h.worst_case_blocks_profile:>3}  "
            f"{h.admission_headroom_requests:>8}  {e.verdict!s:<12}  {'YES' if e.false_full else 'no'}")


async def _started(server: uvicorn.Server) -> None:
    for _ in range(200):
        if server.started:
            return
        await asyncio.sleep(0.05)
    raise RuntimeError("the replay server did not start")


async def run(once: bool, as_json: bool, speed: float, host: str, listen_port: int,
              out: TextIO = sys.stdout) -> int:
    """Replay the embedded incident through a real sidecar; with `once` print the diagnosis and return."""
    rec = replay.embedded_incident()
    player = replay.Player(rec)
    port = _free_port()
    replay_server = uvicorn.Server(uvicorn.Config(replay.make_app(player), host="127.0.0.1", port=port,
                                                  log_level="error", lifespan="off"))
    replay_task = asyncio.create_task(replay_server.serve())
    await _started(replay_server)
    meta = rec.meta
    settings = Settings(
        url=f"http://127.0.0.1:{port}",
        # In a pod the sidecar reads vLLM's flags from /proc; the recording kept them for us.
        vllm_args=split_args(" ".join(meta["server_argv"])) if meta.get("server_argv") else None,
        discover_cmdline=False,
        thresholds=Thresholds(false_full_hold=DEMO_FALSE_FULL_HOLD),
    )
    target = Target(settings)
    start = rec.frames[0][0]
    steps = [t - start for t, _ in rec.frames]
    interval = float(meta.get("interval", 1.0))
    sidecar = Sidecar([target], interval)
    load = meta.get("load")
    what = load.get("description", "") if isinstance(load, dict) else str(load or "")
    print(f"Replaying a recorded real vLLM {meta.get('vllm_version', '')} incident ({meta.get('scenario')}).",
          file=out)
    print(f"Load: {what}", file=out)
    print(f"Flags: {' '.join(str(a) for a in meta.get('server_argv', [])[-12:])}", file=out)
    print(f"The usual panel shows 'panel'; the sidecar adds the rest (false-full hold {DEMO_FALSE_FULL_HOLD:g} s "
          "for the demo).\n", file=out)
    print(HEADER, file=out)
    async with httpx.AsyncClient() as client:
        for i, t in enumerate(steps):
            player.index = i
            await sidecar.tick(client, now=t)
            print(_row(t, target), file=out, flush=True)
            if not once and i + 1 < len(steps):
                await asyncio.sleep((steps[i + 1] - t) / speed)
    print("", file=out)
    reports = [target.last]
    if as_json:
        print(json.dumps(diagnosis.document(reports), indent=2), file=out)
    else:
        print("Final diagnosis:", file=out)
        print(diagnosis.render_text(reports), file=out)
    if once:
        replay_server.should_exit = True
        await replay_task
        return 0
    print(f"\nThe sidecar stays up on the last recorded state: http://{host}:{listen_port}/metrics and "
          f"http://{host}:{listen_port}/api/v1/diagnosis (Ctrl-C to stop).", file=out, flush=True)
    # Serve the final state as it is: scraping the frozen last frame on a wall clock would soon call the
    # engine stuck, which is true of a replay and not of the incident.
    app = make_app(sidecar, start_loop=False)
    api = uvicorn.Server(uvicorn.Config(app, host=host, port=listen_port, log_level="warning",
                                        lifespan="on"))
    try:
        await api.serve()
    finally:
        replay_server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await replay_task
    return 0


def main(once: bool, as_json: bool, speed: float, host: str, port: int) -> int:
    """`vllm-headroom demo`: run the replay on the terminal; Ctrl-C ends it."""
    try:
        return asyncio.run(run(once, as_json, speed, host, port))
    except KeyboardInterrupt:
        return 0
