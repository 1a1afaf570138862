"""Every ``headrace ...`` command line in README.md and docs/*.md parses, as written.

The command lines are found in shell and plain ``` blocks (``\\`` continuations
joined, ``# comments`` dropped, a ``$ `` prompt taken off) and in inline
`code` spans (which may run over a line break), each split at ``&&``, ``||``,
``;``, ``|`` and ``&``, with ``NAME=value`` prefixes taken off; ``headrace``,
``python -m headrace`` and ``python -m headrace.cli`` start one. Each is parsed
by the real parser (:func:`headrace.cli.command_parser`), which raises here
instead of exiting: an unknown flag, a bad choice or a missing argument fails
the test named by file and line (``docs/bench.md:511``). Nothing runs.

Three kinds of line are read differently, by rule rather than by list:

- A **placeholder** is a word in capitals, as argparse writes a metavar
  (``PATH``, ``DIR|URL``, ``FILE.yaml``, ``N``), or ``...``: it stands for a
  value the reader supplies, so any type and any choice take it (errno names
  such as ``EIO`` are the exception: they are values). A line with one is a
  synopsis. Every line, synopsis or not, must name built-in workloads
  (``-w``, ``headrace gen``) that exist and DLIO files that are in the
  repository; a line without a placeholder is an example, and is also checked
  as the command checks it before it does anything (:func:`headrace.cli.check`:
  workload settings, ``--variants``, ``--sweep``, storage flags ...). Usage
  brackets (``[--mbps N]``) are read as if the option were given.
- ``headrace bench:`` (a command name and a colon) starts a message the CLI
  prints, quoted in the text; it is not a command line.
- Inline, a command's bare name (```headrace probe```, ```headrace emulate
  slowfs```) names the command: its words must be commands, nothing more.
"""

from __future__ import annotations

import argparse
import errno
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from headrace.bench._dlio import resolve_dlio
from headrace.bench._workload import builtin_workloads
from headrace.cli import COMMANDS, check, command_parser
from headrace.emulate._cli import EMULATORS
from headrace.errors import ConfigError, HeadraceError

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^```(\w*)\s*$")
SHELL_FENCES = {"", "bash", "sh", "shell", "console"}  # a plain fence holds commands and output
INLINE = re.compile(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)
CONTROL = {"&&", "||", ";", "|", "&", "(", ")"}
ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PYTHON = re.compile(r"^(?:.*/)?python(?:3(?:\.\d+)?)?$")
USAGE_BRACKETS = re.compile(r"\[(-[^\[\]]*)\]")  # [--mbps N], as argparse's usage writes it
PLACEHOLDER = re.compile(r"^(?:[A-Z][A-Z0-9_]*(?:[.|][A-Za-z0-9_]+)*|\.\.\.)$")
ERRNO_NAMES = frozenset(errno.errorcode.values())


@dataclass(frozen=True, kw_only=True)
class Command:
    document: str  # relative to the repository, e.g. "docs/bench.md"
    line: int  # where the command starts, 1-based
    text: str  # the command as written (continuations joined, comment dropped)
    argv: tuple[str, ...]  # what `headrace` is given
    inline: bool  # in a `code` span of the prose (else in a ``` block)

    @property
    def id(self) -> str:
        return f"{self.document}:{self.line}"


def _drop_comment(text: str) -> str:
    """``text`` up to an unquoted ``#`` that starts a word, as the shell reads it."""
    quote = None
    for i, c in enumerate(text):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i]
    return text


