"""The guide (README.md and docs/): every relative link and #anchor resolves, and every example
a page shows runs as written (issue 49).

Each guide page is read as a list of fenced blocks, in order, each with the HTML comments just
above it (``<!-- not run: why -->``, ``<!-- columns: N -->``):

- ``sh`` blocks: every command (``tracecomm …``, ``python -m tracecomm…``; ``|`` into ``jq``,
  ``>`` / ``>>`` into a file and ``&&`` as a shell runs them) runs in a working folder of the
  page's own, in which ``fixtures/`` is the repository's and ``run/`` the sample run, and
  exits 0, or the code its comment names (``# exit 1``);
- output blocks (a plain or ``text`` fence whose first line is ``$ command``): each command runs
  there too and prints what the block shows after it, line for line (``…`` stands for any
  lines), at the block's ``columns`` (default: the terminal report's 160); ``$ cat FILE``
  writes the lines shown into FILE first;
- ``python`` blocks are run by the tests named in PYTHON_TESTS; ``yaml`` blocks are excerpts
  of the workflow in examples/.

A block that cannot run here (a GPU job, a cluster, HTA itself) says why in ``not run``; the
tests fail on an unmarked block they cannot run. Commands on ../shared/data skip without it;
without jq, a piped command runs unfiltered.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import LLAMA2_7B, REPO, SAMPLE_RUN
from tracecomm.cli import app

DOCS = REPO / "docs"
REFERENCE = ("metrics.md", "architecture.md")  # shipped with the package, not guide pages
GUIDE = sorted(p.name for p in DOCS.glob("*.md") if p.name not in REFERENCE)
SHARED = REPO.parent / "shared"
PYTHON_TESTS = {"record.md": "tests/record/test_readme.py", "api.md": "tests/test_api.py"}
DEFAULT_COLUMNS = 160
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*```")
MARK = re.compile(r"^<!--\s*(not run|columns):\s*(.*?)\s*-->$")


@dataclass
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    lang: str
    text: list[str]
    marks: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"docs/{self.page}:{self.line}"

    @property
    def is_output(self) -> bool:
        return self.lang in ("", "text") and bool(self.text) and self.text[0].startswith("$ ")


def blocks(page: str) -> list[Block]:
    found: list[Block] = []
    lines = (DOCS / page).read_text().splitlines()
    marks: dict[str, str] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        mark = MARK.match(line.strip())
        if mark:
            marks[mark.group(1)] = mark.group(2)
        elif FENCE.match(line):
            indent = len(line) - len(line.lstrip())
            end = next(j for j in range(i + 1, len(lines)) if FENCE.match(lines[j]))
            text = [x[indent:] for x in lines[i + 1 : end]]
            found.append(Block(page, i + 1, line.strip()[3:].strip(), text, marks))
            marks, i = {}, end
        elif line.strip():
            marks = {}
        i += 1
    return found


# -- links ------------------------------------------------------------------------------------


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to -."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    fenced = False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (m := re.match(r"^#{1,6} (.+)$", line)):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    out.update(re.findall(r"<a (?:id|name)=\"([^\"]+)\"", path.read_text()))
    return out


def links(path: Path) -> Iterator[tuple[int, str]]:
    fenced = False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            for m in LINK.finditer(re.sub(r"`[^`]*`", "", line)):
                yield number, m.group(1)


MARKDOWN = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_and_anchor_resolves(path: Path) -> None:
    broken = []
    for number, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            broken.append(f"{path.name}:{number}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{path.name}:{number}: {target} (no such heading in {dest.name})")
    assert not broken, "\n".join(broken)


def test_the_readme_is_short_and_links_the_guide() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    assert "tracecomm analyze fixtures/sample-run" in readme  # the two commands
    assert "pip install -e '.[test,hta,dask,s3]' && python -m pytest" in readme
    assert "## The bottom line first" in readme  # tests/cli/test_first_screen.py checks it
    linked = {t.split("#")[0] for _, t in links(REPO / "README.md") if t.startswith("docs/")}
    assert {f"docs/{p}" for p in GUIDE} <= linked, sorted({f"docs/{p}" for p in GUIDE} - linked)
    assert len(GUIDE) >= 8


@pytest.mark.parametrize("page", GUIDE)
def test_each_page_starts_with_the_command_that_does_it(page: str) -> None:
    lines = [line for line in (DOCS / page).read_text().splitlines() if line.strip()]
    assert lines[0].startswith("# ") and lines[1] in ("```sh", "```python"), (
        f"{page}: the title, then the command"
    )
    assert "not run" not in blocks(page)[0].marks, f"{page}: its first command runs"


@pytest.mark.parametrize("page", GUIDE)
def test_every_block_is_run_or_says_why_not(page: str) -> None:
    for block in blocks(page):
        if "not run" in block.marks:
            assert block.marks["not run"], f"{block.where}: say why it is not run"
        elif block.lang == "sh":
            for command in commands(block):
                assert command.startswith(("tracecomm ", "python -m tracecomm")), (
                    f"{block.where}: {command!r} cannot run here: mark the block not run"
                )
        elif block.lang == "python":
            assert page in PYTHON_TESTS, f"{block.where}: no test runs this block"
        elif block.lang in ("", "text"):
            assert block.is_output, f"{block.where}: output without its $ command"
        elif block.lang == "yaml":
            workflow = (REPO / "examples/github-actions.yml").read_text()
            assert "\n".join(block.text) in workflow, f"{block.where}: not in the workflow"


# -- running the examples ---------------------------------------------------------------------


def commands(block: Block) -> list[str]:
    """The block's commands: continuation lines joined, comment lines and blank ones left out."""
    joined = re.sub(r"\\\n\s*", "", "\n".join(block.text))
    return [c.strip() for c in joined.splitlines() if c.strip() and not c.lstrip().startswith("#")]


