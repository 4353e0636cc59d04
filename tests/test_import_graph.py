"""The import graph: layers (CLI on top, data at the bottom) and no cycles, as pyproject's import-linter contracts say."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each test starts a server, a container or a subprocess

REPO = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def test_import_contracts_are_kept() -> None:
    # lint-imports caches under .import_linter_cache by default: off, so a test leaves no files behind.
    result = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
