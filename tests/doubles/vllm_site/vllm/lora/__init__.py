"""LoRA adapters served beside the base weights (``vllm.lora.request.LoRARequest``)."""
