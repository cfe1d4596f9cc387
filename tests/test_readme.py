"""The README stays short and true: its commands, its links and the docs' links all point at real things.

Fast and without Ray. Each check is a function that returns what it found
wrong; the tests assert that list is empty, and a self-test per check feeds it
a known-bad input, so every check is shown to be able to fail.
"""

from __future__ import annotations

import ast
import itertools
import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
MAX_LINES = 200
FIRST_LINES = [
    "# trinity-rft",
    "",
    "```bash",
    "python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 && pip install -e . "
    "-e ./trinity_backend_cuda -e ./trinity_backend_npu && trinity run --config examples/quickstart/cpu.yaml",
    "python3 -m pip install nox && nox",
    "```",
]
_FENCE = re.compile(r"^\s*```")
_CODE_SPAN = re.compile(r"`[^`]*`")
_LINK = re.compile(r"!?\[(?:[^\]`]|`[^`]*`)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_PATH_OPTIONS = {"--config", "-c", "--plugin-dir"}
_NOX_SESSION_OPTIONS = {"-s", "-e", "--session", "--sessions"}


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line outside fenced code blocks."""
    lines: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def _fenced_blocks(text: str, languages: tuple[str, ...] = ("bash", "sh", "shell", "console")) -> list[list[str]]:
    """The lines of every fenced code block whose info string is one of ``languages``."""
    blocks: list[list[str]] = []
    current: list[str] = []
    inside = keep = False
    for line in text.splitlines():
        if _FENCE.match(line):
            if inside and keep:
                blocks.append(current)
            if not inside:
                keep = line.strip()[3:].strip().split(" ")[0].lower() in languages
                current = []
            inside = not inside
            continue
        if inside:
            current.append(line)
    return blocks


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: rendered text, lowercase, punctuation but '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link renders as its text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """Every heading anchor of a Markdown file, duplicates numbered as GitHub numbers them (-1, -2, ...)."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for _, line in _prose_lines(path.read_text(encoding="utf-8")):
        match = _HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


def broken_links(document: Path, text: str | None = None) -> list[str]:
    """Relative links of ``document`` whose target is missing, or whose #anchor is no heading of its target."""
    if text is None:
        text = document.read_text(encoding="utf-8")
    problems: list[str] = []
    for number, line in _prose_lines(text):
        for match in _LINK.finditer(_CODE_SPAN.sub("", line)):
            target = match.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # https:, mailto:, ...
                continue
            path_part, _, anchor = target.partition("#")
            resolved = (document.parent / path_part).resolve() if path_part else document
            where = f"{document.relative_to(REPO)}:{number}: {target}"
            if not resolved.exists():
                problems.append(f"{where}: no such file")
                continue
            if anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                problems.append(f"{where}: no heading #{anchor} in {resolved.relative_to(REPO)}")
    return problems


def _commands(block: list[str]) -> list[list[str]]:
    """Each simple command of a bash block, as words: lines split at '&&', '||', ';' and '|', comments dropped."""
    commands: list[list[str]] = []
    for line in block:
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        current: list[str] = []
        for word in [*words, ";"]:
            if word in {"&&", "||", ";", "|"} or word.endswith(";"):
                if word.endswith(";") and word != ";":
                    current.append(word[:-1])
                if current:
                    commands.append(current)
                current = []
            else:
                current.append(word)
    return commands


def trinity_commands(text: str) -> list[list[str]]:
    """Every `trinity ...` command of the bash blocks of ``text``."""
    return [words for block in _fenced_blocks(text) for words in _commands(block) if words[0] == "trinity"]


def nox_commands(text: str) -> list[list[str]]:
    """Every `nox ...` command of the bash blocks of ``text`` (`python -m nox` included)."""
    found: list[list[str]] = []
    for block in _fenced_blocks(text):
        for words in _commands(block):
            if words[0] == "nox":
                found.append(words)
            elif len(words) > 2 and words[1:3] == ["-m", "nox"]:
                found.append(["nox", *words[3:]])
    return found


@cache
def _subcommand_ok(words: tuple[str, ...]) -> tuple[int, str]:
    run = subprocess.run(
        [sys.executable, "-m", "trinity.cli.main", *words, "--help"],
        check=False, cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    return run.returncode, (run.stderr or run.stdout).strip()[-300:]


def bad_trinity_command(words: list[str]) -> list[str]:
    """What is wrong with one `trinity` command: an unknown subcommand, a named file that is not in the repo."""
    problems: list[str] = []
    rest = words[1:]
    while rest and rest[0].startswith("-"):  # global options before the subcommand (-v)
        rest = rest[1:]
    positional: list[str] = []
    for word in rest:
        if word.startswith("-"):
            break
        positional.append(word)
    if not positional:
        return [f"{shlex.join(words)}: names no subcommand"]
    rc, said = _subcommand_ok(tuple(positional[:2]))
    if rc != 0:
        problems.append(f"{shlex.join(words)}: `trinity {' '.join(positional[:2])} --help` exited {rc}: {said}")
    for option, value in itertools.pairwise(words):
        if option in _PATH_OPTIONS and not (REPO / value).exists():
            problems.append(f"{shlex.join(words)}: {option} {value} does not exist in the repository")
    for word in words[1:]:
        if re.search(r"\.(ya?ml|jsonl?)$", word) and not (REPO / word).exists():
            problems.append(f"{shlex.join(words)}: {word} does not exist in the repository")
    return sorted(set(problems))


@cache
def nox_sessions() -> frozenset[str]:
    """The session names noxfile.py defines: each @nox.session function, or its name= argument."""
    tree = ast.parse((REPO / "noxfile.py").read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for decorator in node.decorator_list:
            call = decorator if isinstance(decorator, ast.Call) else None
            target = call.func if call else decorator
            if ast.unparse(target) != "nox.session":
                continue
            name = node.name
            for keyword in call.keywords if call else []:
                if keyword.arg == "name" and isinstance(keyword.value, ast.Constant):
                    name = str(keyword.value.value)
            names.add(name)
    return frozenset(names)


def bad_nox_command(words: list[str]) -> list[str]:
    """The sessions a `nox -s NAME ...` command names that noxfile.py does not define."""
    problems: list[str] = []
    taking = False
    for word in words[1:]:
        if word in _NOX_SESSION_OPTIONS:
            taking = True
            continue
        if word.startswith("-"):
            taking = False
            continue
        if taking:
            for name in word.split(","):
                if name.split("(")[0].strip() not in nox_sessions():
                    problems.append(f"{shlex.join(words)}: no session {name!r} in noxfile.py")
    return problems


# (a) short, and the two commands first


def test_readme_has_at_most_200_lines() -> None:
    count = len(README.read_text(encoding="utf-8").splitlines())
    assert count <= MAX_LINES, f"README.md has {count} lines; move text into docs/ (at most {MAX_LINES})"


def test_readme_starts_with_the_two_commands() -> None:
    first = README.read_text(encoding="utf-8").splitlines()[: len(FIRST_LINES)]
    assert first == FIRST_LINES, "README.md must start with its title and the install+quickstart and nox commands"


# (b) links


@pytest.mark.parametrize("document", [README, *DOCS], ids=lambda path: str(path.relative_to(REPO)))
def test_relative_links_resolve(document: Path) -> None:
    assert broken_links(document) == []


def test_slug_follows_githubs_rules() -> None:
    assert slug("Where a step's time goes") == "where-a-steps-time-goes"
    assert slug("The `trinity` command") == "the-trinity-command"
    assert slug("AgentScope: upstream's AgentScope recipes") == "agentscope-upstreams-agentscope-recipes"
    assert slug("Required: `trinity_backend_info` and `trinity_probe`") == (
        "required-trinity_backend_info-and-trinity_probe"
    )


def test_broken_links_catches_a_missing_file_and_a_missing_anchor() -> None:
    text = (
        "[gone](docs/no-such-page.md) [bad](docs/async.md#no-such-heading) [ok](docs/async.md#resuming)\n"
        "`[in code](nowhere.md)`\n```\n[fenced](nowhere.md)\n```\n[web](https://example.com/x.md#y)\n"
    )
    problems = broken_links(README, text)
    assert len(problems) == 2, problems
    assert "no such file" in problems[0] and "no heading #no-such-heading" in problems[1]


# (c) the README's commands


def test_readme_names_trinity_commands() -> None:
    assert trinity_commands(README.read_text(encoding="utf-8")), "README.md shows no `trinity` command"


@pytest.mark.parametrize(
    "words", trinity_commands(README.read_text(encoding="utf-8")), ids=shlex.join
)
def test_readme_trinity_command_is_real(words: list[str]) -> None:
    assert bad_trinity_command(words) == []


def test_bad_trinity_command_catches_an_unknown_subcommand_and_a_missing_file() -> None:
    assert bad_trinity_command(["trinity", "no-such-command"])
    assert bad_trinity_command(["trinity", "run", "--config", "examples/no-such.yaml"])
    assert bad_trinity_command(["trinity", "--verbose"])
    assert bad_trinity_command(["trinity", "run", "--config", "examples/quickstart/cpu.yaml"]) == []


@pytest.mark.parametrize("document", [README, *DOCS], ids=lambda path: str(path.relative_to(REPO)))
def test_nox_sessions_named_exist(document: Path) -> None:
    for words in nox_commands(document.read_text(encoding="utf-8")):
        assert bad_nox_command(words) == []


def test_nox_check_reads_the_noxfile_and_catches_an_unknown_session() -> None:
    assert {"lint", "typecheck", "tests", "conformance", "wheels"} <= nox_sessions()
    block = (
        "```bash\nnox -s lint tests\npython3 -m nox --session 'conformance(backend=\"cpu\")' -- -x\n"
        "nox -s nope\n```\n"
    )
    commands = nox_commands(block)
    assert [bad_nox_command(words) for words in commands] == [[], [], ["nox -s nope: no session 'nope' in noxfile.py"]]


def test_command_splitting_finds_the_quickstart_inside_the_install_line() -> None:
    commands = trinity_commands(README.read_text(encoding="utf-8"))
    assert ["trinity", "run", "--config", "examples/quickstart/cpu.yaml"] in commands


# the map of the docs


def _linked_pages(document: Path) -> set[str]:
    """Names of the docs/*.md pages that ``document`` links to."""
    text = _CODE_SPAN.sub("", "\n".join(line for _, line in _prose_lines(document.read_text(encoding="utf-8"))))
    targets = ((document.parent / match.group(1).partition("#")[0]).resolve() for match in _LINK.finditer(text))
    return {target.name for target in targets if target.parent == REPO / "docs" and target.suffix == ".md"}


@pytest.mark.parametrize("index", [REPO / "docs" / "README.md", README], ids=lambda path: str(path.relative_to(REPO)))
def test_index_links_every_docs_page(index: Path) -> None:
    pages = {page.name for page in DOCS} - {"README.md"}
    if index == README:
        pages.add("README.md")  # the README's map links the index too
    assert pages - _linked_pages(index) == set(), f"{index.relative_to(REPO)} does not list these docs pages"
