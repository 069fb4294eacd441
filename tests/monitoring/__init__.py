"""Tests of the monitoring bundle: generated files, rules under promtool, and every query on a real Prometheus."""
