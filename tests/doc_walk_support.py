"""Running a page's shell blocks as its reader types them: the parser, the markers and the runner of the doc walks.

A shell block in a walked page carries a marker on the last non-blank line before its fence:

* ``<!-- test -->``: run here;
* ``<!-- test: background -->``: a long-running command, started here and stopped at the end;
* ``<!-- not tested here: why -->``: skipped, with the reason (an empty reason is no reason).

A shell block is a fence named ``sh``, ``bash``, ``shell`` or ``console``, or an unnamed fence holding a
``$ `` prompt (a transcript). An unmarked shell block is an error of the page (:func:`unmarked`).

Two ways to run them. tests/hosting/test_deploy_doc.py runs each ``sh`` block of docs/deploy.md on its own
(``bash -eu -c``, see :data:`SUDO`). A :class:`Session` runs ``console`` transcripts (tests/hosting/test_docs_walk.py)
as one shell session, in order, as a reader types them: each ``$ `` line is a command, which must exit 0;
the lines under it are its output as the page shows it, and :func:`check_output` holds the real output to
them (``…`` stands for any text, a number or hexadecimal id for any other, runs of blanks for any blanks),
so a page whose transcript no longer matches the program fails its walk.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

SHELL = {"sh", "bash", "shell", "console"}
MARKER = re.compile(r"<!-- (test|test: background|not tested here: (?P<why>.*\S.*?)) -->")
TESTED = "<!-- test -->"
BACKGROUND = "<!-- test: background -->"
#: ``sudo [-u USER] [-options] COMMAND...`` becomes ``COMMAND...`` (the throw-away servers belong to the test's user).
SUDO = 'sudo() { while [ "$#" -gt 0 ]; do case "$1" in -u) shift 2 ;; -*) shift ;; *) break ;; esac; done; "$@"; }\n'
_DONE = "@@doc-walk"


@dataclass(frozen=True)
class Block:
    """A fenced block of a Markdown page."""

    line: int  # of the opening fence, 1-based
    lang: str
    marker: str | None
    code: str

    @property
    def shell(self) -> bool:
        """A block a reader would type into a shell."""
        return self.lang in SHELL or (self.lang == "" and any(line.startswith("$ ") for line in self.code.splitlines()))


def blocks(text: str) -> list[Block]:
    """The fenced blocks of a Markdown page with the marker comment on the last non-blank line before each."""
    found = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = re.match(r"^```(\S*)\s*$", lines[i])
        if opening is None:
            i += 1
            continue
        before = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        found.append(Block(i + 1, opening.group(1), before if MARKER.fullmatch(before) else None, "\n".join(lines[i + 1 : end]) + "\n"))
        i = end + 1
    return found


def grader_on_path(folder: Path) -> Path:
    """A folder with a `grader` that runs this checkout (as the installed console script would), for ``PATH``."""
    folder.mkdir()
    script = folder / "grader"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'from grader.cli.main import main; main()' \"$@\"\n", encoding="utf-8")
    script.chmod(0o755)
    return folder


def shell_blocks(page: Path) -> list[Block]:
    """The shell blocks of a page, in order."""
    return [b for b in blocks(page.read_text(encoding="utf-8")) if b.shell]


def unmarked(page: Path, root: Path) -> list[str]:
    """``page:line`` of each shell block without a marker."""
    return [f"{page.relative_to(root)}:{b.line}" for b in shell_blocks(page) if b.marker is None]


@dataclass(frozen=True)
class Command:
    """One ``$ `` line of a transcript and the output the page shows under it."""

    page: str
    line: int  # in the page, 1-based
    text: str
    shown: tuple[str, ...]


def commands(block: Block, page: str) -> list[Command]:
    """The commands of a ``console`` transcript (``$ `` lines; a command continues over lines ending in ``\\``)."""
    found: list[Command] = []
    lines = block.code.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            if lines[i].strip():
                assert found, f"{page}:{block.line + 1 + i}: output before the first command of a transcript"
                found[-1] = Command(found[-1].page, found[-1].line, found[-1].text, (*found[-1].shown, lines[i]))
            i += 1
            continue
        start, text = i, lines[i][2:]
        while text.endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text + "\n" + lines[i]
        found.append(Command(page, block.line + 1 + start, text, ()))
        i += 1
    return found


_ID = re.compile(r"\bs[0-9a-f]{16}\b")  # a submission id, as the server makes them


class Session:
    """One ``bash`` session that runs a walk's commands one at a time, as a reader types them.

    Output (stdout and stderr, background commands' too) goes to ``log``. A submission id a page shows in a
    command's output is bound to the id the program printed there, and later commands of the page are run
    with the real one (a reader copies the id they were shown). ``close`` stops the session's process group,
    background servers included.
    """

    def __init__(self, *, env: Mapping[str, str], cwd: Path, log: Path) -> None:
        self.log = log
        self.ids: dict[str, str] = {}
        self._out = open(log, "wb")  # noqa: SIM115 - closed in close()
        self._shell = subprocess.Popen(
            ["bash", "--noprofile", "--norc", "-s"],
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def run(self, command: Command, timeout_s: float = 300) -> str:
        """Run one command (its stdin empty) and return its output; it must exit 0 and print what the page shows."""
        unbound = [shown for shown in _ID.findall(command.text) if shown not in self.ids]
        assert not unbound, f"{command.page}:{command.line}: {unbound} is no id the page showed before"
        text = _ID.sub(lambda shown: self.ids[shown.group(0)], command.text)
        begin = self.log.stat().st_size
        assert self._shell.stdin is not None
        self._shell.stdin.write(f'{{ {text}\n}} < /dev/null\necho "{_DONE} {command.line} $?"\n'.encode())
        self._shell.stdin.flush()
        deadline = time.monotonic() + timeout_s
        done = None
        while done is None:
            output = self.log.read_bytes()[begin:].decode("utf-8", "replace")
            done = re.search(rf"{_DONE} {command.line} (\d+)$", output, re.M)  # a background line may end without its newline
            if done is None:
                assert self._shell.poll() is None, f"{command.page}:{command.line}: the shell exited:\n{output[-3000:]}"
                assert time.monotonic() < deadline, f"{command.page}:{command.line}: `{text}` ran past {timeout_s} s:\n{output[-3000:]}"
                time.sleep(0.1)
        output = output[: done.start()]
        assert done.group(1) == "0", f"{command.page}:{command.line}: `{text}` exited {done.group(1)}:\n{output[-3000:]}"
        if not command.text.rstrip().endswith("&"):  # a background command's output arrives later, anywhere
            self.ids.update(check_output(command, output, self.ids))
        return output

    def close(self) -> None:
        """End the session and stop everything it started."""
        # the shell's background commands first (a server stops its own workers), as a reader's Ctrl-C or kill would
        children = Path(f"/proc/{self._shell.pid}/task/{self._shell.pid}/children")
        for pid in children.read_text(encoding="ascii").split() if children.exists() else ():
            try:
                os.kill(int(pid), signal.SIGTERM)
            except ProcessLookupError:
                pass
        if self._shell.stdin is not None:
            self._shell.stdin.close()
        stop_group(self._shell.pid)
        self._shell.wait()
        self._out.close()


def stop_group(pgid: int) -> None:
    """End a walk's process group: up to 10 s for what was asked to stop, then SIGTERM to all, SIGKILL after 15 s."""
    for wait_s, then in ((10, signal.SIGTERM), (15, signal.SIGKILL)):
        deadline = time.monotonic() + wait_s
        while not all(_zombie_or_gone(pid) for pid in _members(pgid)):  # a zombie is its parent's to reap
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        else:
            return
        try:
            os.killpg(pgid, then)
        except ProcessLookupError:
            return


def _members(pgid: int) -> list[int]:
    """The processes of a process group (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text(encoding="ascii", errors="replace")
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[2]) == pgid:
                found.append(int(entry))
    return found


def _zombie_or_gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace").rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


_VARIABLE = re.compile(r"(?P<id>\bs[0-9a-f]{16}\b)|…|[0-9a-f]*[0-9][0-9a-f]*|\s+")


def shown_pattern(line: str) -> tuple[re.Pattern[str], list[str]]:
    """A line of shown output as a pattern, and the submission ids it shows (each a group of the pattern).

    ``…`` is any text, a number or hexadecimal id any other, blanks any blanks.
    """
    parts, ids = [], []
    line = line.strip()
    last = 0
    for found in _VARIABLE.finditer(line):
        parts.append(re.escape(line[last : found.start()]))
        token = found.group(0)
        if found.group("id"):
            parts.append(r"\b(s[0-9a-f]{16})\b")
            ids.append(token)
        else:
            parts.append(".*" if token == "…" else r"\s+" if token.isspace() else r"[0-9a-f]+(?:\.[0-9]+)?")
        last = found.end()
    parts.append(re.escape(line[last:]))
    return re.compile("".join(parts)), ids


def check_output(command: Command, output: str, ids: Mapping[str, str]) -> dict[str, str]:
    """Each line the page shows under the command matches a line of its real output, in order.

    Returns the submission ids shown, each bound to the real one; an id shown where the program printed another
    than before (two different submissions under one shown id, or the reverse) fails.
    """
    bound = dict(ids)
    actual = [line.strip() for line in output.splitlines()]
    at = 0
    for shown in command.shown:
        pattern, shown_ids = shown_pattern(shown)
        while at < len(actual) and not pattern.fullmatch(actual[at]):
            at += 1
        if at == len(actual):
            raise AssertionError(
                f"{command.page}:{command.line}: `{command.text}` printed no line like\n  {shown}\n"
                f"(in order after the lines before it); it printed:\n" + "\n".join(f"  {line}" for line in output.splitlines())
            )
        for doc_id, real in zip(shown_ids, pattern.fullmatch(actual[at]).groups(), strict=True):  # type: ignore[union-attr]
            assert bound.setdefault(doc_id, real) == real, f"{command.page}:{command.line}: {doc_id} shown for {real}, and before for {bound[doc_id]}"
            others = [d for d, r in bound.items() if r == real and d != doc_id]
            assert not others, f"{command.page}:{command.line}: {real} shown as {doc_id} here, as {others} before"
        at += 1
    return bound
