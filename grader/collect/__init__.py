"""Collect and validate: what a submission returned, read and checked before it is scored.

A stage of grading, after the sandbox: the sandbox runs a task's container and
hands back its ``/output`` folder; :func:`grader.collect.outputs.collect_outputs`
reads and validates the files there (bounded, link-free, schema-checked) for
grading, and :func:`grader.collect.validate.output_problems` lists every problem
in them for ``grader check``. Nothing here knows how the files were produced.
"""
