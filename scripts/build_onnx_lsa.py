"""Build ``submissions_example/onnx-lsa``: a small, real ONNX encoder trained on ``mini``'s train split.

The model is latent semantic analysis (LSA) over BPE tokens, packed as a token
lookup table so the grader's mean pooling turns it into a text encoder:

1. A BPE tokenizer (lower-cased, split on whitespace, punctuation and digit
   runs, so ``snake_case`` names fall apart into words) is trained on the
   training texts.
2. Every training pair (a train query and its relevant document) becomes one
   LSA "document" holding both texts: tokens of a docstring summary then
   co-occur with the tokens of its code, which is what ties the vocabularies of
   the text and code sides together (cross-language LSI). Weights are sublinear
   TF times smoothed IDF, rows L2-normalised.
3. A truncated eigendecomposition of the token Gram matrix gives the LSA token
   basis ``U_k`` and singular values ``S_k``. The table row of token ``t`` is
   ``idf(t) * U_k[t] * S_k**-0.5``, so the masked mean over a text's tokens is,
   up to scale, its TF-IDF vector projected on the LSA basis (halfway between
   the plain projection and the classic ``S^-1`` fold-in; chosen on the dev
   split). Tokens never seen in training get a zero row.
4. The ONNX graph is a single ``Gather(table, input_ids)`` whose output
   ``last_hidden_state`` is (batch, tokens, dim); the grader pools and normalises.

Only the train split is used: the train pairs of all three tasks. ``mini``'s
tasks share their functions (the code of a text2code document is a code2text
query, and code2code's pairs are its halves), and ``mini`` splits by function,
so no train pair of one task holds a function that is dev or test in another.
A defensive check confirms it: a train pair whose function appears among any
task's held-out queries or documents (the texts the train judgements do not
name; dev and test judgements are never read) stops the build. Version 1 of
``mini`` split each task on its own, and this check found about half of its
train pairs leaking.

The build is deterministic: the tokenizer trainer runs single-threaded, BLAS
runs single-threaded, eigenvector signs are fixed by rule, and the table is
rounded to a power-of-two grid so that last-bit differences between BLAS
kernels do not reach the stored bytes. Rebuilding gives byte-identical files.

Usage:

    python scripts/build_onnx_lsa.py [--out submissions_example/onnx-lsa]
"""

from __future__ import annotations

import os

