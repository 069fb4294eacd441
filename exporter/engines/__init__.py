"""Serving engines: what each one exports, how it admits requests and how it is configured.

`base` is the engine-neutral interface (the `Engine` protocol and the shapes its readers return) that the
pipeline, planning and the monitoring generator use; each engine is a sub-package behind it (`vllm/` today;
where SGLang's would go: ARCHITECTURE.md). Nothing outside an engine's sub-package names its metrics, flags or
release rules.
"""
