"""A server of many competitions (`grader serve --competitions DIR`), through a real server over real sockets.

Two competitions on one server, graded in the real Docker sandbox: each keeps its own host key, partition
commitment, log (key and origin), database and participants; addresses by name; the listing; aliases refused
while there are two; a competition added and retired while the server runs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from grader.cli.exits import EXIT_UNREACHABLE, EXIT_USAGE
from tests.hosting.support import REPO, ManyServer, admin, grader_cli, wait_for, write_competition
from tests.sandbox_support import RUNNER_IMAGE, require_docker

pytestmark = [pytest.mark.docker(RUNNER_IMAGE), pytest.mark.slow]
EXAMPLE = REPO / "submissions_example" / "onnx-lsa"


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    require_docker([RUNNER_IMAGE])
    root = tmp_path_factory.mktemp("many")
    files = root / "competitions"
    files.mkdir()
    write_competition(files / "alpha.toml", name="alpha", title="Alpha challenge")
    # beta opens later: the listing says "upcoming", and nothing of it is graded here
    write_competition(files / "beta.toml", name="beta", start="2098-01-01T00:00:00Z")
    server = ManyServer(files, root / "state", workers=1).start()
    server.tokens = {  # type: ignore[attr-defined]
        "alice": admin(server.state, "--in", "alpha", "add-participant", "alice").strip(),
        "bob": admin(server.state, "--in", "beta", "add-participant", "bob").strip(),
    }
    server.root = root  # type: ignore[attr-defined]
    yield server
    server.stop()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_the_listing_names_both_with_their_dates(two: ManyServer) -> None:
    listed = httpx.get(f"{two.url}/api/v1/competitions", timeout=30).json()
    assert [(c["name"], c["status"], c["page"], c["api"]) for c in listed] == [
        ("alpha", "open", "/c/alpha/", "/api/v1/competitions/alpha/"),
        ("beta", "upcoming", "/c/beta/", "/api/v1/competitions/beta/"),
    ]
    assert listed[0]["title"] == "Alpha challenge" and listed[1]["start"] == "2098-01-01T00:00:00Z"
    page = httpx.get(f"{two.url}/", timeout=30)
    assert page.status_code == 200 and 'href="/c/alpha/">Alpha challenge</a>' in page.text and "upcoming" in page.text
    assert "script-src 'none'" in page.headers["content-security-policy"]


def test_each_competition_keeps_its_own_keys_commitment_and_log(two: ManyServer) -> None:
    def of(name: str, path: str) -> httpx.Response:
        return httpx.get(f"{two.base(name)}{path}", timeout=30)

    assert of("alpha", "/host-key.pub").content != of("beta", "/host-key.pub").content
    assert of("alpha", "/api/v1/partition").json()["commitment"] != of("beta", "/api/v1/partition").json()["commitment"]
    alpha_log, beta_log = of("alpha", "/log/checkpoint").text, of("beta", "/log/checkpoint").text
    assert alpha_log.splitlines()[0] == "grader-log/alpha" and beta_log.splitlines()[0] == "grader-log/beta"
    assert of("alpha", "/log/key").text != of("beta", "/log/key").text
    # the API under /api/v1/competitions/<name>/ is the same as under /c/<name>/api/v1/
    direct = httpx.get(f"{two.url}/api/v1/competitions/beta/competition", timeout=30).json()
    assert direct == of("beta", "/api/v1/competition").json() and direct["name"] == "beta"
    assert stat_mode(two.state / "server.json") == 0o600


def stat_mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_a_grade_in_one_competition_is_its_own(two: ManyServer, docker_engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    alice = {"GRADER_TOKEN": two.tokens["alice"]}  # type: ignore[attr-defined]
    scored = grader_cli("submit", str(EXAMPLE), "--server", two.base("alpha"), "--wait", env=alice)
    assert scored.returncode == 0, scored.stderr + scored.stdout
    scored_id = scored.stdout.split()[0]
    assert f"{scored_id}  scored  public score " in scored.stdout
    # signed by alpha's host key, and by no other
    (tmp_path / "alpha.pub").write_bytes(httpx.get(f"{two.base('alpha')}/host-key.pub", timeout=30).content)
    (tmp_path / "beta.pub").write_bytes(httpx.get(f"{two.base('beta')}/host-key.pub", timeout=30).content)
    got = grader_cli("status", scored_id, "--report", str(tmp_path / "r.json"), "--server", two.base("alpha"), env=alice)
    assert got.returncode == 0, got.stderr
    assert grader_cli("verify", str(tmp_path / "r.json"), "--key", str(tmp_path / "alpha.pub")).returncode == 0
    assert grader_cli("verify", str(tmp_path / "r.json"), "--key", str(tmp_path / "beta.pub")).returncode != 0
    # the receipt is in alpha's log, not beta's
    alpha_size = int(httpx.get(f"{two.base('alpha')}/log/checkpoint", timeout=30).text.splitlines()[1])
    beta_size = int(httpx.get(f"{two.base('beta')}/log/checkpoint", timeout=30).text.splitlines()[1])
    assert alpha_size > beta_size
    # alice is a person of the server but not a participant of beta: 404 for everything of it, her submission is not there
    for path in ("/api/v1/submissions", f"/api/v1/submissions/{scored_id}", "/api/v1/quota"):
        answer = httpx.get(f"{two.base('beta')}{path}", headers=bearer(two.tokens["alice"]), timeout=30)  # type: ignore[attr-defined]
        assert answer.status_code == 404 and "not registered in this competition" in answer.json()["detail"], path
    assert httpx.get(f"{two.base('beta')}/api/v1/submissions/{scored_id}", headers=bearer(two.tokens["bob"]), timeout=30).status_code == 404  # type: ignore[attr-defined]
    on_board = httpx.get(f"{two.base('alpha')}/api/v1/leaderboard", timeout=30).json()
    assert on_board["competition"] == "alpha" and [e["participant"] for b in on_board["boards"] for e in b["entries"]] == ["alice"]
    beta_board = httpx.get(f"{two.base('beta')}/api/v1/leaderboard", timeout=30).json()
    assert beta_board["competition"] == "beta" and all(b["entries"] == [] for b in beta_board["boards"])


def test_one_competition_addresses_are_refused_naming_both(two: ManyServer) -> None:
    for path in ("/api/v1/competition", "/me", "/log/checkpoint", "/host-key.pub"):
        answer = httpx.get(f"{two.url}{path}", timeout=30)
        assert answer.status_code == 404 and "(alpha, beta)" in answer.json()["detail"], path
    # the CLI without a competition says which to name
    told = grader_cli("status", "s-0000", "--server", two.url, env={"GRADER_TOKEN": two.tokens["alice"]})  # type: ignore[attr-defined]
    assert told.returncode == EXIT_UNREACHABLE and "2 competitions (alpha, beta)" in told.stderr and "/c/<name>" in told.stderr
    assert httpx.get(f"{two.url}/c/gamma/", timeout=30).status_code == 404
    assert httpx.get(f"{two.url}/c/alpha", timeout=30).headers["location"] == "/c/alpha/"


def test_pages_links_and_sign_in_stay_under_the_competition(two: ManyServer) -> None:
    with httpx.Client(base_url=two.url, timeout=30) as browser:
        page = browser.get("/c/alpha/signin")
        assert page.status_code == 200
        links = re.findall(r'(?:href|action|src)="([^"]+)"', page.text)
        assert links and all(link.startswith("/c/alpha/") for link in links), links
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None
        signed = browser.post("/c/alpha/signin", data={"csrf": csrf.group(1), "token": two.tokens["alice"]})  # type: ignore[attr-defined]
        assert signed.status_code == 303 and signed.headers["location"] == "/c/alpha/me"
        cookie = signed.headers["set-cookie"]
        assert "path=/c/alpha" in cookie.lower()  # alpha's session never goes to beta's pages
        me = browser.get("/c/alpha/me")
        assert me.status_code == 200 and "alice" in me.text


def test_admin_names_its_competition(two: ManyServer) -> None:
    from click.testing import CliRunner

    from grader.cli.main import cli

    result = CliRunner().invoke(cli, ["admin", "--state", str(two.state), "list"])
    assert result.exit_code == EXIT_USAGE
    assert "2 competitions (alpha, beta): name one with --in NAME" in result.output
    assert "alice" in admin(two.state, "--in", "alpha", "list") and "alice" not in admin(two.state, "--in", "beta", "list")


def test_a_competition_added_and_retired_while_serving(two: ManyServer) -> None:
    gamma = write_competition(two.root / "gamma.toml", name="gamma")  # type: ignore[attr-defined]
    said = admin(two.state, "competition", "add", str(gamma))
    assert "added competition 'gamma'" in said
    wait_for(lambda: httpx.get(f"{two.base('gamma')}/api/v1/competition", timeout=30).status_code == 200, timeout=60, what="gamma served")
    assert [c["name"] for c in httpx.get(f"{two.url}/api/v1/competitions", timeout=30).json()] == ["alpha", "gamma", "beta"]
    admin(two.state, "competition", "retire", "gamma")
    wait_for(lambda: httpx.get(f"{two.base('gamma')}/api/v1/competition", timeout=30).status_code == 404, timeout=60, what="gamma retired")
    listed = admin(two.state, "competition", "list")
    assert re.search(r"gamma\s+retired", listed) and re.search(r"alpha\s+served", listed)
    # a name is never reused
    from click.testing import CliRunner

    from grader.cli.main import cli

    again = CliRunner().invoke(cli, ["admin", "--state", str(two.state), "competition", "add", str(gamma)])
    assert again.exit_code != 0 and "already on this server (retired)" in again.output
    json.loads((two.state / "server.json").read_text())  # still whole


def test_a_person_holds_one_token_registered_per_competition(two: ManyServer) -> None:
    carol = admin(two.state, "person", "add", "carol").strip()
    assert carol.startswith("gp_")

    def quota(name: str, token: str = carol) -> int:
        return httpx.get(f"{two.base(name)}/api/v1/quota", headers=bearer(token), timeout=30).status_code

    assert quota("alpha") == 404 and quota("beta") == 404  # a person of the server, registered nowhere yet
    assert admin(two.state, "--in", "alpha", "add-participant", "carol") == ""  # known: no new token
    assert quota("alpha") == 200 and quota("beta") == 404
    admin(two.state, "--in", "beta", "add-participant", "carol")
    assert quota("alpha") == 200 and quota("beta") == 200  # one token, both competitions
    assert quota("alpha", "gp_" + "x" * 43) == 401  # a token nobody holds: 401, as before
    # one sign-in page per competition, the same token for both
    with httpx.Client(base_url=two.url, timeout=30) as browser:
        page = browser.get("/c/beta/signin").text
        csrf = re.search(r'name="csrf" value="([^"]+)"', page)
        assert csrf is not None
        assert browser.post("/c/beta/signin", data={"csrf": csrf.group(1), "token": carol}).status_code == 303
    said = admin(two.state, "person", "revoke", "carol")
    assert "in: alpha, beta" in said
    assert quota("alpha") == 401 and quota("beta") == 401
    assert re.search(r"carol\s+REVOKED", admin(two.state, "person", "list"))
    from click.testing import CliRunner

    from grader.cli.main import cli

    again = CliRunner().invoke(cli, ["admin", "--state", str(two.state), "--in", "alpha", "add-participant", "carol"])
    assert again.exit_code != 0 and "already exists" in again.output
