"""The RFC 9162 (RFC 6962) Merkle tree over SHA-256: hashes, tree heads, inclusion and consistency proofs.

Leaves hash as ``SHA-256(0x00 || entry)`` and interior nodes as ``SHA-256(0x01 || left || right)``;
the tree over ``n`` leaves splits at the largest power of two smaller than ``n`` (RFC 9162, 2.1.1).
The empty tree's hash is ``SHA-256("")``.

Proofs are *generated* from a :class:`NodeSource`: anything that answers the hash of a complete
(perfect) subtree, addressed as ``(level, index)`` (the subtree of ``2**level`` leaves starting at
leaf ``index * 2**level``). Every subtree the RFC's recursion visits is either complete or splits
into complete ones, so a store of complete nodes (a database table, the C2SP tiles, or
:class:`MemoryTree`) is all proofs need.

Proofs are *verified* with the RFC 9162 algorithms (2.1.3.2 and 2.1.4.2), with the edge cases of
transparency-dev/merkle's test vectors: an inclusion proof needs ``index < size``; a consistency
proof from size 0 is refused (any tree is consistent with the empty one: a client that has seen
nothing yet must not ask), and between equal sizes it is the empty proof with equal roots.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Protocol

from grader.errors import UsageError
from grader.transparency.errors import LogVerificationError

#: Bytes in a SHA-256 hash, the size of every node of the tree.
HASH_SIZE = 32
_LEAF_PREFIX = b"\x00"
_NODE_PREFIX = b"\x01"
#: Root hash of the tree with no leaves: SHA-256 of the empty string.
EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash(entry: bytes) -> bytes:
    """The hash of one log entry: ``SHA-256(0x00 || entry)``."""
    return hashlib.sha256(_LEAF_PREFIX + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """The hash of an interior node: ``SHA-256(0x01 || left || right)``."""
    return hashlib.sha256(_NODE_PREFIX + left + right).digest()


def _split(size: int) -> int:
    """The largest power of two strictly smaller than ``size`` (``size >= 2``): where RFC 9162 splits a tree."""
    return 1 << ((size - 1).bit_length() - 1)


class NodeSource(Protocol):
    """Hashes of complete subtrees of one tree: ``node(level, index)`` covers leaves
    ``[index * 2**level, (index + 1) * 2**level)``; level 0 is the leaf hashes."""

    def node(self, level: int, index: int) -> bytes:
        """The hash of the complete subtree at ``(level, index)``."""
        ...


class MemoryTree:
    """A tree held in memory as every complete node, level by level; appending costs O(log n).

    For tests, tools and audits of a downloaded log. ``levels[h][i]`` is ``node(h, i)``.
    """

    def __init__(self, leaf_hashes: Sequence[bytes] = ()) -> None:
        self.levels: list[list[bytes]] = [[]]
        for hashed in leaf_hashes:
            self.append_hash(hashed)

    @classmethod
    def from_entries(cls, entries: Sequence[bytes]) -> MemoryTree:
        """The tree whose leaves are ``entries`` (hashed here)."""
        return cls([leaf_hash(entry) for entry in entries])

    @property
    def size(self) -> int:
        """Number of leaves."""
        return len(self.levels[0])

    def append(self, entry: bytes) -> int:
        """Append one entry; returns its index."""
        return self.append_hash(leaf_hash(entry))

    def append_hash(self, hashed: bytes) -> int:
        """Append one leaf by its leaf hash; returns its index."""
        if len(hashed) != HASH_SIZE:
            raise UsageError(f"a leaf hash has {HASH_SIZE} bytes, not {len(hashed)}")
        index = self.size
        self.levels[0].append(hashed)
        level, position = 0, index
        # Each time the new node completes a pair, the parent becomes complete too.
        while position % 2 == 1:
            parent = node_hash(self.levels[level][position - 1], self.levels[level][position])
            level += 1
            if len(self.levels) == level:
                self.levels.append([])
            self.levels[level].append(parent)
            position //= 2
        return index

    def node(self, level: int, index: int) -> bytes:
        """The hash of the complete subtree at ``(level, index)``."""
        if level >= len(self.levels) or index >= len(self.levels[level]):
            raise UsageError(f"no complete subtree at level {level}, index {index} in a tree of {self.size} leaves")
        return self.levels[level][index]

    def root(self, size: int | None = None) -> bytes:
        """The root hash of the tree's first ``size`` leaves (all by default)."""
        return tree_hash(self, self.size if size is None else size)


def subtree_hash(source: NodeSource, start: int, end: int) -> bytes:
    """``MTH(D[start:end])`` for a range that RFC 9162's recursion visits (``start`` a multiple of the
    smallest power of two ``>= end - start``), built from complete nodes."""
    width = end - start
    if width <= 0:
        raise UsageError(f"empty or reversed range [{start}, {end})")
    if width & (width - 1) == 0:
        level = width.bit_length() - 1
        if start % width:
            raise UsageError(f"range [{start}, {end}) is not a subtree of the tree")
        return source.node(level, start >> level)
    split = _split(width)
    return node_hash(subtree_hash(source, start, start + split), subtree_hash(source, start + split, end))


def tree_hash(source: NodeSource, size: int) -> bytes:
    """The root hash of the tree's first ``size`` leaves (``EMPTY_ROOT`` for 0)."""
    if size < 0:
        raise UsageError(f"negative tree size {size}")
    return EMPTY_ROOT if size == 0 else subtree_hash(source, 0, size)