# Set before tokenizers and numpy load: their thread pools read these once.
# One thread makes the BPE trainer and BLAS reductions run in a fixed order.
for _name in ("RAYON_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import bisect  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.data.registry import resolve_benchmark  # noqa: E402
from grader.data.task import Task, document_text  # noqa: E402
from grader.files import atomic_write_bytes, atomic_write_text, sha256_file  # noqa: E402

DEFAULT_OUT = ROOT / "submissions_example" / "onnx-lsa"
BENCHMARK = "mini"
TRAIN_SPLIT = "train"

# Sizes and weights, chosen on mini's dev split under a ~4 MB budget for the
# float32 table (vocab x dim x 4 bytes): a small vocabulary with many LSA
# dimensions beat a large vocabulary with few (all else equal, text2code dev
# NDCG@10 was 0.16 at 8,000 x 120 and 0.31 at 3,000 x 320), and sublinear TF
# with S^-0.5 beat raw TF with S^0 or S^+0.5. The README has the table.
VOCAB_SIZE = 2000
DIMENSION = 384
MIN_FREQUENCY = 2
SINGULAR_POWER = -0.5
MAX_LENGTH = 256
# Table values are rounded to multiples of 2**-GRID_BITS of the table's largest
# power-of-two magnitude: coarse enough that BLAS rounding noise (~1e-12
# relative) practically never crosses a grid boundary, fine enough (2.4e-4 of
# the largest entry) not to change rankings (dev scores did not move).
GRID_BITS = 12
SPECIAL_TOKENS = ("[PAD]", "[UNK]")
GRAM_BLOCK = 1024

NAME = "lsa-bpe-mini"
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
MANIFEST_FILE = "submission.json"
BUILT_FILES = (TOKENIZER_FILE, MODEL_FILE, MANIFEST_FILE)

# --------------------------------------------------------------------------
# Which function a text belongs to (for the cross-task leak check)

# The part of a function each task's queries and documents hold:
#   "summary"   the first paragraph of its docstring (text2code queries),
#   "docstring" the whole docstring (code2text documents),
#   "code"      its code without the docstring (text2code documents, code2text queries),
#   "head"      the first half of that code (code2code queries),
#   None        nothing that names the function on its own (code2code documents,
#               second halves; the query of the same pair always names it).
Role = str | None
TASK_ROLES: dict[str, tuple[Role, Role]] = {
    "text2code": ("summary", "code"),
    "code2code": ("head", None),
    "code2text": ("code", "docstring"),
}
# Heads are bucketed by their first characters, so matching a code against
# every held-out head is a dict lookup plus a few prefix tests.
HEAD_BUCKET = 32


def _collapse(text: str) -> str:
    # Whitespace-insensitive: code2code queries keep indentation the other tasks dedent.
    return " ".join(text.split())


def _summary(text: str) -> str:
    """The first paragraph with whitespace collapsed: a text2code query is exactly this of its docstring."""
    return _collapse(re.split(r"\n\s*\n", text.strip(), maxsplit=1)[0])


class HeldOut:
    """The functions of held-out texts, to test whether a training text shares one.

    Two texts share a function when their summaries are equal, their codes are
    equal, or one's head is a prefix of the other's code. A different function
    that happens to match (same first lines, same summary) counts as held out
    too: the check errs on the side of flagging.
    """

    def __init__(self) -> None:
        self._summaries: set[str] = set()
        self._codes: list[str] = []
        self._heads: dict[str, list[str]] = {}
        self._short_heads: list[str] = []
        self._sorted = True

    def add(self, role: Role, text: str) -> None:
        if role in ("summary", "docstring"):
            self._summaries.add(_summary(text))
        elif role == "code":
            self._codes.append(_collapse(text))
            self._sorted = False
        elif role == "head":
            head = _collapse(text)
            if len(head) >= HEAD_BUCKET:
                self._heads.setdefault(head[:HEAD_BUCKET], []).append(head)
            else:
                self._short_heads.append(head)

    def touches(self, role: Role, text: str) -> bool:
        """Does ``text`` (in ``role``) share its function with a held-out text?"""
        if role in ("summary", "docstring"):
            return _summary(text) in self._summaries
        if role == "code":
            code = _collapse(text)
            heads = self._heads.get(code[:HEAD_BUCKET], []) + self._short_heads
            return self._has_code(code, exact=True) or any(code.startswith(head) for head in heads)
        if role == "head":
            return self._has_code(_collapse(text), exact=False)
        return False

    def _has_code(self, text: str, *, exact: bool) -> bool:
        """Is ``text`` a held-out code (``exact``) or a prefix of one?"""
        if not self._sorted:
            self._codes.sort()
            self._sorted = True
        # Codes starting with ``text`` sort right at or after it.
        index = bisect.bisect_left(self._codes, text)
        if index == len(self._codes):
            return False
        found = self._codes[index]
        return found == text if exact else found.startswith(text)


@dataclass(frozen=True)
class TrainingData:
    """The train pairs, per task in benchmark order, and those whose function is held out in some task."""

    pairs: dict[str, list[tuple[str, str]]]
    leaking: dict[str, list[tuple[str, str]]]


def load_training_data(tasks: Sequence[tuple[str, Task]]) -> TrainingData:
    """Train pairs of every task, and among them those whose function is held out in any task."""
    held_out = HeldOut()
    candidates: dict[str, list[tuple[str, str]]] = {}
    for name, task in tasks:
        if name not in TASK_ROLES:
            raise SystemExit(f"task {name!r} has no leak-check roles; this script knows {sorted(TASK_ROLES)}")
        query_role, doc_role = TASK_ROLES[name]
        judgements = task.qrels(TRAIN_SPLIT)
        relevant = {doc for query in judgements for doc in judgements[query]}
        queries = {query.id: query.text for query in task.iter_queries()}
        documents = {doc.id: document_text(doc.title, doc.text) for doc in task.iter_corpus()}
        # Held out = everything the train judgements do not name (dev and test alike).
        for qid, text in queries.items():
            if qid not in judgements:
                held_out.add(query_role, text)
        for did, text in documents.items():
            if did not in relevant:
                held_out.add(doc_role, text)
        candidates[name] = [(queries[qid], documents[did]) for qid in judgements for did in sorted(judgements[qid])]
    leaking = {}
    for name, rows in candidates.items():
        query_role, doc_role = TASK_ROLES[name]
        leaking[name] = [(q, d) for q, d in rows if held_out.touches(query_role, q) or held_out.touches(doc_role, d)]
    return TrainingData(candidates, leaking)


# --------------------------------------------------------------------------
# Tokenizer


def train_tokenizer(texts: Sequence[str]) -> Tokenizer:
    """BPE over lower-cased text pre-split on whitespace, punctuation (``_`` included) and digit runs."""
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Punctuation("isolated"),
            pre_tokenizers.Digits(individual_digits=False),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=MIN_FREQUENCY,
        special_tokens=list(SPECIAL_TOKENS),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


# --------------------------------------------------------------------------
# LSA


def tfidf_rows(token_lists: Sequence[np.ndarray], vocab: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Sparse TF-IDF rows (COO: row, column, weight) and the IDF of every token.

    TF is sublinear (1 + log count); IDF is smoothed, ``log((n+1)/(df+1)) + 1``,
    and 0 for tokens in no document and for the special tokens, so they embed
    to zero. Rows are L2-normalised so long code does not dominate the basis.
    """
    rows, cols, counts = [], [], []
    for index, ids in enumerate(token_lists):
        unique, count = np.unique(ids, return_counts=True)
        rows.append(np.full(len(unique), index, dtype=np.int64))
        cols.append(unique.astype(np.int64))
        counts.append(count.astype(np.float64))
    row, col, count = np.concatenate(rows), np.concatenate(cols), np.concatenate(counts)
    n = len(token_lists)
    df = np.bincount(col, minlength=vocab)
    idf = np.where(df > 0, np.log((n + 1) / (df + 1)) + 1.0, 0.0)
    idf[: len(SPECIAL_TOKENS)] = 0.0
    weight = (1.0 + np.log(count)) * idf[col]
    norms = np.sqrt(np.bincount(row, weights=weight * weight, minlength=n))
    weight = weight / np.maximum(norms[row], 1e-12)
    return row, col, weight, idf


def lsa_basis(row: np.ndarray, col: np.ndarray, weight: np.ndarray, n_rows: int, vocab: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` eigenpairs of the token Gram matrix ``A^T A`` (= right singular vectors and squared singular values of A).

    The vocabulary is small, so an exact dense eigendecomposition is cheaper and
    more reproducible than a randomized SVD. Each eigenvector's sign is fixed so
    that its largest-magnitude entry is positive.
    """
    gram = np.zeros((vocab, vocab))
    for start in range(0, n_rows, GRAM_BLOCK):
        inside = (row >= start) & (row < start + GRAM_BLOCK)
        block = np.zeros((min(GRAM_BLOCK, n_rows - start), vocab))
        block[row[inside] - start, col[inside]] = weight[inside]
        gram += block.T @ block
    eigenvalues, eigenvectors = np.linalg.eigh(gram)
    top = np.argsort(eigenvalues, kind="stable")[::-1][:k]
    singular = np.sqrt(np.maximum(eigenvalues[top], 0.0))
    basis = eigenvectors[:, top]
    pivots = np.argmax(np.abs(basis), axis=0)
    basis = basis * np.sign(basis[pivots, np.arange(k)])[None, :]
    return basis, singular


def quantize(table: np.ndarray) -> np.ndarray:
    """Round to multiples of ``2**(e - GRID_BITS)``, where ``2**e <= max|table| < 2**(e+1)``; exact in float32."""
    largest = float(np.max(np.abs(table)))
    exponent = int(np.floor(np.log2(largest)))
    step = 2.0 ** (exponent - GRID_BITS)
    # "+ 0.0" turns -0.0 into 0.0: which tiny values round to a signed zero
    # depends on the BLAS kernel, and the sign bit would change the bytes.
    return (np.round(table / step) * step + 0.0).astype(np.float32)


def token_table(tokenizer: Tokenizer, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
    """The (vocab, DIMENSION) float32 table: ``idf * U_k * S_k**SINGULAR_POWER``, quantised."""
    vocab = tokenizer.get_vocab_size()
    tokenizer.no_truncation()
    tokenizer.no_padding()
    queries = tokenizer.encode_batch([q for q, _ in pairs])
    documents = tokenizer.encode_batch([d for _, d in pairs])
    # One LSA document per pair: the query's tokens followed by its document's.
    token_lists = [np.array(q.ids + d.ids, dtype=np.int64) for q, d in zip(queries, documents)]
    row, col, weight, idf = tfidf_rows(token_lists, vocab)
    basis, singular = lsa_basis(row, col, weight, len(token_lists), vocab, DIMENSION)
    table = idf[:, None] * basis * (singular**SINGULAR_POWER)[None, :]
    return quantize(table)


# --------------------------------------------------------------------------
# Outputs


def onnx_model(table: np.ndarray) -> bytes:
    """``last_hidden_state = Gather(table, input_ids)``; ``attention_mask`` is accepted and left to the grader's pooling."""
    node = helper.make_node("Gather", ["table", "input_ids"], ["last_hidden_state"], axis=0, name="token_lookup")
    inputs = [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "tokens"]) for name in ("input_ids", "attention_mask")]
    output = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "tokens", table.shape[1]])
    graph = helper.make_graph([node], "lsa_bpe_mini", inputs, [output], initializer=[numpy_helper.from_array(table, "table")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="grader scripts/build_onnx_lsa.py")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def manifest_text() -> str:
    """``submission.json``, with a fixed key order and a final newline."""
    manifest = {
        "kind": "onnx",
        "name": NAME,
        "description": (
            f"LSA over BPE tokens ({VOCAB_SIZE} tokens, {DIMENSION} dimensions) trained on mini's train split "
            "(all three tasks); a token lookup table, mean-pooled and normalised by the grader. "
            "Built by scripts/build_onnx_lsa.py."
        ),
        "model": MODEL_FILE,
        "tokenizer": TOKENIZER_FILE,
        "max_length": MAX_LENGTH,
        "pooling": "mean",
        "normalize": True,
        "output": "last_hidden_state",
        "training": {"setting": "fine-tuned", "datasets": [f"{BENCHMARK}/{TRAIN_SPLIT}"]},
    }
    return json.dumps(manifest, indent=2) + "\n"


def build(out: Path) -> dict[str, str]:
    """Write the tokenizer, the model and the manifest into ``out``; return their sha256 by name."""
    benchmark = resolve_benchmark(BENCHMARK)
    tasks = [(name, benchmark.task(name)) for name in benchmark.spec.tasks]
    data = load_training_data(tasks)
    for name, _ in tasks:
        print(f"{name}: {len(data.pairs[name])} train pairs, {len(data.leaking[name])} with a function held out in some task", file=sys.stderr)
    leaking = sum(len(rows) for rows in data.leaking.values())
    if leaking:
        # mini splits by function, so this means the bundled data regressed:
        # refuse to train on test answers rather than quietly filter them.
        example = next(pair for rows in data.leaking.values() for pair in rows)
        raise SystemExit(
            f"build_onnx_lsa: {leaking} train pairs share a function with {BENCHMARK}'s dev or test splits "
            f"(e.g. query {example[0][:80]!r}); rebuild it with scripts/build_mini.py"
        )
    pairs = [pair for name, _ in tasks for pair in data.pairs[name]]
    tokenizer = train_tokenizer([text for pair in pairs for text in pair])
    table = token_table(tokenizer, pairs)
    out.mkdir(parents=True, exist_ok=True)
    # Tokenizer.to_str puts no truncation or padding in the file (cleared above; the grader sets its own).
    atomic_write_text(out / TOKENIZER_FILE, tokenizer.to_str(pretty=True) + "\n", mode=0o644)
    atomic_write_bytes(out / MODEL_FILE, onnx_model(table), mode=0o644)
    atomic_write_text(out / MANIFEST_FILE, manifest_text(), mode=0o644)
    return {name: sha256_file(out / name) for name in BUILT_FILES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default: {DEFAULT_OUT.relative_to(ROOT)})")
    args = parser.parse_args()
    started = time.perf_counter()
    digests = build(args.out)
    for name, digest in digests.items():
        size = (args.out / name).stat().st_size
        print(f"{digest}  {name}  ({size:,} bytes)")
    print(f"built {args.out} in {time.perf_counter() - started:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
