"""The CPUs a sandbox container may run on: those of the process that grades, when it was given fewer than all.

A host that pins a worker to CPUs (``taskset``, systemd's ``CPUAffinity=``, a cgroup's cpuset) means its grades
to run there. Its containers, though, are the engine's children, not the worker's: they inherit nothing from it,
and without a cpuset of their own they run on any CPU, beside another worker's jobs. (On a machine of two CPUs,
two workers pinned one to each graded no faster with their containers pinned too: 1.83x one worker, against
1.85x unpinned, medians of 3 in ``bench/results/scale_corpus.md``. Pinning is for keeping workers apart.)

So a container gets the grading thread's CPU affinity as its cpuset (``docker run --cpuset-cpus``) when that
affinity is narrower than the machine's CPUs and the engine runs on this machine (a CPU number means nothing to a
remote engine). Its CPU limit (``cpus``, a quota) stays as it is, within the cpuset. The report does not name
the cpuset: a report must not depend on where a grade ran.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping


def engine_is_local(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the Docker engine is reached through a local socket (``DOCKER_HOST`` unset or ``unix://``)."""
    host = (os.environ if environ is None else environ).get("DOCKER_HOST", "")
    return host == "" or host.startswith("unix://")


def container_cpuset(affinity: Collection[int] | None = None, cpus: int | None = None, *, local: bool | None = None) -> str | None:
    """The cpuset a container should have (``"0"``, ``"2,3"``), or None: any CPU, as the engine decides.

    ``affinity``: the CPUs the calling thread may use (default: ``os.sched_getaffinity(0)``); ``cpus``: how many
    the machine has (default: ``os.cpu_count()``); ``local``: whether the engine runs here (default:
    :func:`engine_is_local`). A cpuset only when the affinity leaves out some of the machine's CPUs.
    """
    allowed = sorted(os.sched_getaffinity(0) if affinity is None else affinity)
    total = (os.cpu_count() or 1) if cpus is None else cpus
    if not (engine_is_local() if local is None else local) or not allowed or len(allowed) >= total:
        return None
    return ",".join(str(cpu) for cpu in allowed)
