"""Running the ``grader`` command in-process, shared by the tests that drive the CLI."""

from __future__ import annotations

from click.testing import CliRunner, Result

from grader.cli.main import cli


def invoke(*args: object, expect: int | None = 0) -> Result:
    """``grader ARGS`` run in-process (each argument ``str()``-ed); its exit status must be ``expect`` (None: any).

    A failed expectation shows the status, both streams and the exception, so the test's own
    assertion need not repeat them.
    """
    result = CliRunner().invoke(cli, [str(arg) for arg in args])
    if expect is not None:
        assert result.exit_code == expect, (result.exit_code, result.stdout, result.stderr, result.exception)
    return result
