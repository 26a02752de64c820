"""Every command README.md and docs/*.md tell a user to type parses: a `tieredlog ...` (or
`.venv/bin/tieredlog ...`) line of a code block names a command whose `--help` works and whose own
parser accepts the whole line (run without executing it), and a `make X` line names a Makefile target.
Kafka's scripts that are not installed (kafka-topics.sh, kafka-configs.sh, ...) are not told to be run."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import re
import shlex
from pathlib import Path
from types import ModuleType

import pytest

from tieredlog import cli

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
PREFIXES = ("tieredlog ", ".venv/bin/tieredlog ")
# Kafka's scripts with a tieredlog equivalent: docs say the equivalent (naming the script in prose is fine)
REPLACED = {"kafka-topics.sh": "topics", "kafka-configs.sh": "configs", "kafka-console-producer.sh": "console-producer",
            "kafka-console-consumer.sh": "console-consumer", "kafka-log-dirs.sh": "log-dirs",
            "kafka-get-offsets.sh": "get-offsets", "kafka-consumer-groups.sh": "consumer-groups",
            "kafka-transactions.sh": "transactions", "kafka-reassign-partitions.sh": "reassign",
            "kafka-leader-election.sh": "leader-election", "kafka-dump-log.sh": "dump-log"}


def code_lines(page: Path) -> list[tuple[int, str]]:
    """(line number, logical line) of the page's fenced code blocks, continuation lines joined."""
    out: list[tuple[int, str]] = []
    in_block, pending, start = False, "", 0
    for number, raw in enumerate(page.read_text().splitlines(), 1):
        if raw.lstrip().startswith("```"):
            in_block, pending = not in_block, ""
            continue
        if not in_block:
            continue
        line = raw.strip()
        if line.startswith("$ "):
            line = line[2:]
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append((start, pending + line))
        pending = ""
    return out


def synopsis_required_part(line: str) -> str:
    """A usage synopsis (``tool --a X [--b N | --c T] [--d ...]``) without its optional parts."""
    while True:
        shorter = re.sub(r"\s*\[[^\[\]]*\]", "", line)
        if shorter == line:
            return shorter.replace(" ...", "")
        line = shorter


def commands(kind: str) -> list[tuple[str, list[str]]]:
    """(page:line, argv) of every `tieredlog` (kind "tieredlog") or `make` (kind "make") line."""
    found = []
    for page in PAGES:
        for number, line in code_lines(page):
            is_tool = line.startswith(PREFIXES)
            if (kind == "tieredlog" and not is_tool) or (kind == "make" and not line.startswith("make ")):
                continue
            if " [-" in line:
                line = synopsis_required_part(line)
            argv = shlex.split(line, comments=True)
            if kind == "tieredlog" and (len(argv) < 2 or argv[1].endswith(":")):
                continue  # a log line the page quotes (`tieredlog broker: invalid configuration ...`)
            found.append((f"{page.relative_to(REPO)}:{number}", argv[1:]))
    return found


def parse_without_running(module: ModuleType, argv: list[str]) -> argparse.Namespace:
    """The tool's own argparse over ``argv``; SystemExit(2) when it does not accept it."""
    if hasattr(module, "parse_args"):
        return module.parse_args(argv)
    if hasattr(module, "_parse_args"):
        return module._parse_args(argv)
    for name in ("build_parser", "_parser"):
        if hasattr(module, name):
            return getattr(module, name)().parse_args(argv)
    raise AssertionError(f"{module.__name__} exposes no parser")


TOOL_LINES = commands("tieredlog")


def test_the_docs_have_commands() -> None:
    assert len(TOOL_LINES) > 20 and len(commands("make")) > 3


@pytest.mark.parametrize("where,argv", TOOL_LINES, ids=[w for w, _ in TOOL_LINES])
def test_documented_command_parses(where: str, argv: list[str]) -> None:
    name, rest = argv[0], argv[1:]
    assert name in cli.COMMANDS, f"{where}: `tieredlog {name}` is not a command"
    module = importlib.import_module(cli.COMMANDS[name][0])
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()) as err:
        with pytest.raises(SystemExit) as help_exit:
            cli.main([name, "--help"])
        assert help_exit.value.code in (0, None), f"{where}: `tieredlog {name} --help` failed"
        assert "usage:" in out.getvalue()
        try:
            parse_without_running(module, rest)
        except SystemExit as exc:
            if exc.code not in (0, None):  # --help / --version in the line are fine
                pytest.fail(f"{where}: `tieredlog {' '.join(argv)}` does not parse: {err.getvalue().strip()}")


def test_documented_make_targets_exist() -> None:
    targets = set(re.findall(r"^([A-Za-z0-9_.-]+):", (REPO / "Makefile").read_text(), re.MULTILINE))
    for where, argv in commands("make"):
        for target in (a for a in argv if "=" not in a and not a.startswith("-")):
            assert target in targets, f"{where}: `make {target}` is not a Makefile target"


def test_docs_run_tieredlog_not_missing_kafka_scripts() -> None:
    """A Kafka script with a tieredlog equivalent is not given as a command to run."""
    for page in PAGES:
        for number, line in code_lines(page):
            script = line.split()[:1]  # any code: only the first word matters
            if script and Path(script[0]).name in REPLACED:
                pytest.fail(f"{page.relative_to(REPO)}:{number}: run `tieredlog {REPLACED[Path(script[0]).name]}` "
                            f"rather than {script[0]}, which is not installed")
