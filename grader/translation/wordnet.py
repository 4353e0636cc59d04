"""WordNet 3.0 for METEOR, read offline from a folder the grader owns.

METEOR's synonym stage looks words up in WordNet. The grader never downloads
it (``nltk.download`` is never called): ``scripts/setup-wordnet.sh`` builds
``<data root>/corpora/wordnet/`` from Debian's ``wordnet-base`` package, and
:func:`load_wordnet` reads it from there. The data root is, in order: the
``data_root`` argument (``--nltk-data``), ``$GRADER_NLTK_DATA``, or
``~/.cache/grader/nltk_data``. Only that folder is used, so a score does not
depend on whatever else happens to be on NLTK's search path.

NLTK's reader would also like the Open Multilingual Wordnet (``omw``); METEOR
uses English lemmas only, so the reader is built without it.
"""

from __future__ import annotations

import os
import threading
import warnings
from pathlib import Path
from typing import Any

from grader.errors import GraderError

ENV_DATA_ROOT = "GRADER_NLTK_DATA"
SETUP_SCRIPT = "scripts/setup-wordnet.sh"
WORDNET_VERSION = "3.0"

#: every file NLTK's WordNetCorpusReader reads (its ``_FILES``)
REQUIRED_FILES = (
    "lexnames",
    "cntlist.rev",
    "index.sense",
    "index.adj",
    "index.adv",
    "index.noun",
    "index.verb",
    "data.adj",
    "data.adv",
    "data.noun",
    "data.verb",
    "adj.exc",
    "adv.exc",
    "noun.exc",
    "verb.exc",
)

_lock = threading.Lock()
_cache: dict[Path, Any] = {}


class WordNetUnavailable(GraderError):
    """WordNet 3.0 is not installed where the grader reads it (METEOR cannot be computed)."""


def default_data_root() -> Path:
    """``$GRADER_NLTK_DATA`` or ``~/.cache/grader/nltk_data``."""
    configured = os.environ.get(ENV_DATA_ROOT)
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "grader" / "nltk_data"


def wordnet_folder(data_root: str | os.PathLike[str] | None = None) -> Path:
    """``<data root>/corpora/wordnet``."""
    root = Path(data_root).expanduser() if data_root is not None else default_data_root()
    return root / "corpora" / "wordnet"


def _unavailable(folder: Path, what: str) -> WordNetUnavailable:
    return WordNetUnavailable(
        f"WordNet {WORDNET_VERSION} is not usable at {folder}: {what}; METEOR needs it and the grader never downloads it",
        hint=(
            f"run {SETUP_SCRIPT} (installs Debian's wordnet-base and builds <data root>/corpora/wordnet), "
            f"with {ENV_DATA_ROOT} or --nltk-data naming the data root if it is not {default_data_root()}"
        ),
    )


def load_wordnet(data_root: str | os.PathLike[str] | None = None) -> Any:
    """An NLTK ``WordNetCorpusReader`` over ``<data root>/corpora/wordnet`` (cached per folder).

    Raises :class:`WordNetUnavailable` when the folder or one of its files is
    missing, unreadable, or not WordNet 3.0. The data root is put first on
    ``nltk.data.path`` (NLTK refuses to open corpus files outside its path).
    """
    folder = wordnet_folder(data_root)
    try:
        folder = folder.resolve()
    except OSError as exc:
        raise _unavailable(folder, f"cannot resolve the folder ({exc})") from None
    with _lock:
        cached = _cache.get(folder)
        if cached is not None:
            return cached
        if not folder.is_dir():
            raise _unavailable(folder, "the folder does not exist")
        missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
        if missing:
            raise _unavailable(folder, f"missing {', '.join(missing)}")
        import nltk
        from nltk.corpus.reader.wordnet import WordNetCorpusReader
        from nltk.data import FileSystemPathPointer

        root = str(folder.parent.parent)
        if root not in nltk.data.path:
            nltk.data.path.insert(0, root)
        try:
            with warnings.catch_warnings():
                # "The multilingual functions are not available": omw is not needed.
                warnings.simplefilter("ignore")
                reader = WordNetCorpusReader(FileSystemPathPointer(str(folder)), None)
                version = reader.get_version()
        except (OSError, ValueError, LookupError, AssertionError, StopIteration) as exc:
            raise _unavailable(folder, f"unreadable ({type(exc).__name__}: {exc})") from None
        if version != WORDNET_VERSION:
            raise _unavailable(folder, f"data.adj says WordNet {version or 'of no known version'}, not {WORDNET_VERSION}")
        _cache[folder] = reader
        return reader
