"""The sidecar pipeline: scrape → exposition (parse) → vllm (read) → config (resolve) → profile → derive →
verdict. `target.Target` runs it for one vLLM server and keeps the history verdicts need; `oneshot` runs it
once for a URL or a saved file. Derivations are pure functions; only `scrape` and `target` do I/O.
"""
