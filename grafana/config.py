"""Knobs of the bundle, in the spirit of a monitoring mixin's `_config`: selectors, thresholds, `for:` times."""

from __future__ import annotations

from dataclasses import dataclass, field

RUNBOOK_URL = "https://github.com/vllm-headroom/vllm-headroom/blob/main/docs/runbook.md"


@dataclass(frozen=True)
class Config:
    """Everything a site may want to change; the committed files use the defaults."""

    # Extra matchers for vLLM's own series, e.g. 'job="vllm"' (empty: every vllm:* series).
    vllm_selector: str = ""
    # `up` series of the Prometheus jobs that scrape vLLM itself (for the absent-data alert).
    vllm_up_selector: str = 'job=~"vllm|vllm-.*",job!~".*headroom.*"'
    # `up` series of the jobs that scrape the vllm-headroom sidecar.
    sidecar_up_selector: str = 'job=~".*headroom.*"'
    # Labels that identify one vLLM API server (pod); missing ones are simply absent from the results.
    pod_labels: tuple[str, ...] = ("cluster", "namespace", "job", "instance", "pod")
    # Same meaning as the sidecar's --verdict.full-usage and --profile.quantile.
    full_usage: float = 0.8
    profile_quantile: float = 0.99
    profile_window: str = "5m"
    preemption_storm_per_second: float = 0.2
    # `for:` of every alert; tests against a live Prometheus shorten them.
    for_: dict[str, str] = field(default_factory=dict)
    runbook_url: str = RUNBOOK_URL

    def sel(self, *extra: str) -> str:
        """A label matcher block for vLLM series: the site selector plus `extra` matchers."""
        parts = [p for p in (self.vllm_selector, *extra) if p]
        return "{" + ",".join(parts) + "}" if parts else ""

    def by(self, *extra: str) -> str:
        return ", ".join((*self.pod_labels, *extra))


DEFAULT = Config()
