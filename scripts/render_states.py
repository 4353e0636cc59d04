"""Rewrite the state table in docs/hosting.md from grader/hosting/states.py (tests/hosting/test_state_machine.py checks it is current).

Usage: python scripts/render_states.py
"""

from __future__ import annotations

from pathlib import Path

from grader.hosting.states import with_diagram

DOC = Path(__file__).resolve().parent.parent / "docs" / "hosting.md"

if __name__ == "__main__":
    DOC.write_text(with_diagram(DOC.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"wrote the state table into {DOC}")
