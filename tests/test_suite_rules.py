"""Rules of the test suite itself, so that a new test file cannot quietly break them.

1. **No test module imports another** (``test_*.py``): shared helpers live in support modules
   (tests/conftest.py, tests/*_support.py, tests/hosting/support.py, ...), which are imported by tests, never the
   reverse; a test module can then be moved, split or deleted without breaking another.
2. **The slow rule** (tests/slow_rule.py): a test that starts a server, a container or a process is marked
   ``slow``, so ``pytest -m 'not slow'`` is a real fast loop. Checked here on the guard itself; the guard
   checks every test while it runs.
"""

from __future__ import annotations

import ast
import multiprocessing
import socket
import subprocess
from pathlib import Path

import pytest

from tests.slow_rule import SLOW_FIXTURES, SlowOnly, misuses

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
#: Not Python test code: submissions and images the sandbox tests build.
NOT_TEST_CODE = ("broken_submissions", "sandbox_images")


def python_files() -> list[Path]:
    """Every Python file under tests/, but the submissions and images the tests use as data."""
    return sorted(p for p in TESTS.rglob("*.py") if not set(p.relative_to(TESTS).parts) & set(NOT_TEST_CODE))


def imported_test_modules(path: Path) -> list[str]:
    """``line: module`` for each import in ``path`` of a module named ``test_*`` (``from tests import test_x`` too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        for name in names:
            if name.rsplit(".", 1)[-1].startswith("test_"):
                found.append(f"{node.lineno}: {name}")
                break
    return found


def test_no_module_of_the_tests_imports_a_test_module() -> None:
    offenders = {str(p.relative_to(REPO)): found for p in python_files() if (found := imported_test_modules(p))}
    assert not offenders, f"move what is shared into a support module (not test_*.py): {offenders}"


def test_the_import_scan_finds_each_spelling(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text(
        "import tests.test_a\nfrom tests.hosting.test_b import x\nfrom tests.hosting import test_c\nfrom . import test_d\n"
        "from tests.hosting.support import test_helper_name_is_fine\nimport tests.effect_support\n",
        encoding="utf-8",
    )
    found = imported_test_modules(source)
    # A support module's function named test_* is reported too: imported into a test module, pytest would collect it.
    assert [f.split(": ")[1] for f in found] == [
        "tests.test_a",
        "tests.hosting.test_b",
        "tests.hosting.test_c",
        ".test_d",
        "tests.hosting.support.test_helper_name_is_fine",
    ]


def test_a_fast_test_cannot_start_a_process() -> None:
    with pytest.raises(SlowOnly, match="starts a process but is not marked slow"):
        subprocess.run(["true"], check=False)
    with pytest.raises(SlowOnly, match="starts a process"):
        multiprocessing.get_context("spawn").Process(target=print).start()
    with pytest.raises(SlowOnly, match="starts a process"):
        multiprocessing.get_context("fork").Process(target=print).start()


def test_a_fast_test_cannot_start_a_server_or_a_container() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        with pytest.raises(SlowOnly, match="listens on a socket"):
            sock.listen()
    from docker.api.container import ContainerApiMixin

    with pytest.raises(SlowOnly, match="creates a container"):
        ContainerApiMixin.create_container(None, "grader-runner:dev")  # type: ignore[arg-type]


@pytest.mark.slow
def test_a_slow_test_may(tmp_path: Path) -> None:
    assert subprocess.run(["true"], check=False).returncode == 0
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()


class _Item:
    """Enough of a pytest item for :func:`misuses`."""

    def __init__(self, fixturenames: list[str], marks: set[str]) -> None:
        self.fixturenames, self.marks = fixturenames, marks

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.marks else None


def test_slow_only_fixtures_and_the_docker_mark_need_the_slow_mark() -> None:
    assert misuses(_Item(["tmp_path", "postgres_cluster"], set())) == ["postgres_cluster"]  # type: ignore[arg-type]
    assert misuses(_Item(["tmp_path"], {"docker"})) == ["the docker mark"]  # type: ignore[arg-type]
    assert misuses(_Item(["guard", "docker_engine"], {"docker", "slow"})) == []  # type: ignore[arg-type]
    assert misuses(_Item(["tmp_path", "small_task"], set())) == []  # type: ignore[arg-type]


def test_every_slow_only_fixture_exists() -> None:
    # A renamed fixture would silently leave the rule; each name must still be defined somewhere under tests/.
    defined = {
        node.name
        for path in python_files()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef)
        and any(isinstance(d, ast.Call | ast.Attribute) and "fixture" in ast.unparse(d) for d in node.decorator_list)
    }
    assert SLOW_FIXTURES <= defined, sorted(SLOW_FIXTURES - defined)


def constructions_of(path: Path, name: str) -> list[int]:
    """Lines of ``path`` that call ``name(...)`` (a model class constructed directly)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and (getattr(node.func, "id", None) == name or getattr(node.func, "attr", None) == name)
    ]


def test_submission_rows_are_built_by_the_one_constructor() -> None:
    # grader/hosting/intake/submission_rows.py: the service and the tests build a new row there, nowhere else.
    allowed = REPO / "grader" / "hosting" / "intake" / "submission_rows.py"
    sources = [*python_files(), *sorted((REPO / "grader").rglob("*.py"))]
    offenders = {str(p.relative_to(REPO)): lines for p in sources if p != allowed and (lines := constructions_of(p, "Submission"))}
    assert not offenders, f"build submission rows with grader.hosting.intake.submission_rows.received_submission: {offenders}"
    assert constructions_of(allowed, "Submission")
