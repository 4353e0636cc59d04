"""Measures as values: ``NDCG@10`` is the family ``NDCG`` with cutoff 10.

The printed form is the identity. trec_eval's names (``ndcg_cut_10``,
``map_cut_10``, ``recall_10``, ``P_10``, ``success_10``) parse to the same values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from grader.errors import UsageError


class Family(str, Enum):
    """A measure family; its value is the canonical spelling."""

    NDCG = "NDCG"
    MAP = "MAP"
    RECALL = "Recall"
    P = "P"
    MRR = "MRR"
    SUCCESS = "Success"
    RPREC = "Rprec"
    BPREF = "bpref"


DEFAULT_CUTOFFS = (1, 3, 5, 10, 100, 1000)
#: The families measured when none are named: the five CoIR and BEIR report (Success, Rprec and bpref are asked for by name).
DEFAULT_FAMILIES = (Family.NDCG, Family.MAP, Family.RECALL, Family.P, Family.MRR)

#: The canonical spelling of a measure, as a regular expression. The JSON Schemas that name measures
#: (benchmark.schema.json, report.schema.json) carry this same pattern; tests/test_measures_as_data.py checks.
MEASURE_PATTERN = "^(" + "|".join(family.value for family in Family) + ")@[1-9][0-9]*$"
_CANONICAL = re.compile(r"^(?P<family>" + "|".join(family.value for family in Family) + r")@(?P<k>[1-9][0-9]*)$", re.IGNORECASE)
_TREC = re.compile(r"^(?P<family>ndcg_cut|map_cut|recall|P|success)_(?P<k>[1-9][0-9]*)$")
_BY_LOWER = {family.value.lower(): family for family in Family}
_BY_TREC = {"ndcg_cut": Family.NDCG, "map_cut": Family.MAP, "recall": Family.RECALL, "P": Family.P, "success": Family.SUCCESS}
_TREC_NAME = {Family.NDCG: "ndcg_cut", Family.MAP: "map_cut", Family.RECALL: "recall", Family.P: "P", Family.SUCCESS: "success"}


@dataclass(frozen=True, order=True)
class Measure:
    """One measure at one cutoff."""

    family: Family
    cutoff: int

    def __str__(self) -> str:
        return f"{self.family.value}@{self.cutoff}"

    @property
    def trec_name(self) -> str | None:
        """trec_eval's name of this measure; MRR@k, Rprec@k and bpref@k have none (trec_eval's recip_rank, Rprec and bpref are uncut)."""
        base = _TREC_NAME.get(self.family)
        return None if base is None else f"{base}_{self.cutoff}"


def parse_measure(text: str) -> Measure:
    """Parse ``NDCG@10`` (any case) or a trec_eval name such as ``ndcg_cut_10``."""
    match = _CANONICAL.match(text.strip())
    if match:
        return Measure(_BY_LOWER[match["family"].lower()], int(match["k"]))
    match = _TREC.match(text.strip())
    if match:
        return Measure(_BY_TREC[match["family"]], int(match["k"]))
    raise UsageError(
        f"unknown measure {text!r}",
        hint="use FAMILY@K with FAMILY one of " + ", ".join(family.value for family in Family) + " (e.g. NDCG@10)",
    )


_PRINTED = re.compile(MEASURE_PATTERN)


def printed_measure(text: str) -> Measure | None:
    """The measure whose printed form ``text`` is, exactly (``NDCG@10``, as reports and benchmark files spell it), or None.

    Unlike :func:`parse_measure`, which reads what a person types (any case, trec_eval's names)
    and refuses the rest, this reads keys a file holds and says "not a measure" without raising.
    """
    if _PRINTED.match(text) is None:
        return None
    family, _, cutoff = text.partition("@")
    return Measure(Family(family), int(cutoff))


def default_measures() -> tuple[Measure, ...]:
    """Each default family at each of the default cutoffs 1, 3, 5, 10, 100, 1000."""
    return tuple(Measure(family, k) for family in DEFAULT_FAMILIES for k in DEFAULT_CUTOFFS)


def parse_measures(texts: list[str] | tuple[str, ...] | None) -> tuple[Measure, ...]:
    """Parse a list of measures (``None`` or empty = the defaults), without duplicates, in given order."""
    if not texts:
        return default_measures()
    measures: list[Measure] = []
    for text in texts:
        for part in text.split(","):
            if part.strip():
                measure = parse_measure(part)
                if measure not in measures:
                    measures.append(measure)
    return tuple(measures)
