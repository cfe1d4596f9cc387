"""Write the small example data sets under ``examples/data/`` (deterministic; rerun after editing).

Words and numbers stay within what the tiny test model's tokenizer knows
(``trinity/common/models/tiny.py``: arithmetic, letters, common words), so the
records tokenize compactly. Layout (each folder is one data set, each ``path``-able):

* ``math/``: GSM8K-style task set, ``question`` / ``answer`` (``... #### 42``), splits ``train`` and ``test``;
* ``sft/messages/``: chat ``messages`` ending with the assistant's answer (some multi-turn);
* ``sft/tools/``: ``messages`` and ``tools`` stored as JSON strings (as upstream advises for ``datasets``);
* ``sft/plaintext/``: ``prompt`` / ``response``;
* ``dpo/plaintext/``: ``prompt`` / ``chosen`` / ``rejected``;
* ``dpo/messages/``: ``messages`` (the prompt) / ``chosen`` / ``rejected`` message lists;
* ``vlm/``: vision-language tasks, ``images`` (PNG data URLs: squares to count) / ``problem`` / ``answer``,
  splits ``train`` and ``test``.

Usage: ``python scripts/make_example_data.py [ROOT]`` (default ``examples/data``).
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

SYSTEM = "You are a helpful assistant. Give the answer."
OPS: dict[str, tuple[str, Callable[[int, int], int]]] = {
    "plus": ("+", lambda a, b: a + b),
    "minus": ("-", lambda a, b: a - b),
    "times": ("*", lambda a, b: a * b),
}


def _pairs(rng: random.Random, count: int) -> list[tuple[int, str, int]]:
    out = []
    for _ in range(count):
        op = rng.choice(sorted(OPS))
        a, b = rng.randint(2, 40), rng.randint(2, 12)
        if op == "minus" and b > a:
            a, b = b, a
        out.append((a, op, b))
    return out


def _result(a: int, op: str, b: int) -> int:
    return OPS[op][1](a, b)


def math_rows(rng: random.Random, count: int) -> list[dict[str, Any]]:
    """GSM8K-style rows: one or two steps, ``<<a+b=c>>`` calculator notes and a final ``#### c``."""
    rows = []
    for a, op, b in _pairs(rng, count):
        sign, first = OPS[op][0], _result(a, op, b)
        if rng.random() < 0.5:
            question = f"What is {a} {op} {b}?"
            answer = f"{a} {sign} {b} = <<{a}{sign}{b}={first}>>{first}.\n#### {first}"
        else:
            c = rng.randint(2, 9)
            total = first + c
            question = f"What is {a} {op} {b}, plus {c}?"
            answer = (f"{a} {sign} {b} = <<{a}{sign}{b}={first}>>{first}. "
                      f"{first} + {c} = <<{first}+{c}={total}>>{total}.\n#### {total}")
        rows.append({"question": question, "answer": answer})
    return rows


def _qa(a: int, op: str, b: int) -> tuple[str, str]:
    result = _result(a, op, b)
    return f"What is {a} {op} {b}?", f"{a} {OPS[op][0]} {b} = {result}. The answer is {result}."


def sft_messages(rng: random.Random) -> list[dict[str, Any]]:
    """Single-turn chats (some with a system prompt) and a few multi-turn ones, all ending with the assistant."""
    rows = []
    for i, (a, op, b) in enumerate(_pairs(rng, 16)):
        question, answer = _qa(a, op, b)
        messages = [{"role": "system", "content": SYSTEM}] if i % 3 == 0 else []
        messages += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        rows.append({"messages": messages})
    for i in range(6):
        letter = "abcdefghijklmnopqrstuvwxyz"[rng.randrange(26)]
        count = rng.randint(2, 5)
        (a, op, b), = _pairs(rng, 1)
        question, answer = _qa(a, op, b)
        turns = [
            {"role": "user", "content": f"Repeat the letter {letter} {count} times."},
            {"role": "assistant", "content": letter * count},
            {"role": "user", "content": question},
            {"role": "assistant", "content": answer},
        ]
        if i % 2:
            turns += [{"role": "user", "content": "Say yes or no: is it more than 20?"},
                      {"role": "assistant", "content": "yes" if _result(a, op, b) > 20 else "no"}]
        rows.append({"messages": turns})
    return rows


CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "a plus b, a minus b or a times b",
        "parameters": {
            "type": "object",
            "properties": {"op": {"type": "string"}, "a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["op", "a", "b"],
        },
    },
}


def sft_tools(rng: random.Random) -> list[dict[str, Any]]:
    """Chats where the assistant calls a calculator tool, reads its result and answers (JSON-string columns)."""
    rows = []
    for i, (a, op, b) in enumerate(_pairs(rng, 6)):
        result = _result(a, op, b)
        call = {"id": f"call_{i}", "type": "function",
                "function": {"name": "calculator", "arguments": json.dumps({"op": op, "a": a, "b": b})}}
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"What is {a} {op} {b}? Use the calculator."},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": json.dumps({"result": result})},
            {"role": "assistant", "content": f"The answer is {result}."},
        ]
        rows.append({"messages": json.dumps(messages), "tools": json.dumps([CALCULATOR])})
    return rows


def sft_plaintext(rng: random.Random) -> list[dict[str, Any]]:
    """``prompt`` / ``response`` pairs."""
    return [dict(zip(("prompt", "response"), _qa(a, op, b), strict=True)) for a, op, b in _pairs(rng, 12)]


def _wrong(a: int, op: str, b: int, rng: random.Random) -> str:
    wrong = _result(a, op, b) + rng.choice([-3, -2, -1, 1, 2, 3])
    return f"{a} {OPS[op][0]} {b} = {wrong}. The answer is {wrong}."


def dpo_plaintext(rng: random.Random) -> list[dict[str, Any]]:
    """Prompt, a right answer (chosen) and a wrong one (rejected)."""
    rows = []
    for a, op, b in _pairs(rng, 12):
        question, answer = _qa(a, op, b)
        rows.append({"prompt": question, "chosen": answer, "rejected": _wrong(a, op, b, rng)})
    return rows


def dpo_messages(rng: random.Random) -> list[dict[str, Any]]:
    """The prompt as messages, the chosen and rejected replies as message lists."""
    rows = []
    for a, op, b in _pairs(rng, 12):
        question, answer = _qa(a, op, b)
        rows.append({
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
            "chosen": [{"role": "assistant", "content": answer}],
            "rejected": [{"role": "assistant", "content": _wrong(a, op, b, rng)}],
        })
    return rows


def _squares_png(count: int, rng: random.Random) -> str:
    """A 84 x 56 PNG with ``count`` coloured squares on white, as a ``data:`` URL."""
    import base64
    import io

    from PIL import Image, ImageDraw

    image = Image.new("RGB", (84, 56), "white")
    draw = ImageDraw.Draw(image)
    for slot in rng.sample(range(6), count):
        x, y = 4 + (slot % 3) * 27, 4 + (slot // 3) * 26
        colour = tuple(rng.randint(0, 200) for _ in range(3))
        draw.rectangle((x, y, x + 20, y + 20), fill=colour)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def vlm_rows(rng: random.Random, count: int) -> list[dict[str, Any]]:
    """Count the squares: one image per task, the answer a number."""
    rows = []
    for _ in range(count):
        squares = rng.randint(1, 4)
        rows.append({"images": [_squares_png(squares, rng)], "problem": "<image>How many squares are there?",
                     "answer": str(squares)})
    return rows


def write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")


def main(root: Path) -> None:
    rng = random.Random(20240601)
    write(root / "math" / "train.jsonl", math_rows(rng, 32))
    write(root / "math" / "test.jsonl", math_rows(rng, 8))
    write(root / "sft" / "messages" / "train.jsonl", sft_messages(rng))
    write(root / "sft" / "tools" / "train.jsonl", sft_tools(rng))
    write(root / "sft" / "plaintext" / "train.jsonl", sft_plaintext(rng))
    write(root / "dpo" / "plaintext" / "train.jsonl", dpo_plaintext(rng))
    write(root / "dpo" / "messages" / "train.jsonl", dpo_messages(rng))
    write(root / "vlm" / "train.jsonl", vlm_rows(rng, 16))
    write(root / "vlm" / "test.jsonl", vlm_rows(rng, 4))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("examples/data"))
