"""Recorded vLLM timelines served as if they were vLLM (`recording`), and the demo built on them (`demo`)."""
