"""``grader team``: a participant's team in a hosted competition (docs/hosting.md, "Teams").

``create NAME``, ``invite`` (a one-time code, printed once), ``join CODE``, ``leave``, ``show``.
Exit status: 0 done; 5 for any other answer, the server's line printed (409: membership locked, already in a team,
the team full or over its quota; 404: in no team, no teams here, an unknown code) or the server unreachable
(grader/cli/exits.py).
"""

from __future__ import annotations

from typing import Any

import click

from grader import jsonio
from grader.cli.participant_session import participant_client, server_options
from grader.text import escape_control


def _echo_team(answer: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(jsonio.dumps(answer, indent=2, ensure_ascii=True))
        return
    members: list[Any] = answer.get("members") if isinstance(answer.get("members"), list) else []  # type: ignore[assignment]
    click.echo(f"team: {escape_control(answer.get('name'))}")
    click.echo(f"members ({len(members)} of at most {escape_control(answer.get('max_size'))}): {', '.join(escape_control(m) for m in members)}")
    deadline = answer.get("merge_deadline")
    if deadline is None:  # a standing leaderboard without a merge deadline
        click.echo("membership may change at any time (no merge deadline)")
    else:
        state = "locked since" if answer.get("locked") else "may change until"
        click.echo(f"membership {state} {escape_control(deadline)}")


@click.group("team")
def team() -> None:
    """Your team: shared quotas, shared submissions (docs/hosting.md, "Teams")."""


@team.command("create")
@click.argument("name")
@server_options
@click.option("--json", "as_json", is_flag=True)
def create(name: str, server: str, token: str | None, as_json: bool) -> None:
    """Create team NAME, of which you are the first member."""
    with participant_client(server, token) as client:
        _echo_team(client.team("POST", "", {"name": name}), as_json)


@team.command("invite")
@server_options
def invite(server: str, token: str | None) -> None:
    """A one-time invitation code to your team (printed once; give it to one person)."""
    with participant_client(server, token) as client:
        answer = client.team("POST", "/invites")
    click.echo(f"invitation code (single use, expires {escape_control(answer.get('expires_at'))}): {escape_control(answer.get('code'))}")


@team.command("join")
@click.argument("code")
@server_options
@click.option("--json", "as_json", is_flag=True)
def join(code: str, server: str, token: str | None, as_json: bool) -> None:
    """Join the team of invitation CODE."""
    with participant_client(server, token) as client:
        _echo_team(client.team("POST", "/join", {"code": code}), as_json)


@team.command("leave")
@server_options
def leave(server: str, token: str | None) -> None:
    """Leave your team: its submissions, yours for it included, stay the team's."""
    with participant_client(server, token) as client:
        client.team("POST", "/leave")
    click.echo("left the team")


@team.command("show")
@server_options
@click.option("--json", "as_json", is_flag=True)
def show(server: str, token: str | None, as_json: bool) -> None:
    """Your team: its name, members and merge deadline."""
    with participant_client(server, token) as client:
        _echo_team(client.team("GET"), as_json)


def register(group: click.Group) -> None:
    """Add this module's commands to ``group``."""
    group.add_command(team)
