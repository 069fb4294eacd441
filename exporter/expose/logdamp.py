"""What the sidecar's log says about one target's scrapes: a line when a state starts, and for a target that
flaps one line when the flapping starts and one when it ends, with counts (issue 21: a target failing every
other scrape logged two lines per scrape).

A state is "up" or the reason a scrape failed (`connect`, `timeout`, ...): a failure whose message changes but
whose reason does not (bytes that arrived, a port) is one state. Flapping is `FLAP_CHANGES` state changes within
the last `FLAP_SCRAPES` scrapes (the way Nagios and Icinga damp flapping hosts); it ends after `FLAP_SCRAPES`
scrapes in one state. Pure: `observe` returns the lines to log, the caller logs them.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

FLAP_SCRAPES = 10  # the window flapping is judged over, and how long a state must hold to end it
FLAP_CHANGES = 4  # state changes within the window that make a target flapping

UP = "up"


@dataclass(frozen=True)
class Line:
    level: int  # logging.WARNING, logging.INFO
    text: str


class Damper:
    """The log of one target; feed it each scrape's outcome with `observe`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.state: str | None = None  # None before the first scrape
        self._changes: deque[bool] = deque(maxlen=FLAP_SCRAPES)  # per scrape: did the state change
        self.flapping = False
        self._steady = 0  # scrapes in the current state
        self._failed = 0  # while flapping: failed scrapes and recoveries
        self._recovered = 0
        self._reasons: set[str] = set()

    def observe(self, reason: str | None, error: str | None) -> list[Line]:
        """The lines to log for a scrape that failed with `reason` and message `error`, or succeeded (None)."""
        state = UP if reason is None else reason
        changed = self.state is not None and state != self.state
        first = self.state is None
        self._changes.append(changed)
        self._steady = 1 if changed or first else self._steady + 1
        before = self.state
        self.state = state
        if self.flapping:
            if state != UP:
                self._failed += 1
                self._reasons.add(state)
            elif changed:
                self._recovered += 1
            if self._steady < FLAP_SCRAPES:
                return []
            self.flapping = False
            self._changes.clear()
            now = "up" if state == UP else f"down ({state}): {error}"
            return [Line(logging.INFO if state == UP else logging.WARNING,
                         f"{self.name}: stopped flapping, {now}; while it flapped {self._failed} scrapes failed "
                         f"({', '.join(sorted(self._reasons)) or 'none'}) and it recovered {self._recovered} times")]
        lines: list[Line] = []
        if state != UP and (first or changed):
            lines.append(Line(logging.WARNING, error or f"{self.name}: scrape failed ({state})"))
        elif state == UP and changed and before is not None:
            lines.append(Line(logging.INFO, f"{self.name}: scraping again"))
        if sum(self._changes) >= FLAP_CHANGES:
            self.flapping = True
            self._failed, self._recovered = (1, 0) if state != UP else (0, 1)
            self._reasons = {state} if state != UP else set()
            lines.append(Line(logging.WARNING,
                              f"{self.name}: flapping ({sum(self._changes)} changes between up and down in the last "
                              f"{len(self._changes)} scrapes); one line when it settles, with counts"))
        return lines


class Repeats(logging.Filter):
    """A logging filter for lines any client can cause (uvicorn's "Invalid HTTP request received."): each distinct
    message passes once per `period` seconds; the next one to pass after the period says how many were left out
    ("... (and 1,999 more like it in the last 60 s)"). Time from `clock` (monotonic seconds)."""

    def __init__(self, period: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.period = period
        self.clock = clock
        self._seen: dict[str, tuple[float, int]] = {}  # message: (when it last passed, left out since)

    def filter(self, record: logging.LogRecord) -> bool:
        key = str(record.msg)
        now = self.clock()
        last = self._seen.get(key)
        if last is not None and now - last[0] < self.period:
            self._seen[key] = (last[0], last[1] + 1)
            return False
        if len(self._seen) >= REPEATS_KEPT and key not in self._seen:
            self._seen.clear()  # bounded: any client chooses the messages' variety too
        if last is not None and last[1]:
            record.msg = f"{record.getMessage()} (and {last[1]:,} more like it in the last {now - last[0]:.0f} s)"
            record.args = ()
        self._seen[key] = (now, 0)
        return True


REPEATS_KEPT = 256  # distinct messages `Repeats` keeps counts for
