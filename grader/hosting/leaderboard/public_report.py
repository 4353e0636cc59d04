"""The report a participant downloads before the end: the public part alone, signed by the host on the server.

A full report minus a public one would give the private score away, so before
the end only this one leaves the server. It is a valid grader report (``grader
verify`` checks it): the primary measure per task and the aggregate over the
public queries, no per-query values, no other measure, and ``labels.part``
naming the part, its fraction and the partition commitment.
"""

from __future__ import annotations

import copy
from typing import Any

from grader.hosting.leaderboard.values import SignedValues, part_values, partitions
from grader.hosting.visibility import Part
from grader.stats.aggregate import ScoreTable


def public_part_report(signed: SignedValues, secret: bytes, fraction: float, commitment: str) -> dict[str, Any]:
    """The public-part report derived from a verified full report (not signed here)."""
    parts = partitions(secret, signed.values, fraction)
    values = part_values(signed.values, parts, Part.PUBLIC)
    table = ScoreTable.from_values(["entry"], signed.measure, [values], signed.groups)
    # published numbers are rounded to 4 decimals until the end, in the report too
    means = {task: round(mean, 4) for task, mean in table.leaf_means(0).items()}
    report = copy.deepcopy(signed.report)
    for name, task in report["tasks"].items():
        task.pop("per_query", None)
        if name in means:
            task["measures"] = {signed.measure: means[name]}
            # judged: the public part's size; answered/missing/extra stay those of the whole run
            task["queries"]["judged"] = len(values[name])
        else:
            task["measures"] = {}
    report["aggregate"] = table.layout.spec(signed.measure).aggregate(means)
    report["aggregate"]["score"] = round(table.score(0), 4)
    report["aggregate"]["groups"] = {g: None if v is None else round(v, 4) for g, v in report["aggregate"]["groups"].items()}
    report["aggregate"]["complete"] = signed.report["aggregate"]["complete"]
    report["labels"] = {
        **report.get("labels", {}),
        "part": {
            "name": Part.PUBLIC.value,
            "fraction": fraction,
            "partition_commitment": commitment,
            "note": "scores over the public queries only; the full report is published at the end",
        },
    }
    return report
