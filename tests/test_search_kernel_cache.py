"""The exact search's numba kernels are cached on disk, in a folder of the user's cache, and give the same bits.

Observation: numba compiled the kernels in every process (6-16 s on a loaded
2-core machine), for every ``grader run``, ``grader score`` of an encoder and
test process. With ``cache=True`` numba would write into the package's own
``__pycache__``, which is read-only where the grader is installed system-wide, so
the grader points ``NUMBA_CACHE_DIR`` at ``~/.cache/grader/numba`` (or
``$XDG_CACHE_HOME``) unless it is set. These tests run real child processes: the
first compiles and writes the cache, the second must load every kernel from it
(no compilation) and return bit-identical results, and the freshly compiled
code must carry no fast-math flags and no fused multiply-add.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from grader import kernel_cache
from grader.retrieval.search import exact_top_k

REPO = Path(__file__).resolve().parents[1]

#: Run in a child: an exact search over tie-heavy data, then what numba did (compiled or loaded) and what it compiled.
CHILD = r"""
import json, os, re, sys, warnings
import numpy as np
from grader.retrieval import exact
from grader.retrieval.search import exact_top_k
sys.path.insert(0, sys.argv[1])
from tests.test_search_kernel_cache import search_data, digest
queries, corpus = search_data()
scores, rows = exact_top_k(queries, corpus, 25)
kernels = {}
for name in ("scan_rows", "row_hashes", "group_rows", "finish_rows"):
    kernel = getattr(exact, name)
    hits, misses = sum(kernel.stats.cache_hits.values()), sum(kernel.stats.cache_misses.values())
    code = {}
    if misses:  # freshly compiled: its IR and machine code can be inspected
        ir = "".join(kernel.inspect_llvm(sig) for sig in kernel.signatures)
        asm = "".join(kernel.inspect_asm(sig) for sig in kernel.signatures)
        code = {
            "ir_bytes": len(ir),
            "fast_math_flags": len(re.findall(r"= f(?:add|sub|mul|div) (?:fast|contract|reassoc|afn|arcp|nnan|ninf|nsz)", ir)),
            "fma_intrinsics": len(re.findall(r"llvm\.(?:fma|fmuladd)\.", ir)),
            "fma_instructions": len(re.findall(r"\bv?f(?:n)?m(?:add|sub)\d{3}", asm)),
        }
    kernels[name] = {"hits": hits, "misses": misses, **code}
