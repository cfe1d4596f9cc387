"""``trinity backends show`` and ``trinity backends check``."""

from __future__ import annotations

from pathlib import Path

from tests.cli._runner import ROW_FIELDS, Runner
from tests.fakedist import add_backend, write_distribution
from trinity.device.spec import HOOKS_ADDED_IN, SINGLE_ANSWER_HOOKS, SPEC_VERSION


def test_show_cpu(trinity: Runner) -> None:
    result = trinity("backends", "show", "cpu")
    assert result.returncode == 0, result.stderr
    fields = dict(line.split(":", 1) for line in result.stdout.splitlines() if not line.startswith(" "))
    fields = {key: value.strip() for key, value in fields.items()}
    assert fields["package"].startswith("trinity-rft ")
    assert (fields["status"], fields["device type"], fields["collective"]) == ("ok", "cpu", "gloo")
    assert (fields["ray resource"], fields["process group"], fields["worker env"]) == (
        "none", "cpu:gloo", "GLOO_*, OMP_*, MKL_*")
    assert fields["available"] == "yes, 1 device(s)"
    hooks = {line.split()[0]: line.split(None, 1)[1] for line in result.stdout.splitlines() if line.startswith("  ")}
    assert hooks["trinity_synchronize"] == "backend"
    assert hooks["trinity_worker_env"] == "core default"
    assert hooks["trinity_doctor"] == "backend + core default"


def test_show_json_tells_own_hooks_from_defaults(trinity: Runner) -> None:
    result = trinity("backends", "show", "OKDEV", "--json")  # names are case-insensitive
    assert result.returncode == 0, result.stderr
    document = result.json()
    assert set(document) == ROW_FIELDS | {
        "worker_env_prefixes", "process_group_backend", "hooks", "selection", "selection_error", "cluster",
        "dtypes", "attention", "offload", "newer_hooks_defaulted"}
    assert document["name"] == "okdev" and document["worker_env_prefixes"] == ["OKDEV_"]
    assert document["hooks"] == {
        **{hook: "default" for hook in SINGLE_ANSWER_HOOKS},
        "trinity_backend_info": "backend",
        "trinity_probe": "backend",
        "trinity_doctor": "default",
    }


def test_show_prints_the_dtype_and_attention_answers_and_who_gave_them(trinity: Runner, site: Path) -> None:
    add_backend(site, "halfdev", extra="""
        from trinity.device import AttentionChoice, DtypeSupport


        @hookimpl
        def trinity_supported_dtypes():
            return DtypeSupport(("bfloat16", "float32"), unsupported={"float16": "no float16 units; use bfloat16"})


        @hookimpl
        def trinity_attention_implementation(dtype):
            return AttentionChoice("eager", f"no fused attention in {dtype}")
        """)
    result = trinity("backends", "show", "halfdev")
    assert result.returncode == 0, result.stderr
    fields = {key: value.strip() for key, value in (
        line.split(":", 1) for line in result.stdout.splitlines() if not line.startswith(" ") and ":" in line)}
    assert fields["spec version"] == str(SPEC_VERSION)
    assert fields["dtypes"] == "bfloat16 (preferred); float32; not float16: no float16 units; use bfloat16"
    assert fields["attention"] == "eager in bfloat16 (no fused attention in bfloat16)"
    document = trinity("backends", "show", "okdev", "--json").json()  # answered by the core's defaults
    assert document["dtypes"]["answered_by"] == document["attention"]["answered_by"] == "default"
    assert document["dtypes"]["supported"][0] == document["attention"]["dtype"] == "float32"
    assert document["newer_hooks_defaulted"] == []
    assert document["offload"]["supported"] is True and document["offload"]["answered_by"] == "default"


def test_show_prints_the_offload_answer(trinity: Runner, site: Path) -> None:
    add_backend(site, "nooffload", extra="""
        from trinity.device import OffloadSupport


        @hookimpl
        def trinity_offload_support():
            return OffloadSupport(False, reason="no host-mapped memory on this device")
        """)
    result = trinity("backends", "show", "nooffload")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("offload:")]
    assert len(lines) == 1 and lines[0].split(":", 1)[1].strip() == "no (no host-mapped memory on this device)"
    assert trinity("backends", "show", "nooffload", "--json").json()["offload"]["answered_by"] == "backend"


