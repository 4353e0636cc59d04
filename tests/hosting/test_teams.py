"""Teams (docs/hosting.md, "Teams") against a real `grader serve --competitions` over real sockets, on SQLite.

One server, no workers (every admitted upload stays queued: it counts in flight and in the quota), three
competitions: ``teams`` (teams of at most 3; quotas of 2 a day, 3 in all), ``locked`` (its merge deadline passed)
and ``plain`` (no ``[teams]``: no teams). Uploads are the ONNX example, checked by the server like any upload.
The CLI test runs the real `grader team` commands against the same server.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from grader.hosting.participant.client import packed
from tests.hosting.browser import new_driver, page_wait, require_chromium
from tests.hosting.support import REPO, ManyServer, admin, grader_cli, write_competition

pytestmark = pytest.mark.slow
EXAMPLE = REPO / "submissions_example" / "onnx-lsa"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManyServer]:
    root = tmp_path_factory.mktemp("teams")
    files = root / "competitions"
    files.mkdir()
    quotas = {"per_day": 2, "total": 3, "concurrent": 5, "sample_per_day": 5}
    write_competition(files / "teams.toml", name="teams", tables={"quotas": quotas, "teams": {"max_size": 3}})
    write_competition(files / "locked.toml", name="locked", tables={"teams": {"merge_deadline": "2021-01-01T00:00:00Z"}})
    write_competition(files / "plain.toml", name="plain")
    running = ManyServer(files, root / "state", workers=0).start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def body(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    with packed(EXAMPLE) as archive:
        return archive.read_bytes()


def person(server: ManyServer, competition: str, name: str) -> httpx.Client:
    """A participant of ``competition``: a client that sends their token."""
    token = admin(server.state, "--in", competition, "add-participant", name).strip()
    return httpx.Client(base_url=f"{server.base(competition)}", headers={"Authorization": f"Bearer {token}"}, timeout=60)


def upload(who: httpx.Client, body: bytes) -> httpx.Response:
    return who.post("/api/v1/submissions", content=body, headers={"Content-Type": "application/gzip"})


def submission_ids(who: httpx.Client) -> set[str]:
    answer = who.get("/api/v1/submissions")
    assert answer.status_code == 200, answer.text
    return {row["id"] for row in answer.json()}


def invite(who: httpx.Client) -> str:
    answer = who.post("/api/v1/team/invites")
    assert answer.status_code == 201, answer.text
    code: str = answer.json()["code"]
    assert code.startswith("gti_")
    return code


def test_a_team_shares_its_quota_and_submissions_and_a_leaver_takes_none_along(server: ManyServer, body: bytes) -> None:
    ada, bob, cy = (person(server, "teams", name) for name in ("ada", "bob", "cy"))
    assert ada.get("/api/v1/team").status_code == 404  # in no team yet
    created = ada.post("/api/v1/team", json={"name": "Lighthouse"})
    assert created.status_code == 201 and created.json()["members"] == ["ada"], created.text
    assert bob.post("/api/v1/team", json={"name": "Lighthouse"}).status_code == 409  # the name is taken
    assert bob.post("/api/v1/team", json={"name": "cy"}).status_code == 409  # a participant's: its row would pass for cy's
    solo = upload(bob, body)  # bob's own, before joining: stays his, private
    assert solo.status_code == 201, solo.text
    code = invite(ada)
    joined = bob.post("/api/v1/team/join", json={"code": code})
    assert joined.status_code == 200 and joined.json()["members"] == ["ada", "bob"], joined.text
    # the code was one-time: spent, it is answered as one that never existed
    again = cy.post("/api/v1/team/join", json={"code": code})
    never = cy.post("/api/v1/team/join", json={"code": "gti_" + "x" * 43})
    assert again.status_code == never.status_code == 404 and again.json() == never.json()
    assert ada.post("/api/v1/team/join", json={"code": invite(bob)}).status_code == 409  # one team per participant
    # the quota is the team's: bob's own upload counts, ada uploads one more, and the day's 2 are spent for both
    team_upload = upload(ada, body)
    assert team_upload.status_code == 201, team_upload.text
    assert upload(bob, body).status_code == 429
    assert ada.get("/api/v1/quota").json()["hidden"]["used_24h"] == bob.get("/api/v1/quota").json()["hidden"]["used_24h"] == 2
    # teammates read the team's submissions; bob's own from before stays his; a stranger gets 404, like a made-up id
    team_id, solo_id = team_upload.json()["id"], solo.json()["id"]
    assert submission_ids(bob) == {team_id, solo_id} and submission_ids(ada) == {team_id}
    assert bob.get(f"/api/v1/submissions/{team_id}").status_code == 200
    assert ada.get(f"/api/v1/submissions/{solo_id}").status_code == 404
    assert cy.get(f"/api/v1/submissions/{team_id}").status_code == cy.get("/api/v1/submissions/" + "0" * 32).status_code == 404
    # a join that would pass the quota is refused, and its code stays valid: cy's two uploads plus the team's two
    for _ in range(2):
        assert upload(cy, body).status_code == 201
    over = cy.post("/api/v1/team/join", json={"code": (code := invite(bob))})
    assert over.status_code == 409 and "quota" in over.json()["detail"], over.text
    assert bob.get("/api/v1/team").json()["members"] == ["ada", "bob"]
    # ada leaves: the team's submission she made stays the team's; she reads it no more, bob still does
    assert ada.post("/api/v1/team/leave").status_code == 204
    assert ada.get(f"/api/v1/submissions/{team_id}").status_code == 404 and submission_ids(ada) == set()
    assert bob.get(f"/api/v1/submissions/{team_id}").status_code == 200
    assert ada.get("/api/v1/team").status_code == 404 and ada.post("/api/v1/team/leave").status_code == 404
    # leaving frees nothing: ada's upload for the team still counts against her, and against the team
    assert ada.get("/api/v1/quota").json()["hidden"]["used_24h"] == 1
    assert bob.get("/api/v1/quota").json()["hidden"]["used_24h"] == 2
    assert cy.post("/api/v1/team/join", json={"code": code}).status_code == 409  # still over: the refused code was not spent


def test_a_team_holds_at_most_max_size_members(server: ManyServer) -> None:
    members = [person(server, "teams", f"m{n}") for n in range(4)]
    assert members[0].post("/api/v1/team", json={"name": "Quartet"}).status_code == 201
    for joiner in members[1:3]:
        assert joiner.post("/api/v1/team/join", json={"code": invite(members[0])}).status_code == 200
    full = members[3].post("/api/v1/team/join", json={"code": invite(members[0])})
    assert full.status_code == 409 and "full" in full.json()["detail"], full.text
    assert members[3].get("/api/v1/team").status_code == 404
    # the refused join left its code unused: with 19 more, the team holds 20 live codes, and a 21st is refused
    assert [members[1].post("/api/v1/team/invites").status_code for _ in range(20)] == [201] * 19 + [409]


def test_membership_locks_at_the_merge_deadline_and_a_competition_without_teams_has_none(server: ManyServer) -> None:
    late = person(server, "locked", "late")
    refused = late.post("/api/v1/team", json={"name": "Late"})
    assert refused.status_code == 409 and "merge deadline" in refused.json()["detail"], refused.text
    plain = person(server, "plain", "plain")
    assert plain.post("/api/v1/team", json={"name": "Plain"}).status_code == 404
    assert plain.get("/api/v1/team").status_code == 404
    nobody = httpx.post(f"{server.base('teams')}/api/v1/team", json={"name": "Anon"}, timeout=30)
    assert nobody.status_code == 401


def test_the_team_commands(server: ManyServer) -> None:
    tokens = {name: admin(server.state, "--in", "teams", "add-participant", name).strip() for name in ("kit", "lou")}
    url = server.base("teams")

    def team(who: str, *args: str) -> str:
        done = grader_cli("team", *args, "--server", url, "--token", tokens[who], timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "team: Otters" in team("kit", "create", "Otters")
    said = team("kit", "invite")
    code = said.rsplit(" ", 1)[-1].strip()
    assert code.startswith("gti_"), said
    assert "members (2 of at most 3): kit, lou" in team("lou", "join", code)
    assert "kit, lou" in team("kit", "show")
    assert "left the team" in team("lou", "leave")
    gone = grader_cli("team", "show", "--server", url, "--token", tokens["lou"], timeout=120)
    assert gone.returncode != 0 and "404" in gone.stderr


def test_a_team_is_created_and_joined_on_the_me_page_in_chromium(server: ManyServer) -> None:
    require_chromium()
    from selenium.webdriver.common.by import By

    tokens = {name: admin(server.state, "--in", "teams", "add-participant", name).strip() for name in ("wren", "yara")}
    base = server.base("teams")
    driver = new_driver()
    wait = page_wait(driver, 30)

    def sign_in(name: str) -> None:
        driver.delete_all_cookies()
        driver.get(f"{base}/signin")
        driver.find_element(By.ID, "token").send_keys(tokens[name])
        driver.find_element(By.ID, "signin").click()
        wait.until(lambda d: name in d.find_element(By.TAG_NAME, "h1").text)

    try:
        sign_in("wren")
        driver.find_element(By.ID, "team-create-name").send_keys("Night <b>Owls</b>")
        driver.find_element(By.ID, "team-create").click()
        wait.until(lambda d: d.find_elements(By.ID, "team-name"))
        assert driver.find_element(By.ID, "team-name").text == "Night <b>Owls</b>"  # a name is text, never markup
        driver.find_element(By.ID, "team-invite").click()
        code = wait.until(lambda d: d.find_elements(By.ID, "team-code"))[0].text
        assert code.startswith("gti_")
        driver.refresh()
        assert not driver.find_elements(By.ID, "team-code")  # shown once
        sign_in("yara")
        driver.find_element(By.ID, "team-join-code").send_keys(code)
        driver.find_element(By.ID, "team-join").click()
        wait.until(lambda d: d.find_elements(By.ID, "team-members"))
        assert driver.find_element(By.ID, "team-members").text == "wren, yara"
        assert "you joined" in driver.find_element(By.ID, "message").text
        severe = [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE" and "favicon.ico" not in entry["message"]]
        assert not severe, severe  # no script error, no CSP violation
    finally:
        driver.quit()
    yara = httpx.get(f"{base}/api/v1/team", headers={"Authorization": f"Bearer {tokens['yara']}"}, timeout=30)
    assert yara.json()["members"] == ["wren", "yara"]


def test_a_team_label_stays_a_label(server: ManyServer, body: bytes) -> None:
    tokens = {name: admin(server.state, "--in", "teams", "add-participant", name, "--team", "lab-x").strip() for name in ("lx1", "lx2")}
    clients = {
        name: httpx.Client(base_url=server.base("teams"), headers={"Authorization": f"Bearer {token}"}, timeout=60) for name, token in tokens.items()
    }
    assert [upload(clients["lx1"], body).status_code for _ in range(2)] == [201, 201]
    assert upload(clients["lx2"], body).status_code == 201  # the label shares no quota
    assert clients["lx2"].get("/api/v1/team").status_code == 404  # nor makes a team
    assert submission_ids(clients["lx2"]).isdisjoint(submission_ids(clients["lx1"]))
