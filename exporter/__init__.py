"""vllm-headroom: why vLLM requests wait, and how much room there really is."""

__version__ = "0.1.0"
