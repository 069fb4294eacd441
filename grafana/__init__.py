"""Monitoring bundle of vllm-headroom: Grafana dashboards, Prometheus rules and their generator.

`python -m grafana.generate` writes grafana/dashboards/*.json, deploy/prometheus/*.yaml, the promtool tests and
the Kubernetes PrometheusRule from the Python sources in this package (one source of truth).
"""
