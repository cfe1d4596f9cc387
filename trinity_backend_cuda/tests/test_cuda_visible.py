"""CUDA_VISIBLE_DEVICES is read the way the CUDA runtime reads it."""

from __future__ import annotations

import pytest

from trinity_backend_cuda import visible

UUIDS = (
    "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6",
    "GPU-8932aaaa-0000-0000-0000-000000000001",
    "GPU-1234abcd-0000-0000-0000-000000000002",
    "GPU-ffff0000-0000-0000-0000-000000000003",
)


@pytest.mark.parametrize(
    ("value", "count", "ignored"),
    [
        (None, 4, ()),
        ("0", 1, ()),
        ("3", 1, ()),
        ("0,2", 2, ()),
        ("2,0", 2, ()),  # any order
        (" 1 , 2 ", 2, ()),  # blanks around entries are skipped
        ("1gpu", 1, ()),  # strtoul reads the leading digits
        ("+2", 1, ()),
        ("0,2,-1,1", 2, ("-1", "1")),  # the example of the CUDA documentation
        ("0,7,1", 1, ("7", "1")),  # out of range ends the list
        ("1,x,2", 1, ("x", "2")),
        ("0,1,2,3", 4, ()),
    ],
)
def test_integer_lists(value: str | None, count: int, ignored: tuple[str, ...]) -> None:
    devices = visible.resolve(value, physical_count=4)
    assert devices.count == count
    assert devices.ignored == ignored
    if ignored:
        assert "ignored" in devices.explanation and repr(ignored[0].strip()) in devices.explanation


@pytest.mark.parametrize("value", ["", "   "])
def test_empty_hides_every_gpu(value: str) -> None:
    devices = visible.resolve(value, physical_count=4)
    assert devices.count == 0
    assert "empty" in devices.explanation and "unset it" in devices.explanation


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("-1", "is negative"),
        ("4", "out of range"),
        ("none", "neither a GPU index"),
        ("GPU-0000", "matches the UUID of no GPU"),
    ],
)
def test_first_entry_invalid_leaves_nothing(value: str, why: str) -> None:
    devices = visible.resolve(value, physical_count=4, uuids=UUIDS)
    assert devices.count == 0
    assert why in devices.explanation
    assert "the driver has 4 GPU(s) (indices 0..3)" in devices.explanation


@pytest.mark.parametrize("value", ["0,0", "1,2,1", f"{UUIDS[2]},2"])
def test_naming_a_gpu_twice_hides_every_gpu(value: str) -> None:
    devices = visible.resolve(value, physical_count=4, uuids=UUIDS)
    assert devices.count == 0
    assert "twice" in devices.explanation


def test_uuids_full_prefix_and_mixed() -> None:
    assert visible.resolve(UUIDS[1], 4, UUIDS).count == 1
    assert visible.resolve("GPU-1234", 4, UUIDS).count == 1  # a unique prefix is enough
    assert visible.resolve(f"{UUIDS[3]},GPU-1234", 4, UUIDS).count == 2
    assert visible.resolve("GPU-1234,0", 4, UUIDS).count == 2  # indices and UUIDs may be mixed


def test_ambiguous_uuid_prefix_ends_the_list() -> None:
    devices = visible.resolve("GPU-8932", 4, UUIDS)  # matches GPUs 0 and 1
    assert devices.count == 0
    assert "matching 2 GPUs" in devices.explanation
    assert visible.resolve("3,GPU-8932", 4, UUIDS).count == 1


def test_uuid_entries_need_nvml_uuids() -> None:
    assert visible.needs_uuids("0, GPU-1234")
    assert not visible.needs_uuids("0,1")
    assert not visible.needs_uuids(None)
    # without UUIDs from NVML no UUID can match
    assert visible.resolve("GPU-1234", 4, ()).count == 0


def test_mig_ids_give_one_device() -> None:
    mig = "MIG-5c89ac6f-1111-2222-3333-444455556666"
    assert visible.resolve(mig, 4).count == 1
    two = visible.resolve(f"{mig},MIG-0000", 4)
    assert two.count == 1 and two.ignored == ("MIG-0000",)
    assert "single MIG instance" in two.explanation
    after_gpu = visible.resolve(f"0,{mig}", 4)
    assert after_gpu.count == 1 and after_gpu.ignored == (mig,)
