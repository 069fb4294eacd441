"""One event loop on its own thread, for the load drivers (load.Load, workload.Driver): start, wait, cancel."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Self


class Background:
    """Runs `self._main()` on a fresh event loop in a daemon thread named `thread_name`."""

    thread_name = "e2e-background"

    def __init__(self) -> None:
        self.started_at = 0.0
        self.finished_at: float | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None

    async def _main(self) -> None:
        raise NotImplementedError

    def start(self) -> Self:
        ready = threading.Event()
        self.started_at = time.monotonic()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            try:
                self._task = self._loop.create_task(self._main())
                ready.set()
                self._loop.run_until_complete(self._task)
            except asyncio.CancelledError:
                pass
            finally:
                self.finished_at = time.monotonic()
                self._loop.close()

        self._thread = threading.Thread(target=run, name=self.thread_name, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def wait(self, timeout: float) -> bool:
        """True if `_main` finished (successfully or not) within `timeout` seconds."""
        assert self._thread is not None
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def cancel(self) -> None:
        """Cancel `_main` (closing its connections makes vLLM abort the requests in flight) and wait for it."""
        if self._loop is not None and self._task is not None and not self._task.done():
            self._loop.call_soon_threadsafe(self._task.cancel)
        if self._thread is not None:
            self._thread.join(30)

    @property
    def done(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()
