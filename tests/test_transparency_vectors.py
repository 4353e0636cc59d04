"""transparency-dev/merkle's 196 inclusion and consistency vectors, and the classic RFC 6962 tree heads."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from grader.transparency.errors import LogVerificationError
from grader.transparency.merkle import EMPTY_ROOT, MemoryTree, verify_consistency, verify_inclusion

VECTORS = Path(__file__).parent / "data" / "merkle"
VECTOR_FILES = sorted(VECTORS.rglob("*.json"))

# The eight leaves of the RFC 6962 examples and the tree heads over their first 0..8 (transparency-dev/merkle
# testonly/constants.go, which takes them from certificate-transparency's tests).
CT_LEAVES = ["", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f"]
CT_ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]


def _decode(value: str | None) -> bytes:
    return base64.b64decode(value or "")


def test_all_vectors_are_in_the_repository() -> None:
    assert len(VECTOR_FILES) == 196
    assert (VECTORS / "LICENSE").read_text(encoding="utf-8").find("Apache License") >= 0
    wants = [json.loads(path.read_text(encoding="utf-8"))["wantErr"] for path in VECTOR_FILES]
    assert 0 < wants.count(False) < wants.count(True)  # both verdicts are exercised


@pytest.mark.parametrize("path", VECTOR_FILES, ids=lambda path: str(path.relative_to(VECTORS)))
def test_vector_gets_its_verdict(path: Path) -> None:
    vector = json.loads(path.read_text(encoding="utf-8"))
    proof = [_decode(item) for item in vector["proof"] or []]
    if "leafIdx" in vector:

        def check() -> None:
            verify_inclusion(vector["leafIdx"], vector["treeSize"], _decode(vector["leafHash"]), proof, _decode(vector["root"]))
    else:

        def check() -> None:
            verify_consistency(vector["size1"], vector["size2"], proof, _decode(vector["root1"]), _decode(vector["root2"]))

    if vector["wantErr"]:
        with pytest.raises(LogVerificationError):
            check()
    else:
        check()


def test_rfc6962_tree_heads() -> None:
    tree = MemoryTree()
    assert tree.root() == EMPTY_ROOT == bytes.fromhex(CT_ROOTS[0])
    for size, leaf in enumerate(CT_LEAVES, start=1):
        tree.append(bytes.fromhex(leaf))
        assert tree.root().hex() == CT_ROOTS[size]
    assert [tree.root(size).hex() for size in range(9)] == CT_ROOTS
