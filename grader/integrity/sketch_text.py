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
   copied inside a long file meets a window of its own scale. A code-view *training* text that long is also cut
   into fine windows (:data:`FINE_WINDOW_TOKENS` every :data:`FINE_WINDOW_STRIDE`; version 2), for items of
   about 70 tokens copied inside it; a test item is never cut finer.
4. **Shingles**: runs of ``code_shingle`` (code view) or ``text_shingle`` (text view) tokens, hashed as lint
   hashes them (:func:`grader.integrity.minhash.shingle_hashes`).
5. **Signature**: lint's MinHash (:func:`grader.integrity.minhash.signatures`) under ``num_perm`` permutations
   drawn from ``seed``, each component kept to its low 16 bits (two unrelated minima agree by chance with
   probability 2**-16; the sketch is half the size).
6. **Statement sets** (normalisation version 2), for short code: a code-like test item of fewer than
   ``min_code_tokens`` tokens, too short for its shingles to tell a copy from a look-alike, is sketched instead
   as the set of its **statements** (:func:`statement_features`), and every code-like training text of at most
   :data:`STATEMENT_MAX_TOKENS` tokens gets such a row too, beside its windows. The features keep what renaming
   and reordering cannot change: each statement (a line, or lines joined while a bracket is open, cut at ``;``)
   with its identifiers numbered by first occurrence within it (``v0 = v1[7]``), and each identifier's
   **profile**, the sorted list of the (statement, place) pairs where it occurs, which records the data flow
   between statements whatever their order. Feature hashes live in their own space (BLAKE2b with a salt), so a
   statement row never meets a window.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from grader.integrity.minhash import Permutations, shingle_hashes, signatures
from grader.integrity.normalise import KEYWORDS, TokenCoder, is_code_like, normalised_text, tokens

#: The version of steps 1-6; a sketch of another version is refused (its signatures would mean something else).
#: Version 2 added fine windows (step 3) and statement sets for short code (step 6).
NORMALISATION_VERSION = 2
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
#: Tokens of a **fine** window: a code-view training text longer than :data:`WINDOW_TOKENS` is also cut into
#: fine windows (step 3), so that an item of about 70 tokens (six statements) copied inside a long file fills
#: enough of one to be found.
FINE_WINDOW_TOKENS = 80
#: Tokens between the starts of two fine windows.
FINE_WINDOW_STRIDE = 40
#: Most code tokens of a training text that gets a statement-set row (step 6) beside its windows: above the
#: audited items' :data:`MIN_CODE_TOKENS`, so a copy that gained a few tokens is still sketched as statements.
STATEMENT_MAX_TOKENS = 64
#: Fewest statements of a text sketched as a statement set: a function header alone, or a header and one
#: statement, matches too many look-alikes (on mini, truncated functions whose body is only comments).
STATEMENT_MIN = 3

_COMMENTS = re.compile(r"/\*.*?(?:\*/|\Z)|<!--.*?(?:-->|\Z)|#[^\n]*|(?:^|(?<=[;{}]))[ \t]*//[^\n]*", re.DOTALL | re.MULTILINE)
_LOW16 = np.uint32(0xFFFF)
_OPENERS = frozenset("([")
_CLOSERS = frozenset(")]")
_WORD_START = re.compile(r"[^\W\d]")
_STATEMENT_SALT = b"grader-stmt-v2"
#: A unit's kind (:func:`text_units`): a window of the code view, a window of the text view, a statement set.
CODE_WINDOW, TEXT_WINDOW, STATEMENTS = 0, 1, 2


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
    fine_window_tokens: int = FINE_WINDOW_TOKENS
    fine_window_stride: int = FINE_WINDOW_STRIDE
    statement_max_tokens: int = STATEMENT_MAX_TOKENS
    statement_min: int = STATEMENT_MIN

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


def _statements(text: str) -> Iterator[list[str]]:
    """The statements of ``text`` (comments removed), each its tokens: a line ends one unless a ``(`` or ``[``
    is still open (a call wrapped over lines is one statement), and so does a ``;`` outside brackets."""
    current: list[str] = []
    depth = 0
    for line in text.split("\n"):
        for token in tokens(normalised_text(line)):
            if token == ";" and depth == 0:
                if current:
                    yield current
                current = []
                continue
            current.append(token)
            if token in _OPENERS:
                depth += 1
            elif token in _CLOSERS:
                depth = max(0, depth - 1)
        if depth == 0 and current:
            yield current
            current = []
    if current:
        yield current


