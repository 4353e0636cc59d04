"""``python -m grader``: the ``grader`` command (how ``grader serve`` starts its local workers, with the same interpreter)."""

from grader.cli.main import main

main()
