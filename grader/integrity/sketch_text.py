"""The texts of a contamination sketch: normalisation version 1, shingles and MinHash signatures.

Both sides of the audit call :func:`sketch_signatures` (``grader sketch-training`` on the participant's texts,
:mod:`grader.integrity.contamination` on a task's test queries and relevant documents), so a text and its copy
meet the same code. docs/contamination.md defines every step; in short:

1. **Comments removed** (why: a copy may rewrite them): ``#`` to the end of the line; ``//`` to the end of the
   line where it starts a line or follows ``;``, ``{`` or ``}`` (so Python's floor division ``a // b`` stays);
   ``/* ... */`` and ``<!-- ... -->`` blocks. Done on both sides alike, so a ``#`` inside a string is dropped
   from both.
2. **Lint's normalisation** (:mod:`grader.integrity.normalise`): NFKC, whitespace collapsed, tokens, code-like
   or not, and the code view (every identifier but a keyword is one placeholder) or the text view.
3. **Windows**: a text of more than :data:`WINDOW_TOKENS` tokens is cut into windows of that many tokens every
   :data:`WINDOW_STRIDE` tokens (the last window ends at the text's end), each sketched on its own, so an item
   copied inside a long file meets a window of its own scale.
4. **Shingles**: runs of ``code_shingle`` (code view) or ``text_shingle`` (text view) tokens, hashed as lint
   hashes them (:func:`grader.integrity.minhash.shingle_hashes`).
5. **Signature**: lint's MinHash (:func:`grader.integrity.minhash.signatures`) under ``num_perm`` permutations
   drawn from ``seed``, each component kept to its low 16 bits (two unrelated minima agree by chance with
   probability 2**-16; the sketch is half the size).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from grader.integrity.minhash import Permutations, shingle_hashes, signatures
from grader.integrity.normalise import TokenCoder, is_code_like, normalised_text, tokens

#: The version of steps 1-4; a sketch of another version is refused (its signatures would mean something else).
NORMALISATION_VERSION = 1
#: Tokens per shingle in the code view (shorter than lint's 10: a copy with two statements swapped must keep
#: most of its shingles even when it is a few lines long).
CODE_SHINGLE = 4
#: Tokens per shingle in the text view.
TEXT_SHINGLE = 3
#: MinHash permutations.
NUM_PERM = 128
#: Seed of the permutations.
SEED = 20261203
#: Longest window, in tokens; longer texts are cut.
WINDOW_TOKENS = 256
#: Fewest tokens of a code-view window that is audited (why: with identifiers collapsed, unrelated snippets
#: shorter than this share most of their shingles, so a copy cannot be told from a look-alike).
MIN_CODE_TOKENS = 40
#: Fewest tokens of a text-view window that is audited.
MIN_TEXT_TOKENS = 8
#: Tokens between the starts of two windows (half a window: any run of up to 128 tokens lies whole in a window).
WINDOW_STRIDE = 128

_COMMENTS = re.compile(r"/\*.*?(?:\*/|\Z)|<!--.*?(?:-->|\Z)|#[^\n]*|(?:^|(?<=[;{}]))[ \t]*//[^\n]*", re.DOTALL | re.MULTILINE)
_LOW16 = np.uint32(0xFFFF)


@dataclass(frozen=True)
class SketchParameters:
    """What a sketch's signatures depend on; recorded in every sketch file."""

    num_perm: int = NUM_PERM
    code_shingle: int = CODE_SHINGLE
    text_shingle: int = TEXT_SHINGLE
    seed: int = SEED
    normalisation: int = NORMALISATION_VERSION
    window_tokens: int = WINDOW_TOKENS
    window_stride: int = WINDOW_STRIDE
    min_code_tokens: int = MIN_CODE_TOKENS
    min_text_tokens: int = MIN_TEXT_TOKENS

    def long_enough(self, code_like: bool, count: int) -> bool:
        """Whether a window of ``count`` tokens of this view is audited."""
        return count >= (self.min_code_tokens if code_like else self.min_text_tokens)


def without_comments(text: str) -> str:
    """``text`` with its comments removed (step 1)."""
    return _COMMENTS.sub(" ", text)


def _windows(codes: list[int], size: int, stride: int) -> Iterator[list[int]]:
    if len(codes) <= size:
        yield codes
        return
    start = 0
    while True:
        if start + size >= len(codes):
            yield codes[len(codes) - size :]
            return
        yield codes[start : start + size]
        start += stride


def text_units(text: str, coder: TokenCoder, parameters: SketchParameters) -> list[tuple[bool, list[int]]]:
    """The audited windows of one text (steps 1-3), each ``(code_like, token integers)``; none when the text is
    shorter than the view's minimum (``min_code_tokens`` or ``min_text_tokens``)."""
    token_list = tokens(normalised_text(without_comments(text)))
    code_like = is_code_like(token_list)
    if not parameters.long_enough(code_like, len(token_list)):
        return []
    codes = coder.encode(token_list, code_like)
    return [(code_like, window) for window in _windows(codes, parameters.window_tokens, parameters.window_stride)]


def unit_signatures(units: list[tuple[bool, list[int]]], permutations: Permutations, parameters: SketchParameters) -> np.ndarray:
    """One 16-bit signature row (uint16) per unit (steps 4-5)."""
    out = np.empty((len(units), len(permutations)), dtype=np.uint16)
    for code_like, size in ((True, parameters.code_shingle), (False, parameters.text_shingle)):
        chosen = [index for index, (unit_code_like, _) in enumerate(units) if unit_code_like == code_like]
        if not chosen:
            continue
        hashes, offsets = shingle_hashes([units[index][1] for index in chosen], size)
        out[chosen] = (signatures(hashes, offsets, permutations) & _LOW16).astype(np.uint16)
    return out


def sketch_signatures(texts: Iterable[str], parameters: SketchParameters, *, batch: int = 2048) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The signatures of every window of ``texts``, in batches: ``(rows, owners)``, ``owners[i]`` the position in
    ``texts`` of the text whose window ``rows[i]`` is (a text without tokens has no row)."""
    permutations = Permutations.make(parameters.num_perm, parameters.seed)
    coder = TokenCoder()
    pending: list[tuple[bool, list[int]]] = []
    owners: list[int] = []
    for index, text in enumerate(texts):
        for unit in text_units(text, coder, parameters):
            pending.append(unit)
            owners.append(index)
        if len(pending) >= batch:
            yield unit_signatures(pending, permutations, parameters), np.asarray(owners, dtype=np.int64)
            pending, owners = [], []
    if pending:
        yield unit_signatures(pending, permutations, parameters), np.asarray(owners, dtype=np.int64)
