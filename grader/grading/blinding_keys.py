"""Which blinding key stages a grade's tasks (``docs/protocol.md``, "What the container sees").

In order: the key given (``grader run --blinding-key``, or a hosted competition's,
carried by the job); beside the signing key of a signed run (``grader keygen``
writes ``blinding.key`` next to ``grader.key``); else the OUT folder's own
``blinding.key``, created (0600) on the first run. So re-grading the same
submission on the same data with the same key stages the same ids, and a
submission that breaks ties by id gets the same grade. ``grader check`` keeps
nothing: it stages with a fresh key (:func:`with_blinding_key`).
"""

from __future__ import annotations

import dataclasses

from grader.errors import KeyFileError
from grader.grading.interfaces import RunOptions
from grader.sandbox.blinding import BlindingKey, Preblinded
from grader.sandbox.blinding_key import BLINDING_KEY_NAME, ensure_blinding_key, load_blinding_key


def blinding_key_for(options: RunOptions) -> BlindingKey | Preblinded:
    """The blinding key for ``options`` (see the module's order); creates OUT's key on an unsigned run's first use."""
    if options.blinding_key is not None:
        return options.blinding_key
    if options.key_path is not None:
        path = options.key_path.parent / BLINDING_KEY_NAME
        try:
            return load_blinding_key(path)
        except KeyFileError as error:
            raise KeyFileError(
                f"{error.what} (a signed run stages its tasks with the blinding key beside its signing key)",
                path=path,
                hint=f"run `grader keygen --out {options.key_path.parent}`: it adds a missing blinding key beside an existing pair; or give one with --blinding-key",
            ) from None
    return ensure_blinding_key(options.out_dir / BLINDING_KEY_NAME)


def with_blinding_key(options: RunOptions) -> RunOptions:
    """``options`` with a fresh blinding key unless one is given (``grader check``: no key is written where it runs)."""
    if options.blinding_key is not None:
        return options
    return dataclasses.replace(options, blinding_key=BlindingKey.generate())
