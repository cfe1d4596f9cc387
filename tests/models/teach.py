"""Teach the tiny model fixed replies (a few hundred Adam steps on the CPU), so greedy decoding says them.

Tests of tool calls need a model that really writes a ``<tool_call>`` block;
a random tiny model never does. Fine-tuning a copy to memorise the replies
gives one: the engine, the server and the parser then run unchanged.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import torch


def teach_replies(model_dir: Path, target: Path, chats: Sequence[tuple[list[dict], str]],
                  *, tools: list[dict] | None = None, steps: int = 300, lr: float = 3e-3) -> Path:
    """Copy ``model_dir`` to ``target`` and train it until each chat's greedy reply is its text (then EOS).

    Raises AssertionError when a reply is not memorised after ``steps``.
    """
    from transformers import AutoTokenizer

    if (target / "config.json").is_file():
        return target
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompts = []
    for messages, reply in chats:
        text = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
        prompts.append((tokenizer(text, add_special_tokens=False)["input_ids"], reply))
    return teach_token_replies(model_dir, target, prompts, steps=steps, lr=lr)


def teach_token_replies(model_dir: Path, target: Path, prompts: Sequence[tuple[list[int], str]],
                        *, steps: int = 300, lr: float = 3e-3) -> Path:
    """As :func:`teach_replies`, for prompts given as the token ids the engine saw (e.g. from its history)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if (target / "config.json").is_file():
        return target
    staging = target.with_name(target.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(model_dir, staging)
    tokenizer = AutoTokenizer.from_pretrained(staging)
    model = AutoModelForCausalLM.from_pretrained(staging, dtype=torch.float32)
    rows = []
    for prompt, reply in prompts:
        answer = [*tokenizer(reply, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
        rows.append((list(prompt), answer))
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    torch.manual_seed(0)
    for _ in range(steps):
        loss = torch.zeros(())
        for prompt, answer in rows:
            ids = torch.tensor([prompt + answer])
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1]
            loss = loss + torch.nn.functional.cross_entropy(logits, torch.tensor(answer))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        for prompt, answer in rows:
            out = model.generate(input_ids=torch.tensor([prompt]), max_new_tokens=len(answer), do_sample=False,
                                 eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
            assert out[0, len(prompt):].tolist() == answer, "the tiny model did not memorise its reply"
    model.save_pretrained(staging)
    staging.rename(target)
    return target