def _simple_commands(text: str) -> Iterator[tuple[str, list[str]]]:
    """The simple commands of a shell line: (their text, their words without ``X=v``)."""
    lexer = shlex.shlex(USAGE_BRACKETS.sub(r"\1", text), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""  # _drop_comment did it, as the shell does
    words: list[str] = []
    for token in [*lexer, ";"]:
        if token not in CONTROL:
            words.append(token)
            continue
        while words and ENV.match(words[0]):
            words.pop(0)
        if words:
            yield shlex.join(words), words
        words = []


def _headrace_argv(words: list[str]) -> list[str] | None:
    """What a simple command gives the CLI (the ``headrace`` script, ``python -m
    headrace`` or ``python -m headrace.cli``); None: it does not run the CLI."""
    if words[0] == "headrace":
        return words[1:]
    if (
        PYTHON.match(words[0])
        and words[1:2] == ["-m"]
        and words[2:3] in (["headrace"], ["headrace.cli"])
    ):
        return words[3:]
    return None


def _commands_in(text: str, document: str, line: int, *, inline: bool) -> list[Command]:
    found = []
    try:
        simple = list(_simple_commands(_drop_comment(text)))
    except ValueError:  # unbalanced quotes: prose in a code span (a quoted message), no command
        if inline and "headrace" not in text:
            return []
        raise ValueError(f"{document}:{line}: cannot split {text!r} as the shell would") from None
    for written, words in simple:
        argv = _headrace_argv(words)
        if argv is not None:
            found.append(
                Command(
                    document=document,
                    line=line,
                    text=written,
                    argv=tuple(argv),
                    inline=inline,
                )
            )
    return found


def _commands(text: str, document: str) -> list[Command]:
    """The ``headrace`` command lines of a Markdown document, in ``` blocks and inline."""
    found = []
    lines = text.splitlines()
    prose = []  # the lines outside ``` blocks, blank inside them (code spans stop there)
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            prose.append(lines[i])
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        prose.extend([""] * (end - i + 1))
        if fence[1] in SHELL_FENCES:
            j = i + 1
            while j < end:
                start, joined = j, lines[j]
                while joined.endswith("\\") and j + 1 < end:
                    j += 1
                    joined = joined[:-1] + " " + lines[j].strip()
                joined = joined.removeprefix("$ ")
                found += _commands_in(joined, document, start + 1, inline=False)
                j += 1
        i = end + 1
    flat = "\n".join(prose)
    for paragraph in re.finditer(r"(?:[^\n]+\n?)+", flat):
        for span in INLINE.finditer(paragraph[0]):
            line = flat.count("\n", 0, paragraph.start() + span.start()) + 1
            code = " ".join(span[2].split())
            found += _commands_in(code, document, line, inline=True)
    return sorted(found, key=lambda c: c.line)


COMMAND_LINES = [
    command
    for path in DOCUMENTS
    for command in _commands(path.read_text(), path.relative_to(ROOT).as_posix())
]

# -- parsing without running ----------------------------------------------------------------


class UsageError(Exception):
    """What argparse would print before exiting with status 2."""


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse's is NoReturn; it exits
        raise UsageError(f"{self.prog}: {message}")


def _is_placeholder(word: str) -> bool:
    return PLACEHOLDER.match(word) is not None and word not in ERRNO_NAMES


class _AnyChoice(tuple[Any, ...]):
    """An argument's choices, and any placeholder besides."""

    def __contains__(self, value: object) -> bool:
        return (isinstance(value, str) and _is_placeholder(value)) or super().__contains__(value)


def _takes_placeholders(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Let every argument of ``parser`` (and of its sub-parsers) take a placeholder."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _takes_placeholders(sub)
            continue
        if action.choices is not None:
            action.choices = _AnyChoice(action.choices)
        convert = action.type
        if callable(convert):

            def typed(text: str, convert: Any = convert) -> Any:
                return text if _is_placeholder(text) else convert(text)

            typed.__name__ = getattr(convert, "__name__", "type")  # argparse's "invalid int value"
            action.type = typed
    return parser


def parse(argv: tuple[str, ...]) -> argparse.Namespace:
    """``headrace ARGV`` parsed as ``headrace`` parses it, placeholders taken; UsageError
    for what it would refuse."""
    if not argv or argv[0] not in COMMANDS:
        raise UsageError(f"headrace: no command {argv[:1]}; the commands are {sorted(COMMANDS)}")
    return _takes_placeholders(command_parser(argv[0], _RaisingParser)).parse_args(argv[1:])


def _is_message(command: Command) -> bool:
    """``headrace bench: ...``: a message the CLI prints (``headrace NAME: what``)."""
    return (
        bool(command.argv)
        and command.argv[0].removesuffix(":") in COMMANDS
        and (command.argv[0].endswith(":"))
    )


def _is_name(command: Command) -> bool:
    """Inline ``headrace emulate slowfs``: the command's name, its words all commands;
    inline ``headrace`` alone is the project's name (or the bench's variant)."""
    argv = command.argv
    if not command.inline or (argv and argv[0] not in COMMANDS):
        return False
    return len(argv) <= 1 or (argv[0] == "emulate" and len(argv) == 2 and argv[1] in EMULATORS)


def _check_names(name: str, args: argparse.Namespace) -> None:
    """Built-in workload names and DLIO files: what a synopsis names must exist too."""
    if name not in ("bench", "gen"):
        return
    given = args.workload if isinstance(args.workload, list) else [args.workload]
    known = builtin_workloads()
    for workload in [w for w in given if w is not None]:
        if not _is_placeholder(workload) and not workload.endswith(".toml"):
            if workload not in known:
                raise UsageError(f"unknown workload {workload!r}; built-in: {sorted(known)}")
    dlio = getattr(args, "dlio", None)
    if dlio and not _is_placeholder(dlio) and not (ROOT / dlio).is_file():
        try:  # a DLIO workload that ships, by name
            resolve_dlio(dlio)
        except ConfigError:
            raise UsageError(f"--dlio {dlio}: no such file in the repository") from None


def verify(command: Command) -> None:
    """Fail as ``headrace`` would, before running anything, on ``command``."""
    if _is_message(command) or _is_name(command):
        return
    args = parse(command.argv)
    _check_names(command.argv[0], args)
    if not any(_is_placeholder(word) or "..." in word for word in command.argv):
        check(command.argv[0], args)


# -- the tests ------------------------------------------------------------------------------


def test_the_documents_have_command_lines() -> None:
    assert len(COMMAND_LINES) >= 80, len(COMMAND_LINES)
    assert {c.argv[0].removesuffix(":") for c in COMMAND_LINES if c.argv} == set(COMMANDS)


def test_lines_are_found_as_the_shell_and_markdown_read_them() -> None:
    text = "\n".join(
        [
            "Run `headrace probe PATH` or `headrace bench -w",
            "padded`; `headrace bench: w.toml: bad` is printed; `headrace emulate slowfs`.",
            "",
            "```bash",
            "pip install 'headrace[plot]' && X=1 headrace bench --json r.json  # a#b",
            "headrace gen padded \\",
            "    --root /tmp/x &",
            "$ python -m headrace.cli cache /c --clear | head",
            "```",
            "```python",
            "headrace bench --not-shell",
            "```",
            "```",
            "headrace emulate s3 [--mbps N] [--bucket NAME]",
            "```",
        ]
    )
    found = [(c.line, c.argv, c.inline) for c in _commands(text, "x.md")]
    assert found == [
        (1, ("probe", "PATH"), True),
        (1, ("bench", "-w", "padded"), True),
        (2, ("bench:", "w.toml:", "bad"), True),
        (2, ("emulate", "slowfs"), True),
        (5, ("bench", "--json", "r.json"), False),
        (6, ("gen", "padded", "--root", "/tmp/x"), False),
        (8, ("cache", "/c", "--clear"), False),
        (14, ("emulate", "s3", "--mbps", "N", "--bucket", "NAME"), False),
    ]


def _line(text: str, *, inline: bool = False) -> Command:
    (command,) = _commands(f"`{text}`" if inline else f"```\n{text}\n```", "x.md")
    return command


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("headrace bench -w padded --jsn r.json", "unrecognized arguments: --jsn"),
        ("headrace bench --storage s4", "invalid choice: 's4'"),
        ("headrace bench --steps many", "invalid int value: 'many'"),
        ("headrace gen --root /tmp/x", "name a workload or --dlio YAML"),
        ("headrace probe", "required: path"),
        ("headrace emulate slowfs /a", "required: MNT"),
        ("headrace benchmark", "no command"),
        ("headrace bench -w paded", "unknown workload 'paded'"),
        ("headrace gen paded --root DIR", "unknown workload 'paded'"),
        ("headrace bench --dlio tests/data/nope.yaml", "no such file in the repository"),
        ("headrace bench --dlio unet3d_h10", "no such file in the repository"),
        ("headrace bench -w padded --variants headrace-asink", "unknown variant 'headrace-asink'"),
        ("headrace bench -w padded --files 8", "--files sizes the"),
        ("headrace bench --sweep in_flight", "expected KEY=V1,V2"),
        ("headrace gen padded --root /tmp/x --endpoint http://h:9000", "go with --root URL"),
        ("headrace emulate s3 --endpoint http://h:9000", "only makes sense with"),
        ("headrace emulate slowfs a b --fail-errno 9999", "got '9999'"),
        ("headrace probe PATH --bogus", "unrecognized arguments: --bogus"),
        ("headrace probe", "required: path"),  # in a block, a bare name is a command line
    ],
)
def test_a_wrong_command_line_fails(text: str, error: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    with pytest.raises((UsageError, HeadraceError), match=re.escape(error)):
        verify(_line(text))


@pytest.mark.parametrize(
    "text",
    [
        "python -m headrace bench --list",  # headrace/__main__.py
        "headrace probe PATH --ops N --size SIZE",  # a placeholder takes any type
        "headrace bench --storage STORAGE --root DIR|URL",  # ... and any choice
        "headrace gen WORKLOAD --root s3://BUCKET/PREFIX --endpoint URL",
        "headrace gen ... --root s3://... --endpoint URL",
        "headrace emulate s3 [--latency-ms N] [--bucket NAME]",
        "headrace emulate slowfs ./data /mnt/slow --fail-errno EIO",  # EIO: a value
        "headrace bench: w.toml: train: steps must be an integer >= 1",  # a message
    ],
)
def test_placeholders_and_messages_are_taken(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    verify(_line(text))


def test_a_bare_name_in_prose_names_the_command() -> None:
    verify(_line("headrace probe", inline=True))
    verify(_line("headrace emulate slowfs", inline=True))
    verify(_line("headrace", inline=True))
    with pytest.raises(UsageError, match="no command"):
        verify(_line("headrace"))
    with pytest.raises(UsageError, match="required: SRC, MNT"):
        verify(_line("headrace emulate slowfs --mbps 5", inline=True))


@pytest.mark.parametrize("command", [pytest.param(c, id=c.id) for c in COMMAND_LINES])
def test_documented_command_line_parses(
    command: Command, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)  # the documents' relative paths (tests/data/...) are the repository's
    try:
        verify(command)
        failure = None
    except (UsageError, HeadraceError) as exc:
        failure = f"{command.id}: {command.text}\n  {exc}"
    if failure:
        pytest.fail(failure, pytrace=False)
