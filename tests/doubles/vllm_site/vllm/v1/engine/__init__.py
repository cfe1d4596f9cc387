"""The V1 engine: ``async_llm.AsyncLLM`` and its exceptions."""
