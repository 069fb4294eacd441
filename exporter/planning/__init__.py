"""Offline capacity planning: `estimate` (a model's config → vLLM's KV pool and fit) and `recommend`
(max_model_len and max_num_seqs from a server's observed traffic)."""
