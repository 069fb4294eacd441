"""A model's shape (from config.json) and vLLM's KV layout for it; used by the sidecar and the planner."""
