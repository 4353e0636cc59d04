"""The leaderboard pages in a real headless Chromium (Selenium): rows and order, escaping, sign-in, no private value before the end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.hosting.browser import http_server, new_driver, require_chromium
from tests.hosting.leaderboard_world import XSS_NAME, ZERO_SHOT, assert_free_of_secrets, expected_order, make_world, seed_demo
from tests.hosting.support import admin
from tests.hosting.world import World

# A real browser against a real (in-process, listening) server: each test is slow.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[World, str]]:
    require_chromium()
    world = make_world(tmp_path_factory.mktemp("board"), None)
    seed_demo(world)
    with http_server(world.ctx) as url:
        yield world, url
    world.ctx.db.dispose()


@pytest.fixture(scope="module")
def driver(site: tuple[World, str]) -> Iterator[object]:
    browser = new_driver()
    yield browser
    browser.quit()


def rows(driver, board: str) -> list[str]:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    return [row.find_element(By.CSS_SELECTOR, "td.name").text for row in driver.find_elements(By.CSS_SELECTOR, f"#board-{board} tr.entry")]


def no_alert(driver) -> bool:  # type: ignore[no-untyped-def]
    from selenium.common.exceptions import NoAlertPresentException

    try:
        _ = driver.switch_to.alert.text  # reading it raises when no alert is open
    except NoAlertPresentException:
        return True
    return False


def submit_and_wait(browser, button_id: str) -> None:  # type: ignore[no-untyped-def]
    """Click a form's button and wait until the answer page has replaced this one (a loaded machine is slow)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    old_page = browser.find_element(By.TAG_NAME, "html")
    browser.find_element(By.ID, button_id).click()
    WebDriverWait(browser, 120).until(expected_conditions.staleness_of(old_page))
    WebDriverWait(browser, 120).until(lambda b: b.execute_script("return document.readyState") == "complete")


def sign_in(driver, url: str, token: str) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    driver.get(f"{url}/signin")
    driver.find_element(By.ID, "token").send_keys(token)
    submit_and_wait(driver, "signin")


def test_board_rows_in_order_and_hostile_name_shown_as_text(site: tuple[World, str], driver) -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    world, url = site
    driver.get(url + "/")
    ranked = expected_order(world, ZERO_SHOT, "public")
    assert rows(driver, "zero-shot") == [*ranked, "BM25 baseline"]
    assert rows(driver, "fine-tuned") == ["bob-finetuned"] and rows(driver, "undeclared") == ["carol-mystery"]
    ranks = [r.text for r in driver.find_elements(By.CSS_SELECTOR, "#board-zero-shot td.rank")]
    assert ranks == ["1", "2", "3", "4", "–"]
    assert XSS_NAME in [cell.text for cell in driver.find_elements(By.CSS_SELECTOR, "td.name")]  # visible, as text
    assert driver.find_elements(By.CSS_SELECTOR, "td.name img") == [] and no_alert(driver)
    assert "training data not declared" in driver.find_element(By.ID, "board-undeclared").text
    assert_free_of_secrets(world, driver.page_source, "board page")


def test_sign_in_shows_only_own_submissions(site: tuple[World, str]) -> None:
    from selenium.webdriver.common.by import By

    world, url = site
    alice, bob = new_driver(), new_driver()
    try:
        sign_in(alice, url, world.tokens["alice"])
        sign_in(bob, url, world.tokens["mallory"])
        for browser, who in ((alice, "alice"), (bob, "mallory")):
            browser.get(f"{url}/me")
            names = [c.text for c in browser.find_elements(By.CSS_SELECTOR, "#mine td.name")]
            assert sorted(names) == sorted(s.name for s in world.submissions if s.participant == who)
            assert no_alert(browser)
            assert_free_of_secrets(world, browser.page_source, f"{who}'s page")
        cookie = alice.get_cookie("grader_session")
        assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        # alice's cookie replayed in mallory's browser shows alice's, never both
        bob.delete_all_cookies()
        bob.add_cookie({"name": "grader_session", "value": cookie["value"], "path": "/"})
        bob.get(f"{url}/me")
        names = {c.text for c in bob.find_elements(By.CSS_SELECTOR, "#mine td.name")}
        assert names == {s.name for s in world.submissions if s.participant == "alice"}
        # another participant's report answers 404 to a signed-in session
        other = world.by_name(XSS_NAME).id
        alice.get(f"{url}/me/submissions/{other}/report")
        assert "no such submission" in alice.page_source
    finally:
        alice.quit()
        bob.quit()


def test_final_choice_controls(site: tuple[World, str]) -> None:
    from selenium.webdriver.common.by import By

    world, url = site
    browser = new_driver()
    try:
        sign_in(browser, url, world.tokens["alice"])
        boxes = {b.get_attribute("value"): b for b in browser.find_elements(By.CSS_SELECTOR, "input[name=final]")}
        v1, v2 = world.by_name("alice-encoder-v1").id, world.by_name("alice-encoder-v2").id
        assert set(boxes) == {v1, v2} and all(b.is_selected() for b in boxes.values())  # default: the best public ones
        boxes[v1].click()
        submit_and_wait(browser, "save-finals")
        assert browser.find_element(By.ID, "message").text == f"final choices saved: {v2} count for the private board"
        assert browser.find_element(By.ID, "saved-finals").text == v2
        checked = [b.get_attribute("value") for b in browser.find_elements(By.CSS_SELECTOR, "input[name=final]") if b.is_selected()]
        assert checked == [v2]
        browser.find_element(By.CSS_SELECTOR, f"input[name=final][value={v1}]").click()  # back to both, for the private board test
        submit_and_wait(browser, "save-finals")
        assert len([b for b in browser.find_elements(By.CSS_SELECTOR, "input[name=final]") if b.is_selected()]) == 2
    finally:
        browser.quit()


def test_private_board_appears_after_the_end(site: tuple[World, str], driver) -> None:  # type: ignore[no-untyped-def]
    world, url = site
    driver.get(url + "/?part=private")
    assert rows(driver, "zero-shot") == []  # 404 page before the end
    admin(world.state.root, "end", "--yes")
    driver.get(url + "/?part=private")
    private = [s.name for s in world.submissions]
    assert rows(driver, "zero-shot")[:-1] == expected_order(world, ZERO_SHOT, "private")
    assert set(rows(driver, "zero-shot")) <= set(private)
    assert world.secret.hex() in driver.page_source  # revealed
