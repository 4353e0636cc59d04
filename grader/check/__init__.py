"""``grader check``: the grading pipeline on public data, reported step by step."""
