"""``grader worker``: grade a competition's jobs on this machine (Docker and the benchmark data; no database access).

The one worker entry point: remote workers run it, and ``grader serve`` starts its
local workers as ``python -m grader worker --local-of SERVER_PID`` (token in GRADER_WORKER_TOKEN).

``--server`` names one competition (a one-competition server, or ``URL/c/<name>``), or a server of many
competitions: then the worker serves the competitions named with ``--competition`` (default: every one the
server lists whose copy is in ``--data``), one data copy per competition in ``DATA/<name>/``
(:mod:`grader.hosting.worker.many_loop`).
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from grader.hosting import environment


@click.command("worker")
@click.option(
    "--server", default=None, envvar=environment.SERVER, help="The competition server's URL (jobs, uploads and results go over its worker API)."
)
@click.option(
    "--worker-token",
    "token",
    default=None,
    envvar=environment.WORKER_TOKEN,
    help=f"This worker's token (`grader admin add-worker NAME`); or {environment.WORKER_TOKEN}.",
)
@click.option(
    "--broker",
    default=None,
    envvar=environment.BROKER,
    help="Celery broker URL (redis://[:password@]host:6379/0); without it the worker long-polls the server.",
)
@click.option("--name", default=None, help="Name in logs (default: the host name).")
@click.option(
    "--key-dir",
    type=click.Path(path_type=Path),
    default=None,
    envvar=environment.WORKER_KEY_DIR,
    help="Where this worker's Ed25519 key pair lives (created 0600 on first start). Default: ~/.config/grader-worker.",
)
@click.option(
    "--data",
    "data_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    envvar=environment.WORKER_DATA,
    help="The data copy the server exported (`grader admin export-worker-data --out DIR`): pseudonymous ids, no judgements.",
)
@click.option(
    "--competition",
    "competitions",
    multiple=True,
    metavar="NAME",
    help="On a server of many competitions: one this worker serves (repeatable; its copy in DATA/NAME). Default: every one listed with a copy here.",
)
@click.option("--min-free-disk", default="2g", show_default=True, help="Claim nothing while less than this is free for staging.")
@click.option(
    "--init-key", is_flag=True, help="Only create the key pair (if missing) and print the public key, for `grader admin add-worker --public-key`."
)
@click.option(
    "--local-of",
    "server_pid",
    type=int,
    default=None,
    hidden=True,
    help="A local worker of the `grader serve` process PID: long-polls, posts unsigned results (no key pair), exits when that process is gone.",
)
@click.option("--once", is_flag=True, hidden=True, help="Grade at most one job, then exit (long-poll mode).")
def worker(
    server: str | None,
    token: str | None,
    broker: str | None,
    name: str | None,
    key_dir: Path | None,
    min_free_disk: str,
    init_key: bool,
    server_pid: int | None,
    once: bool,
    data_dir: Path | None,
    competitions: tuple[str, ...],
) -> None:
    """Run a grading worker: claim a job (a lease), grade it in the Docker sandbox, post the result signed with this worker's key."""
    from grader.errors import UsageError
    from grader.sandbox.limits import parse_size

    if init_key:
        from grader.hosting.keyring.worker_signing import ensure_worker_key, worker_public_key_path

        folder = key_dir or Path(os.path.expanduser("~/.config/grader-worker"))
        ensure_worker_key(folder)
        click.echo(worker_public_key_path(folder).read_text(encoding="ascii"), nl=False)
        click.echo(f"key pair in {folder} (private half 0600)", err=True)
        return
    if not server:
        raise UsageError("--server is required (the competition server's URL)")
    if not token:
        raise UsageError(f"no worker token: pass --worker-token or set {environment.WORKER_TOKEN} (the host runs `grader admin add-worker NAME`)")
    label = name or os.uname().nodename
    if data_dir is not None:  # read where each job is graded (grader.hosting.environment.environment)
        os.environ[environment.WORKER_DATA] = str(data_dir.resolve())
    if server_pid is not None:
        from grader.hosting.worker.loop import ParentWatch

        # Before the first request: a server killed while this local worker starts up (asking what kind of server it
        # is, retrying a refused connection) ends it too, as it would once it grades.
        ParentWatch(server_pid).start()
    from grader.hosting.worker.many_loop import is_server_of_many

    if is_server_of_many(server):
        _serve_many(server, token, label, competitions, key_dir, min_free_disk, server_pid, once, broker)
        return
    if competitions:
        raise UsageError(f"--competition names a competition of a server of many; {server} serves one competition")
    from grader.hosting.worker.loop import run_worker

    if server_pid is not None:  # the server re-keys its local workers at every start; their results are signed by the host alone
        run_worker(server, token, name=label, once=once, parent=server_pid)
        return
    folder = key_dir or Path(os.path.expanduser("~/.config/grader-worker"))
    floor = parse_size(min_free_disk)
    if broker:
        from grader.hosting.worker.celery_worker import run_celery_worker

        run_celery_worker(broker, server, token, name=label, key_dir=folder, min_free_bytes=floor)
        return
    from grader.hosting.keyring.worker_signing import ensure_worker_key
    from grader.hosting.worker.celery_worker import register_key
    from grader.hosting.worker.loop import WorkerApi

    key = ensure_worker_key(folder)
    register_key(WorkerApi(server, token), folder)
    run_worker(server, token, name=label, key=key, min_free_bytes=floor, once=once)


def _serve_many(
    server: str,
    token: str,
    label: str,
    competitions: tuple[str, ...],
    key_dir: Path | None,
    min_free_disk: str,
    server_pid: int | None,
    once: bool,
    broker: str | None,
) -> None:
    """Serve several competitions of a server of many (:func:`grader.hosting.worker.many_loop.run_many_worker`)."""
    from grader.errors import UsageError
    from grader.hosting.environment import environment as variables
    from grader.hosting.worker.many_loop import check_named, run_many_worker
    from grader.sandbox.limits import parse_size

    if broker:
        raise UsageError("--broker: a worker of a server of many competitions long-polls the server's claim (no Celery broker)")
    folder = variables().worker_data
    if not folder:
        raise UsageError("--data is required on a server of many competitions: the folder holding one copy per competition (DATA/<name>/)")
    data = Path(folder)
    names = sorted(set(competitions)) or None
    if server_pid is not None:  # a local worker of the pool: every competition listed, results signed by the host alone
        run_many_worker(server, token, data, names=names, name=label, once=once, parent=server_pid)
        return
    from grader.hosting.keyring.worker_signing import ensure_worker_key
    from grader.hosting.worker.celery_worker import register_key

    if names is not None:
        check_named(data, names)  # before a key is recorded anywhere
    home = key_dir or Path(os.path.expanduser("~/.config/grader-worker"))
    key = ensure_worker_key(home)
    run_many_worker(
        server,
        token,
        data,
        names=names,
        name=label,
        once=once,
        key=key,
        on_new=lambda api: register_key(api, home),
        min_free_bytes=parse_size(min_free_disk),
    )


def register(group: click.Group) -> None:
    """Add this module's commands to ``group``."""
    group.add_command(worker)