def inclusion_proof(source: NodeSource, index: int, size: int) -> list[bytes]:
    """The audit path of leaf ``index`` in the tree of ``size`` leaves (RFC 9162, 2.1.3.1), leaf side first."""
    if not 0 <= index < size:
        raise UsageError(f"leaf {index} is not in a tree of {size} leaves")
    path: list[bytes] = []
    start, end = 0, size
    # Walk down from the root, collecting the sibling of each subtree holding the leaf; reverse at the end.
    while end - start > 1:
        split = start + _split(end - start)
        if index < split:
            path.append(subtree_hash(source, split, end))
            end = split
        else:
            path.append(subtree_hash(source, start, split))
            start = split
    path.reverse()
    return path


def consistency_proof(source: NodeSource, size1: int, size2: int) -> list[bytes]:
    """The proof that the tree of ``size1`` leaves is a prefix of the one of ``size2`` (RFC 9162, 2.1.4.1).

    Requires ``0 < size1 <= size2``; between equal sizes it is empty.
    """
    if not 0 < size1 <= size2:
        raise UsageError(f"no consistency proof from size {size1} to size {size2}")
    path: list[bytes] = []
    start, end, first, whole = 0, size2, size1, True
    # SUBPROOF(m, D[start:end], b), unrolled: the recursion is a single descent.
    while first != end - start:
        split = _split(end - start)
        if first <= split:
            path.append(subtree_hash(source, start + split, end))
            end = start + split
        else:
            path.append(subtree_hash(source, start, start + split))
            start, first, whole = start + split, first - split, False
    if not whole:
        path.append(subtree_hash(source, start, end))
    path.reverse()
    return path


def _check_hash(value: bytes, what: str) -> None:
    if len(value) != HASH_SIZE:
        raise LogVerificationError(f"{what} has {len(value)} bytes, not {HASH_SIZE}")


def root_from_inclusion_proof(index: int, size: int, leaf: bytes, proof: Sequence[bytes]) -> bytes:
    """The root that ``proof`` gives for leaf hash ``leaf`` at ``index`` in a tree of ``size`` (RFC 9162, 2.1.3.2)."""
    if not 0 <= index < size:
        raise LogVerificationError(f"leaf index {index} is not below the tree size {size}")
    _check_hash(leaf, "the leaf hash")
    fn, sn = index, size - 1
    result = leaf
    for position, sibling in enumerate(proof):
        _check_hash(sibling, f"inclusion proof hash {position}")
        if sn == 0:
            raise LogVerificationError(f"inclusion proof is too long: {len(proof)} hashes for leaf {index} of {size}")
        if fn & 1 or fn == sn:
            result = node_hash(sibling, result)
            while fn and not fn & 1:
                fn, sn = fn >> 1, sn >> 1
        else:
            result = node_hash(result, sibling)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise LogVerificationError(f"inclusion proof is too short: {len(proof)} hashes for leaf {index} of {size}")
    return result


def verify_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes) -> None:
    """Raise :class:`LogVerificationError` unless ``proof`` shows leaf hash ``leaf`` at ``index`` in the tree
    of ``size`` leaves with root ``root``."""
    if root_from_inclusion_proof(index, size, leaf, proof) != root:
        raise LogVerificationError(f"inclusion proof of leaf {index} does not lead to the root of the tree of {size} leaves")


def root_from_consistency_proof(size1: int, size2: int, proof: Sequence[bytes], root1: bytes) -> bytes:
    """The root of the tree of ``size2`` leaves that ``proof`` gives, after checking it against ``root1``
    (RFC 9162, 2.1.4.2). Refuses ``size1 == 0`` and ``size1 > size2``; equal sizes need an empty proof."""
    if size1 > size2:
        raise LogVerificationError(f"tree size went down from {size1} to {size2}")
    if size1 == 0:
        raise LogVerificationError("a consistency proof from the empty tree proves nothing; check the later tree by itself")
    if size1 == size2:
        if proof:
            raise LogVerificationError(f"both trees have {size1} leaves but the consistency proof is not empty")
        return root1
    if not proof:
        raise LogVerificationError(f"empty consistency proof from size {size1} to size {size2}")
    for position, hashed in enumerate(proof):
        _check_hash(hashed, f"consistency proof hash {position}")
    _check_hash(root1, "the first root")
    path = list(proof)
    if size1 & (size1 - 1) == 0:
        # The old tree is a complete subtree of the new one: its root starts the chain.
        path.insert(0, root1)
    fn, sn = size1 - 1, size2 - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    old = new = path[0]
    for hashed in path[1:]:
        if sn == 0:
            raise LogVerificationError(f"consistency proof from size {size1} to {size2} is too long")
        if fn & 1 or fn == sn:
            old, new = node_hash(hashed, old), node_hash(hashed, new)
            while fn and not fn & 1:
                fn, sn = fn >> 1, sn >> 1
        else:
            new = node_hash(new, hashed)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise LogVerificationError(f"consistency proof from size {size1} to {size2} is too short")
    if old != root1:
        raise LogVerificationError(f"consistency proof does not lead to the root of the tree of {size1} leaves")
    return new


def verify_consistency(size1: int, size2: int, proof: Sequence[bytes], root1: bytes, root2: bytes) -> None:
    """Raise :class:`LogVerificationError` unless ``proof`` shows that the tree of ``size1`` leaves with root
    ``root1`` is a prefix of the tree of ``size2`` leaves with root ``root2``."""
    if root_from_consistency_proof(size1, size2, proof, root1) != root2:
        raise LogVerificationError(f"consistency proof does not lead to the root of the tree of {size2} leaves")