def statement_features(text: str, least: int = 1) -> list[int]:
    """The distinct statement-set features of ``text`` (its comments already removed; step 6), 64-bit hashes.

    A statement (:func:`_statements`) is a line, or lines joined while a ``(`` or ``[`` is open, cut at ``;``
    outside brackets; its **shape** is its tokens with every identifier but a keyword replaced by its number of
    first occurrence in the statement. The features are each shape (a shape seen again counted apart) and each
    identifier's **profile**, the sorted (shape, number) pairs of its occurrences across the text (two
    identifiers with the same profile counted apart). Renaming identifiers, changing whitespace and comments,
    and reordering statements change none of them. A text of fewer than ``least`` statements has none (too
    little to tell a copy from a look-alike)."""
    shapes: list[str] = []
    profiles: dict[str, list[tuple[str, int]]] = {}
    for token_list in _statements(text):
        numbers: dict[str, int] = {}
        shape = []
        for token in token_list:
            if _WORD_START.match(token) and token not in KEYWORDS:
                shape.append(f"\x00{numbers.setdefault(token, len(numbers))}")
            else:
                shape.append(token)
        joined = " ".join(shape)
        shapes.append(joined)
        for name, number in numbers.items():
            profiles.setdefault(name, []).append((joined, number))
    if len(shapes) < least:
        return []
    keys = [("s", shape) for shape in shapes]
    keys += [("p", "\x01".join(f"{shape}\x02{number}" for shape, number in sorted(profile))) for profile in profiles.values()]
    seen: dict[tuple[str, str], int] = {}
    features = set()
    for key in keys:
        seen[key] = seen.get(key, 0) + 1
        payload = f"{key[0]}{seen[key]}\x03{key[1]}".encode("utf-8", "surrogatepass")
        features.add(int.from_bytes(hashlib.blake2b(payload, digest_size=8, person=_STATEMENT_SALT).digest(), "big"))
    return sorted(features)


def text_units(text: str, coder: TokenCoder, parameters: SketchParameters, *, training: bool) -> list[tuple[int, list[int]]]:
    """The units of one text, each ``(kind, integers)``: its audited windows (steps 1-3; kind :data:`CODE_WINDOW`
    or :data:`TEXT_WINDOW`, token integers), none when the text is shorter than the view's minimum
    (``min_code_tokens`` or ``min_text_tokens``), and on the ``training`` side a code-view text longer than a
    window also cut into fine windows; and its statement set (step 6; kind :data:`STATEMENTS`,
    feature hashes): on the ``training`` side for a code-like text of at most :data:`STATEMENT_MAX_TOKENS`
    tokens, on the test side for a code-like text too short for windows; either only with at least
    :data:`STATEMENT_MIN` statements (the limits are the ``parameters``' ``statement_max_tokens`` and
    ``statement_min``; ``statement_min`` 0, a version-1 sketch's, means no statement sets on either side)."""
    plain = without_comments(text)
    token_list = tokens(normalised_text(plain))
    code_like = is_code_like(token_list)
    units: list[tuple[int, list[int]]] = []
    if parameters.long_enough(code_like, len(token_list)):
        codes = coder.encode(token_list, code_like)
        kind = CODE_WINDOW if code_like else TEXT_WINDOW
        units = [(kind, window) for window in _windows(codes, parameters.window_tokens, parameters.window_stride)]
        if training and code_like and parameters.fine_window_tokens and len(codes) > parameters.window_tokens:
            units += [(kind, window) for window in _windows(codes, parameters.fine_window_tokens, parameters.fine_window_stride)]
    if parameters.statement_min and code_like and (len(token_list) <= parameters.statement_max_tokens if training else not units):
        features = statement_features(plain, parameters.statement_min)
        if features:
            units.append((STATEMENTS, features))
    return units


def unit_signatures(units: list[tuple[int, list[int]]], permutations: Permutations, parameters: SketchParameters) -> np.ndarray:
    """One 16-bit signature row (uint16) per unit (steps 4-6)."""
    out = np.empty((len(units), len(permutations)), dtype=np.uint16)
    for kind in (CODE_WINDOW, TEXT_WINDOW, STATEMENTS):
        chosen = [index for index, (unit_kind, _) in enumerate(units) if unit_kind == kind]
        if not chosen:
            continue
        if kind == STATEMENTS:
            lengths = [len(units[index][1]) for index in chosen]
            hashes = np.fromiter((value for index in chosen for value in units[index][1]), dtype=np.uint64, count=sum(lengths))
            offsets = np.zeros(len(chosen) + 1, dtype=np.int64)
            np.cumsum(lengths, out=offsets[1:])
        else:
            hashes, offsets = shingle_hashes(
                [units[index][1] for index in chosen], parameters.code_shingle if kind == CODE_WINDOW else parameters.text_shingle
            )
        out[chosen] = (signatures(hashes, offsets, permutations) & _LOW16).astype(np.uint16)
    return out


@dataclass(frozen=True)
class SignatureBatch:
    """Signature rows of some texts' units: ``owners[i]`` is the position of the text whose unit ``rows[i]`` is,
    ``statements[i]`` whether that unit is a statement set (step 6) rather than a window."""

    rows: np.ndarray
    owners: np.ndarray
    statements: np.ndarray


def sketch_signatures(texts: Iterable[str], parameters: SketchParameters, *, training: bool, batch: int = 2048) -> Iterator[SignatureBatch]:
    """The signatures of every unit of ``texts`` (:func:`text_units`, on the ``training`` side or the test side),
    in batches (a text without units has no row)."""
    permutations = Permutations.make(parameters.num_perm, parameters.seed)
    coder = TokenCoder()
    pending: list[tuple[int, list[int]]] = []
    owners: list[int] = []

    def done() -> SignatureBatch:
        kinds = np.fromiter((kind for kind, _ in pending), dtype=np.int64, count=len(pending))
        return SignatureBatch(unit_signatures(pending, permutations, parameters), np.asarray(owners, dtype=np.int64), kinds == STATEMENTS)

    for index, text in enumerate(texts):
        for unit in text_units(text, coder, parameters, training=training):
            pending.append(unit)
            owners.append(index)
        if len(pending) >= batch:
            yield done()
            pending, owners = [], []
    if pending:
        yield done()
