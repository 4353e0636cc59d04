"""The connection to the Docker engine. Failures here are INFRA, never the submission's."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

from grader.errors import EngineLost, SandboxUnavailable


@cache
def docker_client():  # type: ignore[no-untyped-def]
    """A docker SDK client for the local engine (``DOCKER_HOST`` respected); raises if it does not answer."""
    try:
        import docker
    except ImportError as exc:  # pragma: no cover - docker is a dependency
        raise SandboxUnavailable("the docker SDK is not installed", hint="pip install docker") from exc
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as exc:  # docker raises DockerException, requests errors, FileNotFoundError...
        raise SandboxUnavailable(
            f"the Docker engine does not answer: {type(exc).__name__}",
            hint="start it (scripts/setup-docker.sh installs and starts one), or use --sandbox none",
        ) from None
    return client


def engine_available() -> bool:
    """Whether a Docker engine answers (for ``--sandbox auto`` and for skipping tests)."""
    try:
        docker_client()
    except SandboxUnavailable:
        docker_client.cache_clear()
        return False
    return True


def engine_answers(timeout_s: float = 5.0) -> bool:
    """Whether a Docker engine (``DOCKER_HOST`` respected) answers a ping now, on a connection of its own: not the cached
    client's, so that a worker that asks before each claim leaves its forked grading processes no connection to share."""
    try:
        import docker

        client = docker.from_env(timeout=timeout_s)
    except Exception:  # no SDK, no socket, a malformed DOCKER_HOST: no engine
        return False
    try:
        return bool(client.ping())
    except Exception:  # the SDK's and requests' errors alike: no answer
        return False
    finally:
        client.close()


def _answers() -> bool:
    """Whether the engine answers a ping now (a fresh connection of the cached client)."""
    try:
        docker_client().ping()
    except Exception:  # the SDK's and requests' errors alike: no answer
        return False
    return True


@contextmanager
def engine_lost(doing: str) -> Iterator[None]:
    """Translate an error of the docker SDK or of its connection met while ``doing`` into one line: :class:`EngineLost`
    when the engine no longer answers (it stopped or went away mid-task: a local run stops, exit 4), else
    :class:`SandboxUnavailable` (a dropped connection: this task is INFRA, the others still run). The call sites
    that can tell an engine's refusal from the submission's fault catch those first."""
    import docker.errors
    import requests.exceptions

    try:
        yield
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        if _answers():
            raise SandboxUnavailable(f"the Docker engine dropped the connection {doing}: {type(exc).__name__}") from None
        raise EngineLost(
            f"the Docker engine went away {doing} and does not answer: {type(exc).__name__}",
            hint="check the engine (`docker info`); run the same command again to grade the tasks not done yet",
        ) from None
