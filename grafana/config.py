"""Knobs of the bundle, in the spirit of a monitoring mixin's `_config`: selectors, thresholds, `for:` times.

Thresholds and windows shared with the sidecar come from `exporter.core.defaults` (the one source of defaults);
what only the rules need (alert hold times, start-up limit, preemption ratio) is set here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from exporter.core import defaults as D
from exporter.core.units import format_duration

# The one setting for where alerts and dashboards link to (Helm: prometheusRule.runbookBaseUrl).
RUNBOOK_URL = "https://github.com/vllm-headroom/vllm-headroom/blob/main/docs/runbook.md"

# Labels that identify one scraped vLLM API server; whichever are present are kept by every aggregation and join.
IDENTITY = ("cluster", "namespace", "job", "instance", "pod", "container")

# Every range window of the rules; at least 4 samples at a 60 s scrape interval (see README, supported intervals).
WINDOW = "5m"


@dataclass(frozen=True)
class Config:
    """Everything a site may want to change; the committed files use the defaults."""

    # Extra matchers for vLLM's own series, e.g. 'namespace="llm"' (empty: every vLLM series).
    vllm_selector: str = ""
    identity: tuple[str, ...] = IDENTITY
    # Same meaning as the sidecar's --verdict.full-usage and --profile.quantile / --profile.window.
    full_usage: float = D.FULL_USAGE
    profile_quantile: float = D.PROFILE_QUANTILE
    profile_window: str = format_duration(D.PROFILE_WINDOW)
    # Preemptions per finished request over the window above which the storm alert pages.
    preemption_ratio: float = 0.1
    # ...and only from this many preemptions within the window: at low traffic two preemptions in 5 minutes are a
    # large share of few requests, not a storm worth a critical page.
    storm_min_preemptions: int = 5
    # While a target's scrapes fail (its `up` 0, its series stale), the records keep their last value for up to this
    # long after its last good scrape, so missed scrapes do not empty the flags and restart pending alerts; a target
    # that vanishes (pod deleted: no `up` either) is dropped at once. 4m bridges several failed scrapes at 15-60 s.
    scrape_gap: str = "4m"
    # Evaluation interval of the static-configuration group (capacity, block size, max_model_len): they change only
    # when vLLM restarts, so they are not recomputed every evaluation. At most the lookback (5m) minus a scrape.
    config_interval: str = "2m"
    # Matchers for the sidecar's scrape job(s), so Prometheus' own `up == 0` of a sidecar that never came up pages.
    # The shipped PodMonitor/ServiceMonitor/Helm/recipes relabel it to job "vllm-headroom"; a monitor named
    # vllm-headroom without that relabeling gives prometheus-operator's "<namespace>/vllm-headroom".
    sidecar_selector: str = 'job=~"(.+/)?vllm-headroom"'
    # vLLM may load weights and compile this long after it stopped answering (pod start, container restart, any
    # reload) before we say anything; then a warning.
    startup_limit: str = "20m"
    # The sidecar cannot reach a vLLM that Prometheus still scrapes (not a reload): a warning after this long.
    target_down_after: str = "5m"
    # The sidecar has scraped vLLM with its engine metrics for the whole window (so not while it loads or reloads, and
    # not the --disable-log-stats case) while Prometheus holds no vLLM series of that vLLM (its monitor's port name
    # does not match vLLM's, scrapeVllm is off and nothing else scrapes it): a warning after this much longer.
    vllm_not_scraped_after: str = "10m"
    # `for:` of alerts by name; tests against a live Prometheus shorten them.
    for_: dict[str, str] = field(default_factory=dict)
    runbook_url: str = RUNBOOK_URL

    def sel(self, *extra: str) -> str:
        """A label matcher block for vLLM series: the site selector plus `extra` matchers."""
        parts = [p for p in (self.vllm_selector, *extra) if p]
        return "{" + ",".join(parts) + "}" if parts else ""

    def by(self, *extra: str) -> str:
        return ", ".join((*self.identity, *extra))

    def dedup(self, *extra: str) -> str:
        """Identity of a pod without the scrape job: one series per pod when two jobs scrape it."""
        return ", ".join((*(lbl for lbl in self.identity if lbl != "job"), *extra))


DEFAULT = Config()
