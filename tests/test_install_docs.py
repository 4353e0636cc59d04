"""Installing as the docs say: `make setup` says how to run `grader`, the docs say to activate
`.venv`, and the torch the `pack` extra pins is installed from PyTorch's CPU index, the same version everywhere.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CPU_INDEX = "--index-url https://download.pytorch.org/whl/cpu"


def _torch_pin() -> str:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    (pin,) = [r for r in extras["pack"] if r.startswith("torch")]
    assert re.fullmatch(r"torch==[\d.]+", pin), pin
    return pin


def test_readme_and_pack_md_say_to_activate_the_venv_and_install_the_cpu_torch_wheel() -> None:
    pin = _torch_pin()
    for page in ("README.md", "docs/pack.md"):
        text = (REPO / page).read_text(encoding="utf-8")
        assert ". .venv/bin/activate" in text, f"{page}: nothing says to activate .venv (grader: command not found)"
        installs = re.findall(r"pip install torch\S*.*", text)
        assert installs, f"{page}: no torch install command"
        for line in installs:
            assert pin in line, f"{page}: {line!r} installs another torch than the pack extra's {pin}"
        assert any(CPU_INDEX in line for line in installs), f"{page}: no install of torch from the CPU index"
        # a plain `pip install torch` only where the page says it is for platforms whose PyPI wheel is CPU-only
        plain = [line for line in installs if CPU_INDEX not in line]
        assert all("macOS" in text[max(0, text.index(line) - 300) : text.index(line)] for line in plain), plain


@pytest.mark.slow  # runs make
def test_make_setup_ends_with_how_to_run_grader(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "grader").touch()  # newer than pyproject.toml: setup has nothing left to install
    done = subprocess.run(["make", "-s", "-C", str(REPO), "setup", f"VENV={venv}"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert f". {venv}/bin/activate" in last and "grader --help" in last and f"{venv}/bin/grader" in last, last


def test_no_extra_repeats_a_dependency() -> None:
    # Every extra installs with the dependencies: a requirement in both can drift to two different bounds.
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]

    def names(requirements: list[str]) -> set[str]:
        return {re.split(r"[\[<>=!~;@ ]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requirements}

    base = names(project["dependencies"])
    repeated = {extra: sorted(base & names(requirements)) for extra, requirements in project["optional-dependencies"].items()}
    assert not any(repeated.values()), repeated
