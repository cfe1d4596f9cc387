"""trinity-rft: reinforcement fine-tuning for language models on any accelerator.

Importing this package is cheap on purpose: it loads neither torch nor any
device runtime. Device questions go through :mod:`trinity.device`.
"""

__version__ = "0.3.0"
