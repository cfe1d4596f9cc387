"""vLLM's V1 engine (the only one the double models)."""
