"""Two rules of the source, checked on its syntax tree so that a new module cannot quietly break them.

1. **One JSON I/O** (docs/architecture.md): no module of ``grader/`` calls ``json.load``, ``json.loads``,
   ``json.dump`` or ``json.dumps`` (or imports them, or another JSON library) except :mod:`grader.jsonio`.
   Files are read with its strict parser (duplicate keys, NaN, depth and size bounds) and written atomically;
   text for a terminal goes through ``jsonio.dumps``.
2. **One error hierarchy** (grader/errors.py): library code raises :class:`grader.errors.GraderError` subclasses,
   which the CLI maps to documented exit statuses; never a bare ``ValueError``, ``TypeError``, ``KeyError``,
   ``RuntimeError``, ``IndexError``, ``LookupError`` or ``Exception``, which would surface as a traceback.

Each rule has an allow-list keyed by (file, enclosing function, name) with the reason; an entry that no longer
matches anything fails too, so the lists only shrink.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "grader"

JSON_FUNCTIONS = frozenset({"load", "loads", "dump", "dumps"})
OTHER_JSON_LIBRARIES = frozenset({"orjson", "ujson", "simplejson", "rapidjson", "hyperjson"})
BARE_EXCEPTIONS = frozenset({"ValueError", "TypeError", "KeyError", "RuntimeError", "IndexError", "LookupError", "Exception"})

#: (file, enclosing function or "<module>", what) -> why it may stay.
JSON_ALLOWED: dict[tuple[str, str, str], str] = {
    # MAC input: a fixed canonical form (no spaces, ASCII) that jsonio.dumps does not offer and must never change.
    ("grader/grading/store_auth.py", "canonical", "json.dumps"): "canonical bytes a MAC covers",
}

#: (file, enclosing function or "<module>", exception) -> why it may stay.
RAISE_ALLOWED: dict[tuple[str, str, str], str] = {
    ("grader/collect/outputs.py", "_npy_header", "ValueError"): "caught by the function's own `except Exception` and turned into OUTPUT_INVALID",
    ("grader/runs/run.py", "Run.build", "ValueError"): "internal precondition: the grader's readers build the arrays",
    ("grader/data/writers.py", "TaskWriter._root", "RuntimeError"): "programming error: the writer used outside its with block",
    ("grader/data/writers.py", "TaskWriter.commit", "RuntimeError"): "programming error: commit before both files were written",
    ("grader/hosting/db/models.py", "UTCDateTime.process_bind_param", "ValueError"): "SQLAlchemy type hook: a naive datetime is a programming error",
    ("grader/hosting/migrations/env.py", "<module>", "RuntimeError"): "Alembic's env.py run directly instead of through migrate()",
    (
        "grader/hosting/directory/migrations/env.py",
        "<module>",
        "RuntimeError",
    ): "the server database's env.py run directly instead of through open_people()",
    ("grader/hosting/leaderboard/service.py", "set_finals", "LookupError"): "mapped to a 404 by the route (a submission the participant may not see)",
    ("grader/hosting/protocol/shard_messages.py", "ShardFailure._suspect_is_infra", "ValueError"): (
        "Pydantic validator: a ValueError is how a model refuses a body (the route answers 422)"
    ),
    ("grader/hosting/protocol/messages.py", "TaskProgress._counts_agree", "ValueError"): (
        "Pydantic validator: a ValueError is how a model refuses a body (the route answers 422)"
    ),
}


@dataclass(frozen=True)
class Finding:
    """One use of something a rule forbids: where, and what."""

    path: str
    line: int
    scope: str
    what: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.path, self.scope, self.what)

    def __str__(self) -> str:
        return f"{self.path}:{self.line} in {self.scope}: {self.what}"


class _Scanner(ast.NodeVisitor):
    """Collects forbidden JSON calls and bare raises, each with its enclosing class/function name."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.scopes: list[str] = []
        # Names bound to the json module (import json / import json as j); "json" itself even unimported (a merge may drop the import).
        self.json_names: set[str] = {"json"}
        self.json_uses: list[Finding] = []
        self.raises: list[Finding] = []

    def _found(self, node: ast.AST, what: str) -> Finding:
        return Finding(self.path, getattr(node, "lineno", 0), ".".join(self.scopes) or "<module>", what)

    def _scoped(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.scopes.append(node.name)
        self.generic_visit(node)
        self.scopes.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == "json":
                self.json_names.add(alias.asname or "json")
            elif alias.name.split(".")[0] in OTHER_JSON_LIBRARIES:
                self.json_uses.append(self._found(node, f"import {alias.name}"))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if module == "json":
            for alias in node.names:
                if alias.name in JSON_FUNCTIONS or alias.name == "*":
                    self.json_uses.append(self._found(node, f"from json import {alias.name}"))
        elif module.split(".")[0] in OTHER_JSON_LIBRARIES:
            self.json_uses.append(self._found(node, f"from {module} import ..."))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        # Any reference, called or not (``parse = json.loads`` counts too).
        if isinstance(node.value, ast.Name) and node.value.id in self.json_names and node.attr in JSON_FUNCTIONS:
            self.json_uses.append(self._found(node, f"json.{node.attr}"))
        self.generic_visit(node)

    def visit_Raise(self, node: ast.Raise) -> None:
        raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        if isinstance(raised, ast.Name) and raised.id in BARE_EXCEPTIONS:
            self.raises.append(self._found(node, raised.id))
        self.generic_visit(node)


def scan(source: str, path: str) -> _Scanner:
    """The scanner after one pass over ``source`` (the module at ``path``, relative to the repository)."""
    scanner = _Scanner(path)
    # Imports first, so that ``json.loads`` in a function above a late ``import json`` is still seen.
    tree = ast.parse(source, filename=path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            scanner.json_names.update(a.asname or "json" for a in node.names if a.name == "json")
    scanner.visit(tree)
    return scanner


def _scan_package() -> list[_Scanner]:
    return [scan(path.read_text(encoding="utf-8"), path.relative_to(REPO).as_posix()) for path in sorted(PACKAGE.rglob("*.py"))]


SCANNED = _scan_package()


def _check(found: list[Finding], allowed: dict[tuple[str, str, str], str], rule: str) -> None:
    offending = [str(f) for f in found if f.key not in allowed]
    assert not offending, f"{rule}:\n  " + "\n  ".join(offending)
    stale = sorted(set(allowed) - {f.key for f in found})
    assert not stale, f"allow-list entries that match nothing any more (remove them): {stale}"


def test_json_is_read_and_written_only_through_jsonio() -> None:
    found = [f for scanner in SCANNED if scanner.path != "grader/jsonio.py" for f in scanner.json_uses]
    _check(found, JSON_ALLOWED, "use grader.jsonio (load_file/loads/iter_objects to read, write_json/dumps to write), not the json module")


def test_library_code_raises_only_grader_errors() -> None:
    found = [f for scanner in SCANNED for f in scanner.raises]
    _check(found, RAISE_ALLOWED, "raise a grader.errors.GraderError subclass (the CLI maps it to an exit status), not a bare built-in exception")


def test_the_package_was_scanned() -> None:
    # A scan that silently found no files would pass every rule above.
    paths = {scanner.path for scanner in SCANNED}
    assert {"grader/jsonio.py", "grader/grading/store.py", "grader/stats/bootstrap.py", "grader/effect/combine.py"} <= paths
    # jsonio itself calls json.loads and json.dumps: the scanner sees them there (and the rule exempts that one file).
    assert {f.what for s in SCANNED if s.path == "grader/jsonio.py" for f in s.json_uses} >= {"json.loads", "json.dumps"}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import json\ndef f(p):\n    return json.loads(p.read_text())\n", ["json.loads"]),
        ("import json as j\nclass A:\n    def f(self, x):\n        j.dump(x, open('a', 'w'))\n", ["json.dump"]),
        ("def f(x):\n    import json\n    return json.dumps(x)\n", ["json.dumps"]),
        ("import json\nparse = json.load\n", ["json.load"]),
        ("def f(x):\n    return json.dumps(x)\n", ["json.dumps"]),
        ("from json import loads as parse\n", ["from json import loads"]),
        ("import orjson\n", ["import orjson"]),
        ("import json\ntry:\n    pass\nexcept json.JSONDecodeError:\n    pass\n", []),
        ("from grader import jsonio\njsonio.loads('1')\n", []),
    ],
)
def test_the_json_rule_sees_each_way_in(source: str, expected: list[str]) -> None:
    assert [f.what for f in scan(source, "grader/x.py").json_uses] == expected


def test_the_raise_rule_sees_bare_builtins_but_not_grader_errors() -> None:
    source = (
        "from grader.errors import UsageError\n"
        "class C:\n"
        "    def f(self, n):\n"
        "        if n < 0:\n            raise ValueError('negative')\n"
        "        if n == 0:\n            raise RuntimeError\n"
        "        if n == 1:\n            raise UsageError('one')\n"
        "        try:\n            pass\n        except OSError:\n            raise\n"
    )
    found = scan(source, "grader/x.py").raises
    assert [(f.scope, f.what, f.line) for f in found] == [("C.f", "ValueError", 5), ("C.f", "RuntimeError", 7)]
