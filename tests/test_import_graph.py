"""The import graph: layers (CLI on top, data at the bottom; inside the hosting layer, its contexts) and no cycles.

Run in-process, so that the fast loop (``pytest -m 'not slow'``) checks pyproject's import-linter contracts at
every change.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grimp
import pytest
from importlinter import api as _configure_importlinter  # noqa: F401  (registers the built-in contract types)
from importlinter.application import use_cases
from importlinter.contracts.layers import LayersContract

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = REPO / "pyproject.toml"
HOSTING_CONTRACT = "Hosting by context"


def _hosting_contract() -> LayersContract:
    options = use_cases.read_user_options(str(PYPROJECT))
    (found,) = [c for c in options.contracts_options if str(c["name"]).startswith(HOSTING_CONTRACT)]
    contract_options: dict[str, Any] = {k: v for k, v in found.items() if k not in ("name", "type")}
    return LayersContract(name=found["name"], session_options=options.session_options, contract_options=contract_options)


def test_import_contracts_are_kept(capsys: pytest.CaptureFixture[str]) -> None:
    kept = use_cases.lint_imports(config_filename=str(PYPROJECT), cache_dir=None, no_logo=True)
    out = capsys.readouterr().out
    assert kept, out
    assert "0 broken" in out


@pytest.mark.parametrize(
    ("importer", "imported"),
    [
        ("grader.hosting.keyring.host_key", "grader.hosting.services.admin"),  # a context reaching an orchestrator
        ("grader.hosting.queue.lifecycle", "grader.hosting.results.recording"),  # a lower context reaching a higher one
        ("grader.hosting.db.models", "grader.hosting.queue.lifecycle"),  # the kernel reaching a context
        ("grader.hosting.services.jobs", "grader.hosting.api.app"),  # a service reaching the routes
    ],
)
def test_the_hosting_contract_refuses_an_upward_import(importer: str, imported: str) -> None:
    graph = grimp.build_graph("grader", cache_dir=None)
    contract = _hosting_contract()
    assert contract.check(graph, verbose=False).kept
    graph.add_import(importer=importer, imported=imported)
    assert not contract.check(graph, verbose=False).kept
