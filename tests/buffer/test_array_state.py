"""Experiences and completions pickle their tensors as numpy arrays, exactly, through pickle and through Ray."""

from __future__ import annotations

import copy
import pickle
import warnings
from typing import Any

import numpy as np
import pytest
import ray
import torch

from trinity.common.array_state import _TENSOR, arrays_to_tensors, tensors_to_arrays
from trinity.common.experience import Experience
from trinity.common.models.engine import Completion


def full_experience() -> Experience:
    return Experience(
        tokens=[3, 1, 4, 1, 5, 9], prompt_length=2, logprobs=[-0.1, -0.2, -0.3, -0.4], action_mask=[1, 0, 1, 1],
        reward=0.25, group_id="g", run_id=2, model_version=7, advantages=[0.5, 0.5, -1.0, 2.0],
        returns=[1.0, 2.0, 3.0, 4.0], rejected_tokens=[3, 1, 2], info={"turns": 2, "text": "x"},
        teacher_logprobs=[-1.0, -1.5, -2.0, -2.5], is_expert=True,
    )


def assert_same(a: Any, b: Any) -> None:
    assert a.__dict__.keys() == b.__dict__.keys()
    for name, value in a.__dict__.items():
        other = getattr(b, name)
        if isinstance(value, torch.Tensor):
            assert isinstance(other, torch.Tensor), name
            assert other.dtype == value.dtype and torch.equal(other, value), name
        else:
            assert other == value, name


def test_pickled_experience_carries_arrays_and_comes_back_exact() -> None:
    exp = full_experience()
    state = exp.__getstate__()
    assert state["tokens"][0] == _TENSOR and isinstance(state["tokens"][1], np.ndarray)
    assert state["action_mask"][1].dtype == np.bool_
    again = pickle.loads(pickle.dumps(exp, protocol=5))
    assert_same(exp, again)
    again.tokens[0] = 99  # the copy owns its memory
    assert exp.tokens[0] == 3
    assert_same(exp, copy.deepcopy(exp))


def test_tensors_numpy_cannot_hold_stay_tensors() -> None:
    state = {"bf16": torch.ones(3, dtype=torch.bfloat16), "grad": torch.ones(2, requires_grad=True),
             "array": np.arange(3), "pair": ("a", 1)}
    wire = tensors_to_arrays(state)
    assert wire["bf16"] is state["bf16"] and wire["grad"] is state["grad"]
    back = arrays_to_tensors(wire)
    assert isinstance(back["array"], np.ndarray) and back["pair"] == ("a", 1)  # genuine arrays stay arrays


def test_read_only_arrays_are_copied_not_shared() -> None:
    array = np.arange(4)
    array.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns when it wraps a read-only array
        tensor = arrays_to_tensors({"t": (_TENSOR, array)})["t"]
    tensor[0] = 5
    assert array[0] == 0


@pytest.mark.usefixtures("ray_cluster")
def test_through_a_ray_actor() -> None:
    @ray.remote(num_cpus=0)
    def echo(items: list[Any]) -> list[Any]:
        return items

    completion = Completion(prompt_tokens=torch.tensor([1, 2]), response_tokens=torch.tensor([3]),
                            logprobs=torch.tensor([-0.5]), text="c", finish_reason="stop", model_version=4)
    exp = full_experience()
    got_exp, got_completion = ray.get(echo.remote([exp, completion]))
    assert_same(exp, got_exp)
    assert_same(completion, got_completion)
    got_exp.logprobs[0] = 0.0  # writable, as the trainer expects
