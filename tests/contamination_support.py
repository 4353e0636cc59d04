"""A generator of synthetic code for the contamination audit's tests, disjoint from mini's tasks by construction.

mini's tasks all come from Python's standard library, so another of its tasks is no unrelated source. These
functions are built here from a small grammar over made-up identifiers (random consonant-vowel words, which no
standard-library module uses as names), random constants and random comments. :func:`disguised_copy` makes the
copy the issue asks for: every identifier renamed, every comment rewritten, whitespace changed and two adjacent
statements swapped.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_OPS = ["+", "-", "*", "//", "%", "<<", "^", "|", "&"]
_COMPARE = ["<", ">", "<=", ">=", "==", "!="]
_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")
#: The words of the generated Python that are not identifiers (kept by the renaming).
KEYWORDS = frozenset({"return", "range", "while", "for", "if", "in", "def"})


def word(rng: random.Random, syllables: int = 3) -> str:
    """A made-up identifier such as ``kodaveni``."""
    return "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(syllables))


@dataclass(frozen=True)
class Snippet:
    """A generated function: its lines (one top-level statement per group) and the identifiers it uses."""

    name: str
    params: tuple[str, ...]
    statements: tuple[tuple[str, ...], ...]  # each statement: its lines, indented relative to the body
    ret: str
    comments: tuple[str, ...]

    def render(self, indent: str = "    ", comment_every: int = 3) -> str:
        lines = [f"def {self.name}({', '.join(self.params)}):"]
        for position, statement in enumerate(self.statements):
            if self.comments and position % comment_every == 0:
                lines.append(f"{indent}# {self.comments[position % len(self.comments)]}")
            lines.extend(indent + line.replace("    ", indent) for line in statement)
        lines.append(f"{indent}return {self.ret}")
        return "\n".join(lines) + "\n"


def _expr(rng: random.Random, names: list[str], depth: int = 0) -> str:
    choice = rng.random()
    if depth > 1 or choice < 0.3:
        return rng.choice(names) if rng.random() < 0.7 else str(rng.randint(2, 999))
    if choice < 0.65:
        return f"{_expr(rng, names, depth + 1)} {rng.choice(_OPS)} {_expr(rng, names, depth + 1)}"
    if choice < 0.85:
        args = ", ".join(_expr(rng, names, depth + 1) for _ in range(rng.randint(1, 3)))
        return f"{word(rng, 2)}_{word(rng, 2)}({args})"
    return f"{rng.choice(names)}[{rng.randint(0, 9)}]"


def _statement(rng: random.Random, names: list[str]) -> tuple[str, ...]:
    kind = rng.random()
    target = word(rng)
    if kind < 0.45:
        names.append(target)
        return (f"{target} = {_expr(rng, names)}",)
    if kind < 0.6:
        name = rng.choice(names)
        return (f"if {name} {rng.choice(_COMPARE)} {rng.randint(0, 99)}:", f"    {name} = {_expr(rng, names)}")
    if kind < 0.75:
        name = rng.choice(names)
        names.append(target)
        return (f"for {target} in range({rng.randint(2, 64)}):", f"    {name} = {name} {rng.choice(_OPS)} {_expr(rng, names)}")
    if kind < 0.9:
        return (f"{rng.choice(names)}.{word(rng, 2)}({_expr(rng, names)}, {rng.randint(0, 9)})",)
    name = rng.choice(names)
    return (f"while {name} {rng.choice(_COMPARE)} {rng.randint(0, 99)}:", f"    {name} = {name} {rng.choice(_OPS)} {rng.randint(1, 9)}")


def snippet(rng: random.Random, statements: int) -> Snippet:
    """A function of ``statements`` top-level statements (and a return)."""
    params = [word(rng) for _ in range(rng.randint(1, 3))]
    names = list(params)
    body = tuple(_statement(rng, names) for _ in range(statements))
    comments = tuple(" ".join(word(rng, 2) for _ in range(rng.randint(2, 6))) for _ in range(3))
    return Snippet(word(rng), tuple(params), body, rng.choice(names), comments)


def _rename_all(text: str, rng: random.Random) -> str:
    mapping: dict[str, str] = {}

    def fresh(match: re.Match[str]) -> str:
        name = match.group(0)
        if name in KEYWORDS:
            return name
        if name not in mapping:
            mapping[name] = word(rng, 4) + rng.choice(["", "_x", "Q"])
        return mapping[name]

    return _IDENT.sub(fresh, text)


def identifiers(text: str) -> set[str]:
    """The identifiers of a generated text (comments included), keywords left out."""
    return {name for name in _IDENT.findall(text) if name not in KEYWORDS}


def disguised_copy(original: Snippet, rng: random.Random) -> str:
    """``original`` with two adjacent statements swapped, every comment rewritten, whitespace changed and every
    identifier renamed (consistently: the copy still means the same up to the swap)."""
    statements = list(original.statements)
    if len(statements) >= 2:
        position = rng.randrange(len(statements) - 1)
        statements[position], statements[position + 1] = statements[position + 1], statements[position]
    comments = tuple(" ".join(word(rng, 3) for _ in range(rng.randint(1, 8))) for _ in range(4))
    changed = Snippet(original.name, original.params, tuple(statements), original.ret, comments)
    text = changed.render(indent=rng.choice(["  ", "\t", "        "]), comment_every=rng.choice([1, 2, 4]))
    text = text.replace(" = ", rng.choice(["=", "  =  ", " = "])).replace(", ", rng.choice([",", " , ", ",  "]))
    return _rename_all(text, rng)
