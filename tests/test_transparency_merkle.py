"""Merkle tree properties: every proof of every small tree verifies, and any one-bit change is caught."""

from __future__ import annotations

import random

import pytest

from grader.errors import UsageError
from grader.transparency.errors import LogVerificationError
from grader.transparency.merkle import (
    MemoryTree,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    root_from_consistency_proof,
    verify_consistency,
    verify_inclusion,
)

MAX_SIZE = 64
TREE = MemoryTree.from_entries([f"entry {number}".encode() for number in range(MAX_SIZE)])


def _reference_root(leaves: list[bytes]) -> bytes:
    """RFC 9162's MTH, written as the recursive definition."""
    if len(leaves) == 1:
        return leaves[0]
    split = 1
    while split * 2 < len(leaves):
        split *= 2
    return node_hash(_reference_root(leaves[:split]), _reference_root(leaves[split:]))


def _flip(value: bytes, bit: int) -> bytes:
    changed = bytearray(value)
    changed[bit // 8] ^= 1 << (bit % 8)
    return bytes(changed)


def test_hashes_use_the_rfc_prefixes() -> None:
    import hashlib

    assert leaf_hash(b"abc") == hashlib.sha256(b"\x00abc").digest()
    assert node_hash(b"L" * 32, b"R" * 32) == hashlib.sha256(b"\x01" + b"L" * 32 + b"R" * 32).digest()


def test_roots_match_the_recursive_definition() -> None:
    for size in range(1, MAX_SIZE + 1):
        assert TREE.root(size) == _reference_root(TREE.levels[0][:size])


def test_every_inclusion_proof_of_every_tree_up_to_64_verifies() -> None:
    checked = 0
    for size in range(1, MAX_SIZE + 1):
        root = TREE.root(size)
        for index in range(size):
            verify_inclusion(index, size, TREE.node(0, index), inclusion_proof(TREE, index, size), root)
            checked += 1
    assert checked == MAX_SIZE * (MAX_SIZE + 1) // 2


def test_every_consistency_proof_between_trees_up_to_64_verifies() -> None:
    checked = 0
    for size2 in range(1, MAX_SIZE + 1):
        root2 = TREE.root(size2)
        for size1 in range(1, size2):
            verify_consistency(size1, size2, consistency_proof(TREE, size1, size2), TREE.root(size1), root2)
            checked += 1
        # Equal sizes: the empty proof and the same root.
        assert consistency_proof(TREE, size2, size2) == []
        verify_consistency(size2, size2, [], root2, root2)
    assert checked == MAX_SIZE * (MAX_SIZE - 1) // 2


def test_one_bit_changes_to_inclusion_proofs_roots_and_leaves_fail() -> None:
    rng = random.Random(24)
    cases = 0
    for _ in range(300):
        size = rng.randint(2, MAX_SIZE)
        index = rng.randrange(size)
        leaf, root = TREE.node(0, index), TREE.root(size)
        proof = inclusion_proof(TREE, index, size)
        position = rng.randrange(len(proof))
        bit = rng.randrange(256)
        changed = list(proof)
        changed[position] = _flip(proof[position], bit)
        for args in (
            (index, size, leaf, changed, root),
            (index, size, _flip(leaf, bit), proof, root),
            (index, size, leaf, proof, _flip(root, bit)),
            (index ^ 1, size, leaf, proof, root) if index ^ 1 < size else (index - 1, size, leaf, proof, root),
            (index, size, leaf, proof[:-1], root),
            (index, size, leaf, [*proof, proof[0]], root),
        ):
            with pytest.raises(LogVerificationError):
                verify_inclusion(*args)
            cases += 1
    assert cases == 1800


def test_one_bit_changes_to_consistency_proofs_and_roots_fail() -> None:
    rng = random.Random(62)
    for _ in range(300):
        size2 = rng.randint(2, MAX_SIZE)
        size1 = rng.randint(1, size2 - 1)
        root1, root2 = TREE.root(size1), TREE.root(size2)
        proof = consistency_proof(TREE, size1, size2)
        position = rng.randrange(len(proof))
        bit = rng.randrange(256)
        changed = list(proof)
        changed[position] = _flip(proof[position], bit)
        for args in (
            (size1, size2, changed, root1, root2),
            (size1, size2, proof, _flip(root1, bit), root2),
            (size1, size2, proof, root1, _flip(root2, bit)),
            (size1, size2, proof[:-1], root1, root2),
            (size1, size2, [*proof, proof[0]], root1, root2),
        ):
            with pytest.raises(LogVerificationError):
                verify_consistency(*args)


def test_a_rewritten_history_is_inconsistent() -> None:
    # The same 10 entries but the 4th replaced: no proof from the old head leads to the new one.
    other = MemoryTree.from_entries([b"rewritten" if number == 3 else f"entry {number}".encode() for number in range(20)])
    with pytest.raises(LogVerificationError):
        verify_consistency(10, 20, consistency_proof(other, 10, 20), TREE.root(10), other.root(20))


def test_sizes_outside_the_tree_are_refused() -> None:
    with pytest.raises(UsageError):
        inclusion_proof(TREE, 5, 5)
    with pytest.raises(UsageError):
        consistency_proof(TREE, 0, 5)
    with pytest.raises(UsageError):
        TREE.root(MAX_SIZE + 1)
    with pytest.raises(LogVerificationError, match="empty tree"):
        root_from_consistency_proof(0, 5, [], TREE.root(1))
    with pytest.raises(LogVerificationError, match="went down"):
        root_from_consistency_proof(6, 5, [], TREE.root(6))
