"""People of a server of many competitions: a person is registered in a competition as a participant holding the
person's token (docs/hosting.md, "People and competitions")."""

from __future__ import annotations

from collections.abc import Iterable

from grader.hosting.db.session import Database
from grader.hosting.directory.people import People
from grader.hosting.errors import HostingError
from grader.hosting.identity import participants
from grader.hosting.services.signup import rotate_token


def register(people: People, db: Database, name: str, team: str | None, *, baseline: bool) -> str | None:
    """Register person ``name`` in the competition of ``db``; a person new to the server is created first and their
    token returned (once); an existing person's token is theirs already (None)."""
    with db.session() as session:  # the competition's refusals first: a person made for nothing would hold a lost token
        participants.check_participant_name(session, name, team)
    person = people.named(name)
    token = None
    if person is None:
        person, token = people.add(name)
    elif person.revoked_at is not None:
        raise HostingError(f"person {name!r} is revoked on this server")
    with db.session() as session:
        participants.register_participant(session, name, person.token_sha256, team, baseline=baseline)
    return token


def revoke_everywhere(people: People, name: str, competitions: Iterable[tuple[str, Database]]) -> list[str]:
    """Revoke person ``name`` on the server, then each registration; return the competitions it was revoked in.

    The person first: from then on no competition can register them again; a registration whose competition could not
    be reached is named in the error, and running the command again finishes it.
    """
    people.revoke(name)
    done, failed = [], []
    for competition, db in competitions:
        try:
            with db.session() as session:
                if participants.is_participant(session, name):
                    participants.mark_participant_revoked(session, name)
                    done.append(competition)
        except Exception as error:  # one competition's database down must not hide the others'
            failed.append(f"{competition} ({error.__class__.__name__})")
    if failed:
        raise HostingError(
            f"person {name!r} revoked on the server and in {', '.join(done) or 'no competition'}; not yet in: {', '.join(failed)}; run again"
        )
    return done


def reissue(people: People, name: str, competitions: Iterable[tuple[str, Database]]) -> str:
    """A new token for person ``name``, who lost theirs (the host's ``grader admin person reissue``): as their own
    rotation (:func:`grader.hosting.services.signup.rotate_token`), in every competition of the server, and their web
    sessions end; returned to be shown once. Refused (one line) for a person unknown or revoked."""
    person = people.named(name)
    if person is None:
        raise HostingError(f"no person named {name!r} on this server")
    if person.revoked_at is not None:
        raise HostingError(f"person {name!r} is revoked on this server: a revoked token is never reissued")
    chosen = list(competitions)
    return rotate_token(people, name, person.token_sha256, lambda: chosen)
