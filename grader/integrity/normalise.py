"""Text normalisation for ``grader lint``: the exact-duplicate key, tokens, and the two token views.

Definitions (docs/lint.md, "Normalisation", says the same):

* **Normalised text** (exact duplicates, empty texts, query overlap): the text as an encoder sees it
  (``title + " " + text``, :func:`grader.data.task.document_text`), Unicode NFKC, every run of
  whitespace made one space, leading and trailing space removed. Case is kept.
* **Tokens**: the normalised text cut by :data:`TOKEN_PATTERN` into identifiers/words (a letter or
  ``_`` then letters, digits, ``_``), numbers (a digit then letters, digits, ``_``, ``.``) and
  single symbols (any other non-space character). Language-agnostic: no parser.
* **Code-like**: a text of which at least :data:`CODE_SYMBOL_SHARE` of the tokens are symbols.
* **Code view** (code-like texts): every identifier that is not in :data:`KEYWORDS` becomes one
  placeholder, so a copy with renamed identifiers has the same token sequence; keywords, numbers
  and symbols are kept as they are.
* **Text view** (every other text): words are case-folded and kept, so prose is not collapsed.

Each view's token becomes an unsigned 32-bit integer, the CRC-32 of its UTF-8 bytes with the view's
one-byte prefix (so a placeholder never equals a real token).
"""

from __future__ import annotations

import re
import unicodedata
import zlib

#: One token: a word/identifier, a number, or one symbol.
TOKEN_PATTERN = re.compile(r"[^\W\d]\w*|\d[\w.]*|[^\w\s]")
_WORD_START = re.compile(r"[^\W\d]")

#: A text is code-like when at least this share of its tokens are symbols.
CODE_SYMBOL_SHARE = 0.25

#: Keywords and literal names of the languages in CoIR and CAT (Python, Java, JavaScript/TypeScript, Go,
#: Ruby, PHP, C, C++, C#, Rust, SQL), kept by the code view. Compared case-sensitively; SQL's are listed in
#: lower and upper case.
_KEYWORDS_TEXT = """
False None True and as assert async await break class continue def del elif else except finally for from
global if import in is lambda nonlocal not or pass raise return try while with yield match case self cls
abstract boolean byte char double enum extends final float implements instanceof int interface long native new
package private protected public short static strictfp super switch synchronized this throw throws transient
void volatile var let const function typeof undefined null true false of delete debugger export default
extends get set func go chan defer fallthrough goto map range select struct type begin end elsif unless until
then when do module nil redo rescue retry ensure alias defined echo foreach endforeach endif endwhile array
isset unset list print require require_once include include_once namespace use trait callable insteadof
auto register signed unsigned sizeof typedef union extern inline restrict bool string object virtual template
typename operator friend explicit mutable override nullptr constexpr noexcept decltype static_cast
dynamic_cast reinterpret_cast const_cast using delegate event internal sealed readonly ref out params base
checked unchecked fixed lock implicit decimal sbyte uint ulong ushort fn impl mut pub crate mod loop move
where dyn unsafe Self
"""
_SQL_KEYWORDS_TEXT = """
select from where insert into values update delete create table drop alter join inner left right outer on
group by order having limit offset union all distinct and or not null is like between exists as case when
then else end primary key foreign references index view
"""
KEYWORDS = frozenset(_KEYWORDS_TEXT.split()) | frozenset(_SQL_KEYWORDS_TEXT.split()) | frozenset(_SQL_KEYWORDS_TEXT.upper().split())

_CODE_PREFIX = b"c"
_TEXT_PREFIX = b"t"
PLACEHOLDER = 0xFFFFFFFF & zlib.crc32(_CODE_PREFIX + b"\x00identifier")


def normalised_text(text: str) -> str:
    """NFKC, whitespace runs made one space, stripped."""
    return " ".join(unicodedata.normalize("NFKC", text).split())


def tokens(normalised: str) -> list[str]:
    """The tokens of a normalised text."""
    return TOKEN_PATTERN.findall(normalised)


def is_code_like(token_list: list[str]) -> bool:
    """Whether at least :data:`CODE_SYMBOL_SHARE` of the tokens are symbols (a one-character token that is not a word or digit)."""
    if not token_list:
        return False
    symbols = sum(1 for token in token_list if len(token) == 1 and not token.isalnum() and token != "_")
    return symbols >= CODE_SYMBOL_SHARE * len(token_list)


class _CodeCodes(dict[str, int]):
    """Token -> its code-view integer, computed on first sight."""

    def __missing__(self, token: str) -> int:
        if _WORD_START.match(token) and token not in KEYWORDS:
            code = PLACEHOLDER
        else:
            code = zlib.crc32(_CODE_PREFIX + token.encode("utf-8", "surrogatepass"))
        self[token] = code
        return code


class _TextCodes(dict[str, int]):
    """Token -> its text-view integer (case-folded), computed on first sight."""

    def __missing__(self, token: str) -> int:
        code = zlib.crc32(_TEXT_PREFIX + token.casefold().encode("utf-8", "surrogatepass"))
        self[token] = code
        return code


class TokenCoder:
    """Maps a text's tokens to the integers of its view. The memo is only a cache: it is cleared when large."""

    #: Distinct tokens remembered per view before the memo is cleared (bounds memory on huge vocabularies).
    MEMO_LIMIT = 1 << 20

    def __init__(self) -> None:
        self._code = _CodeCodes()
        self._text = _TextCodes()

    def encode(self, token_list: list[str], code_like: bool) -> list[int]:
        """The view's integers of ``token_list``."""
        memo: dict[str, int] = self._code if code_like else self._text
        if len(memo) > self.MEMO_LIMIT:
            memo.clear()
        return list(map(memo.__getitem__, token_list))
