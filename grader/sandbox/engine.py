"""The connection to the Docker engine. Failures here are INFRA, never the submission's."""

from __future__ import annotations

from functools import cache

from grader.errors import SandboxUnavailable


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