print(json.dumps({"cache": exact.CACHE, "cache_dir": os.environ.get("NUMBA_CACHE_DIR"), "digest": digest(scores, rows), "kernels": kernels}))
"""


def search_data() -> tuple[np.ndarray, np.ndarray]:
    """Queries and a corpus with duplicated rows, exact score ties and a zero query (the kernels' every path)."""
    rng = np.random.default_rng(7)
    base = rng.standard_normal((300, 24)).astype(np.float32)
    corpus = np.concatenate([base, base[rng.integers(0, 300, 120)], np.zeros((3, 24), np.float32)])
    corpus = corpus[rng.permutation(len(corpus))]
    queries = rng.standard_normal((40, 24)).astype(np.float32)
    queries[0] = corpus[5]
    queries[1] = 0.0
    return queries, corpus


def digest(scores: np.ndarray, rows: np.ndarray) -> str:
    """SHA-256 of the result's bytes: equal digests are bit-identical results."""
    return hashlib.sha256(np.ascontiguousarray(scores).tobytes() + np.ascontiguousarray(rows).tobytes()).hexdigest()


def _child(home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (kernel_cache.CACHE_ENV, kernel_cache.SWITCH_ENV, "XDG_CACHE_HOME")}
    env.update(HOME=str(home), PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", CHILD, str(REPO)], capture_output=True, text=True, env=env, cwd=REPO, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_second_process_loads_every_kernel_from_the_user_cache_and_gets_the_same_bits(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    package_cache = REPO / "grader" / "retrieval" / "__pycache__"
    in_tree_before = sorted(p.name for p in package_cache.glob("*.nb*")) if package_cache.is_dir() else []

    first = _child(home)
    cache_dir = home / ".cache" / "grader" / "numba"
    assert first["cache"] is True and first["cache_dir"] == str(cache_dir)
    assert stat.S_IMODE(cache_dir.stat().st_mode) == 0o700
    assert sorted({p.name.split("-")[0] for p in cache_dir.rglob("*.nbi")}) == [
        "exact.finish_rows",
        "exact.group_rows",
        "exact.row_hashes",
        "exact.scan_rows",
    ]
    for name, kernel in first["kernels"].items():
        assert kernel["misses"] >= 1 and kernel["hits"] == 0, (name, kernel)
        # Compiled without fastmath: no fast-math flag on any float operation, no FMA (intrinsic or instruction).
        assert kernel["ir_bytes"] > 0 and kernel["fast_math_flags"] == 0, (name, kernel)
        assert kernel["fma_intrinsics"] == 0 and kernel["fma_instructions"] == 0, (name, kernel)

    second = _child(home)
    for name, kernel in second["kernels"].items():
        assert kernel["hits"] >= 1 and kernel["misses"] == 0, (name, kernel)  # loaded, not compiled
    assert second["digest"] == first["digest"]
    # And both equal this process's own search (compiled here or loaded from this user's cache).
    assert digest(*exact_top_k(*search_data(), 25)) == first["digest"]
    # Nothing was written next to the source.
    in_tree_after = sorted(p.name for p in package_cache.glob("*.nb*")) if package_cache.is_dir() else []
    assert in_tree_after == in_tree_before


# --------------------------------------------------------------------------- the folder policy


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No NUMBA_CACHE_DIR, no XDG_CACHE_HOME, HOME in a temp folder; numba's config left as it was."""
    monkeypatch.delenv(kernel_cache.CACHE_ENV, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv(kernel_cache.SWITCH_ENV, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    # configure_numba_cache rereads numba's config; keep this process's kernels where they were.
    monkeypatch.setattr(sys.modules["numba.core.config"], "reload_config", lambda: None)
    return home


def test_the_default_folder_is_created_private_in_the_users_cache(clean_env: Path) -> None:
    assert kernel_cache.configure_numba_cache() is True
    folder = clean_env / ".cache" / "grader" / "numba"
    assert os.environ[kernel_cache.CACHE_ENV] == str(folder)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_xdg_cache_home_is_honoured(clean_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert kernel_cache.configure_numba_cache() is True
    assert os.environ[kernel_cache.CACHE_ENV] == str(tmp_path / "xdg" / "grader" / "numba")


@pytest.mark.parametrize("kind", ["group-writable", "world-writable", "symlink"])
def test_a_folder_others_could_write_turns_caching_off(clean_env: Path, tmp_path: Path, kind: str) -> None:
    """numba's cache files are pickles: a folder someone else can write must not be loaded from."""
    folder = clean_env / ".cache" / "grader" / "numba"
    folder.parent.mkdir(parents=True)
    if kind == "symlink":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        folder.symlink_to(tmp_path / "elsewhere")
    else:
        folder.mkdir()
        folder.chmod(0o770 if kind == "group-writable" else 0o707)
    assert kernel_cache.configure_numba_cache() is False
    assert kernel_cache.CACHE_ENV not in os.environ


def test_an_explicit_numba_cache_dir_is_kept(clean_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    chosen = tmp_path / "chosen"
    monkeypatch.setenv(kernel_cache.CACHE_ENV, str(chosen))
    assert kernel_cache.configure_numba_cache() is True
    assert os.environ[kernel_cache.CACHE_ENV] == str(chosen) and chosen.is_dir()


def test_an_unusable_explicit_folder_turns_caching_off(clean_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """numba would fail every kernel's decoration ("no locator available"): the grader compiles in memory instead."""
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_text("", encoding="utf-8")
    monkeypatch.setenv(kernel_cache.CACHE_ENV, str(not_a_folder))
    assert kernel_cache.configure_numba_cache() is False


def test_the_switch_turns_caching_off(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(kernel_cache.SWITCH_ENV, "off")
    assert kernel_cache.configure_numba_cache() is False
    assert kernel_cache.CACHE_ENV not in os.environ and not (clean_env / ".cache").exists()
