"""vllm-headroom: why vLLM requests wait, and how much room there really is.

The flow, one way (see ARCHITECTURE.md):

    core      units (size, duration, token grammars) and defaults: the one source of every default
    model     a model's shape and vLLM's KV layout (bytes per token, per block, per request)
    pipeline  scrape → parse → read vLLM → resolve config → profile → derive → verdict (target.py ties it)
    planning  offline capacity planning: estimate (config.json → pool) and recommend (observed traffic)
    expose    presenters of pipeline reports: JSON/text diagnosis, Prometheus collector, HTTP server
    replay    recorded vLLM timelines served as if live, and the demo built on them
    cli       parses arguments, builds settings, calls one wing, prints
"""

__version__ = "0.1.0"
