"""NVIDIA CUDA device backend for trinity-rft.

The backend is published under the ``trinity.backends`` entry point ``cuda``
(:mod:`trinity_backend_cuda.plugin`). Importing this package, its plugin, its
backend info or running its probe never imports torch, triton or any CUDA
library, and never creates a CUDA context: the probe asks the driver through
NVML (``pynvml``), which creates none.
"""

__version__ = "0.3.0"

__all__ = ["__version__"]
