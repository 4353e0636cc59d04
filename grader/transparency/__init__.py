"""The transparency log's primitives: Merkle tree and proofs, signed notes, checkpoints, tiles, proof files.

Pure functions and values, no database and no network: the hosting layer keeps the tree's nodes and
serves them; clients (``grader verify``, an audit) check what they fetch with the same code.
See docs/transparency.md.

* :mod:`~grader.transparency.merkle` — RFC 9162 hashes, tree heads, inclusion and consistency proofs;
* :mod:`~grader.transparency.note` — C2SP ``signed-note`` with Ed25519 keys;
* :mod:`~grader.transparency.checkpoint` — C2SP ``tlog-checkpoint``;
* :mod:`~grader.transparency.tiles` — C2SP ``tlog-tiles`` paths, tiles and entry bundles;
* :mod:`~grader.transparency.proof` — C2SP ``tlog-proof`` files;
* :mod:`~grader.transparency.entries`, :mod:`~grader.transparency.commitments` — what a grader log's entries say, and
  the keyed per-entry commitments that name participants without linking their entries;
* :mod:`~grader.transparency.mirror`, :mod:`~grader.transparency.audit` — a log as a folder of tiles, and the checks
  of ``grader log audit``.
"""
