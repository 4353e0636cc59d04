"""The grader's version is said once, in ``grader/__init__.py``: the package's metadata reads it there.

Reports, pins and ``grader --version`` read ``grader.__version__``; the built package must carry the same
number, so ``pyproject.toml`` declares the version dynamic (setuptools reads the attribute) instead of
repeating it.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import grader

REPO = Path(__file__).resolve().parent.parent


def test_the_package_version_is_read_from_the_module() -> None:
    declared = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in declared["project"] and "version" in declared["project"]["dynamic"]
    assert declared["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "grader.__version__"}
    # setuptools reads the attribute without importing the package, from a plain assignment of a string literal
    # (setuptools.config.expand.StaticModule): anything else would make a build import grader and its dependencies
    module = ast.parse((REPO / "grader" / "__init__.py").read_text(encoding="utf-8"))
    literals = [
        node.value.value
        for node in module.body
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__version__"] and isinstance(node.value, ast.Constant)
    ]
    assert literals == [grader.__version__]