def test_a_backend_written_for_an_older_spec_is_flagged(trinity: Runner, site: Path) -> None:
    add_backend(site, "olddev", spec_version="1")
    shown = trinity("backends", "show", "olddev")
    assert shown.returncode == 0, shown.stderr
    spec_line = next(line for line in shown.stdout.splitlines() if line.startswith("spec version:"))
    added = [hook for hook, since in HOOKS_ADDED_IN.items() if since > 1]
    assert f"1 (OLDER than this trinity-rft's spec {SPEC_VERSION}: {', '.join(added)} answered by" in spec_line
    assert trinity("backends", "show", "olddev", "--json").json()["newer_hooks_defaulted"] == added
    listed = trinity("backends", "list")
    assert (f"olddev: written for DeviceBackend spec 1, older than this trinity-rft's {SPEC_VERSION}; "
            "`trinity backends show olddev` lists") in listed.stdout
    assert "okdev: written for" not in listed.stdout


def test_show_a_broken_backend(trinity: Runner, site: Path) -> None:
    write_distribution(site, "fake-importfail", {"fake_importfail": "raise ImportError('no libfoo')"},
                       {"importfail": "fake_importfail"})
    result = trinity("backends", "show", "importfail", "--json")
    assert result.returncode == 0
    document = result.json()
    assert document["status"] == "broken" and document["error"].endswith("ImportError: no libfoo")
    assert document["hooks"] is None and document["priority"] is None


def test_show_unknown_name_lists_the_installed_ones(trinity: Runner) -> None:
    result = trinity("backends", "show", "nosuch")
    assert result.returncode == 2
    line = result.error_line()
    assert line.startswith("trinity: error: no backend named 'nosuch'; installed: ")
    assert {"cpu", "okdev"} <= set(line.split("installed: ")[1].split(", "))


def test_check_cpu_passes(trinity: Runner) -> None:
    result = trinity("backends", "check", "cpu")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("checks of backend cpu (trinity-rft ")
    assert lines[1].split() == ["ok", "probe", "available,", "1", "device(s)"]
    assert any(line.split()[:2] == ["ok", "torch"] for line in lines)
    assert lines[-1].startswith("all checks passed: ")


def test_check_without_name_checks_the_selected_backend(trinity: Runner) -> None:
    result = trinity("backends", "check", "--json", TRINITY_DEVICE="okdev")
    assert result.returncode == 0, result.stderr
    document = result.json()
    assert (document["backend"], document["distribution"]) == ("okdev", "fake-backend-okdev 0.1.0")
    assert document["ok"] is True
    assert {check["name"] for check in document["checks"]} == {"probe", "torch"}


def test_check_with_a_failing_doctor_check_exits_1(trinity: Runner, site: Path) -> None:
    add_backend(site, "olddrv", extra=(
        "@hookimpl\n"
        "def trinity_doctor():\n"
        "    return [DoctorCheck('driver', 'fail', 'driver 1.0 is too old', fix='install driver >= 2.0'),\n"
        "            DoctorCheck('firmware', 'warn', 'firmware unknown')]\n"
    ))
    result = trinity("backends", "check", "olddrv")
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    failing = lines.index(next(line for line in lines if line.split()[:2] == ["fail", "driver"]))
    assert lines[failing].endswith("driver 1.0 is too old")
    assert lines[failing + 1].strip() == "fix: install driver >= 2.0"
    assert lines[-1] == "some checks failed: 2 ok, 1 warn, 1 fail"
    assert "Traceback" not in result.stderr


def test_check_an_unavailable_or_broken_backend_fails(trinity: Runner, site: Path) -> None:
    add_backend(site, "nodev", available=False, device_count=0, reason="no /dev/nodev0")
    write_distribution(site, "fake-importfail", {"fake_importfail": "raise ImportError('no libfoo')"},
                       {"importfail": "fake_importfail"})
    unavailable = trinity("backends", "check", "nodev", "--json")
    assert unavailable.returncode == 1
    probe = unavailable.json()["checks"][0]
    assert (probe["name"], probe["status"], probe["detail"]) == ("probe", "fail", "not available: no /dev/nodev0")
    broken = trinity("backends", "check", "importfail", "--json")
    assert broken.returncode == 1
    [load] = broken.json()["checks"]
    assert (load["name"], load["status"]) == ("load", "fail") and "ImportError: no libfoo" in load["detail"]


def test_check_unknown_name_is_a_usage_error(trinity: Runner) -> None:
    result = trinity("backends", "check", "nosuch")
    assert result.returncode == 2
    assert result.error_line().startswith("trinity: error: no backend named 'nosuch'; installed: ")
