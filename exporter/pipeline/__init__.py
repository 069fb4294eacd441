"""The sidecar pipeline: scrape (HTTP) → exposition (parse) → the engine's reader (exporter.engines) → config
(resolve) → profile → derive → judge (verdict.py, one engine and scrape) → report (what presenters read).
`target.Target` runs it for one server and keeps each engine's history; `oneshot` runs it once for a URL or a
saved file. `catalogue` holds every verdict and what is said and drawn about it. Derivations and the judgement
are pure; only `scrape` and `target` do I/O.
"""
