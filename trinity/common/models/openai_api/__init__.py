"""OpenAI-compatible serving from the rollout engines: the server, its request history, tool-call parsers."""
