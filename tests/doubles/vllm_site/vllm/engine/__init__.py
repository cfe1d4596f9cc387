"""Engine configuration (``vllm.engine.arg_utils``)."""
