"""Loading Hugging Face models and tokenizers by path, with one clear error when the path is not a usable model."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from trinity.errors import BadInputError

T = TypeVar("T")

#: Files whose presence makes a local folder a Hugging Face model or tokenizer folder.
MODEL_MARKERS = ("config.json", "tokenizer_config.json", "tokenizer.json")


class ModelPathError(BadInputError):
    """A model path does not exist, is not a model folder, or holds files transformers cannot load."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0].rstrip(".") if text else type(exc).__name__


def check_model_folder(path: str, where: str) -> None:
    """Raise ModelPathError when ``path`` names a local file or folder that cannot hold a model.

    A path that does not exist locally passes when it could be a hub id
    (``owner/name``, nothing more); an absolute, home-relative or dotted
    path that does not exist is a mistake.
    """
    folder = Path(path).expanduser()
    if folder.is_dir():
        if not any((folder / name).is_file() for name in MODEL_MARKERS):
            raise ModelPathError(f"{where}: {path} is a folder but not a Hugging Face model (no config.json); "
                                 "point it at a model folder")
        return
    if folder.exists():
        raise ModelPathError(f"{where}: {path} is a file, not a Hugging Face model folder")
    hub_like = not path.startswith(("/", "~", ".")) and path.count("/") <= 1
    if not hub_like:
        raise ModelPathError(f"{where}: {path} does not exist; point it at a Hugging Face model folder")


def load_pretrained(load: Callable[..., T], path: str, *, where: str = "model.model_path", **kwargs: Any) -> T:
    """Return ``load(path, **kwargs)`` (a transformers ``from_pretrained``); raise ModelPathError when it fails.

    The error names ``where`` (the setting the path came from), the path and
    transformers' reason, and says what to do. Errors that are not about the
    files (such as out of memory) pass through unchanged.
    """
    check_model_folder(path, where)
    try:
        return load(path, **kwargs)
    except (OSError, ValueError) as exc:
        owner = getattr(load, "__self__", None)
        what = owner.__name__ if isinstance(owner, type) else "transformers"
        raise ModelPathError(
            f"{where}: {what} cannot load {path}: {_first_line(exc)}; point it at a complete Hugging Face model "
            "folder (config.json, weights, tokenizer files) or a model id the hub serves"
        ) from exc