def split_comment(command: str) -> tuple[str, str]:
    """The command and its trailing ``# comment`` (a # outside quotes after a space)."""
    quote = ""
    for i, ch in enumerate(command):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and i > 0 and command[i - 1] == " ":
            return command[:i].rstrip(), command[i + 1 :]
    return command, ""


@contextlib.contextmanager
def cwd(path: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def invoke(args: list[str], columns: int) -> tuple[int, str, str]:
    """``tracecomm ARGS`` or ``python -m tracecomm.synth[.series] ARGS``, in this process: the
    exit code, stdout and stderr."""
    if args[0] == "tracecomm":
        env = {"COLUMNS": str(columns), "NO_COLOR": "1"}
        result = CliRunner().invoke(app, args[1:], env=env)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return result.exit_code, result.stdout, result.stderr
    if args[:3] == ["python", "-m", "tracecomm.synth"]:
        from tracecomm.synth.__main__ import main
    elif args[:3] == ["python", "-m", "tracecomm.synth.series"]:
        from tracecomm.synth.series import main
    else:
        done = subprocess.run(args, capture_output=True, text=True, timeout=120)
        return done.returncode, done.stdout, done.stderr
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(args[3:])
    return code or 0, out.getvalue(), ""


DONE: dict[tuple[Path, str, int], tuple[int, str, str]] = {}


def run_line(line: str, columns: int = DEFAULT_COLUMNS) -> tuple[int, str, str]:
    """One shell line: ``a && b``, ``a | jq …``, ``a > file``, ``a >> file``; the exit code,
    the stdout left on the terminal and the stderr of the last command that ran (an && chain
    stops at the first failure). A line that ran in this folder already (an output block
    showing a command the page ran) is not run again."""
    key = (Path.cwd(), line, columns)
    if key not in DONE:
        DONE[key] = run_fresh(line, columns)
    return DONE[key]


def run_fresh(line: str, columns: int) -> tuple[int, str, str]:
    if "../shared/" in line and not SHARED.is_dir():
        pytest.skip(f"needs {SHARED}")
    lexer = shlex.shlex(line, posix=True, punctuation_chars="|&<>")
    lexer.whitespace_split, lexer.commenters = True, ""
    # $VARIABLE (GitHub's step summary): a file of that name in the working folder
    tokens = [t[1:].lower() if t.startswith("$") else t for t in lexer]
    chain: list[list[str]] = [[]]
    for token in tokens:
        if token == "&&":
            chain.append([])
        else:
            chain[-1].append(token)
    code, out, err = 0, "", ""
    for words in chain:
        stages: list[list[str]] = [[]]
        target, mode = None, "w"
        for i, word in enumerate(words):
            if word == "|":
                stages.append([])
            elif word in (">", ">>"):
                target, mode = words[i + 1], "a" if word == ">>" else "w"
                break
            else:
                stages[-1].append(word)
        code, out, err = invoke(stages[0], columns)
        for stage in stages[1:]:
            assert stage[0] == "jq", f"{line}: only jq reads a pipe here"
            if shutil.which("jq") is None:  # the command still runs; its filter cannot
                continue
            done = subprocess.run(stage, input=out, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, f"{line}: jq: {done.stderr}"
            out = done.stdout
        if target is not None:
            with open(target, mode) as f:
                f.write(out)
            out = ""
        if code != 0:
            break
    return code, out, err


def workdir(page: str, base: Path) -> Path:
    """The page's own folder: fixtures/ and run/ (the sample run) in it, ../shared beside it."""
    where = base / page.removesuffix(".md")
    where.mkdir(parents=True)
    (where / "fixtures").symlink_to(REPO / "fixtures", target_is_directory=True)
    (where / "run").symlink_to(SAMPLE_RUN, target_is_directory=True)
    if SHARED.is_dir() and not (base / "shared").exists():
        (base / "shared").symlink_to(SHARED, target_is_directory=True)
    config = {**LLAMA2_7B, "max_position_embeddings": 4096}  # for --model-config
    (where / "config.json").write_text(json.dumps(config))
    return where


def expected_code(comment: str) -> int:
    m = re.search(r"\bexit (\d+)", comment)
    return int(m.group(1)) if m else 0


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("guide")


@pytest.fixture(scope="module")
def ran(base: Path) -> dict[str, Path]:
    """Pages whose sh blocks have run, by name: their working folder."""
    return {}


def run_page(page: str, base: Path, ran: dict[str, Path]) -> Path:
    if page in ran:
        return ran[page]
    where = workdir(page, base)
    with cwd(where):
        for block in blocks(page):  # files an output block shows with `$ cat FILE`
            if block.is_output and "not run" not in block.marks:
                for command, shown in transcript(block):
                    if command.startswith("cat "):
                        Path(command[4:].strip()).write_text("\n".join(shown) + "\n")
        for block in blocks(page):
            if block.lang != "sh" or "not run" in block.marks:
                continue
            for line in commands(block):
                command, comment = split_comment(line)
                code, out, err = run_line(command)
                assert code == expected_code(comment), f"{block.where}: {line}\n{out}{err}"
    ran[page] = where
    return where


def transcript(block: Block) -> list[tuple[str, list[str]]]:
    """An output block's commands, each with the lines shown after it."""
    steps: list[tuple[str, list[str]]] = []
    for line in block.text:
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return steps


def shows(shown: list[str], real: list[str]) -> bool:
    """``shown`` is ``real`` with each ``…`` line standing for any run of lines."""
    pattern = "".join(
        r"(?:[^\n]*\n)*?" if line == "…" else re.escape(line + "\n") for line in shown
    )
    return re.fullmatch(pattern, "".join(line + "\n" for line in real)) is not None


@pytest.mark.parametrize("page", GUIDE)
def test_the_pages_commands_run(page: str, base: Path, ran: dict[str, Path]) -> None:
    run_page(page, base, ran)


OUTPUTS = [
    pytest.param(page, block.line, id=f"{page}:{block.line}")
    for page in GUIDE
    for block in blocks(page)
    if block.is_output and "not run" not in block.marks
]


@pytest.mark.parametrize(("page", "line"), OUTPUTS)
def test_the_shown_output_is_the_real_one(
    page: str, line: int, base: Path, ran: dict[str, Path]
) -> None:
    block = next(b for b in blocks(page) if b.line == line)
    columns = int(block.marks.get("columns", DEFAULT_COLUMNS))
    where = run_page(page, base, ran)
    with cwd(where):
        for command, shown in transcript(block):
            if command.startswith("cat "):
                continue
            _, out, err = run_line(command, columns)
            # a terminal interleaves the two streams: stderr's warnings first or last
            real = [
                [x.rstrip() for x in text.rstrip().splitlines()] for text in (err + out, out + err)
            ]
            assert any(shows(shown, r) for r in real), (
                f"{block.where}: $ {command} prints\n" + "\n".join(real[0])
            )
