"""Exports of grading reports to other benchmarks' result formats (``grader export-mteb``; see ``docs/mteb.md``)."""

from grader.export.mteb import MTEB_TASKS, MTEB_VERSION, MtebTask, export_mteb, mteb_scores

__all__ = ["MTEB_TASKS", "MTEB_VERSION", "MtebTask", "export_mteb", "mteb_scores"]
