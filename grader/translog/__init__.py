"""The transparency log's primitives: Merkle tree and proofs, signed notes, checkpoints, tiles, proof files.

Pure functions and values, no database and no network: the hosting layer keeps the tree's nodes and
serves them; clients (``grader verify``, an audit) check what they fetch with the same code.
See docs/transparency.md.

* :mod:`~grader.translog.merkle` — RFC 9162 hashes, tree heads, inclusion and consistency proofs;
* :mod:`~grader.translog.note` — C2SP ``signed-note`` with Ed25519 keys;
* :mod:`~grader.translog.checkpoint` — C2SP ``tlog-checkpoint``;
* :mod:`~grader.translog.tiles` — C2SP ``tlog-tiles`` paths, tiles and entry bundles;
* :mod:`~grader.translog.proof` — C2SP ``tlog-proof`` files;
* :mod:`~grader.translog.entries`, :mod:`~grader.translog.commitments` — what a grader log's entries say, and
  the keyed per-entry commitments that name participants without linking their entries;
* :mod:`~grader.translog.mirror`, :mod:`~grader.translog.audit` — a log as a folder of tiles, and the checks
  of ``grader log audit``.
"""
