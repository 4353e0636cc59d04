"""The board page's layout and formatting in a real headless Chromium, and the CSV's booleans and part column.

The page must fit a 1280-pixel window and a 390-pixel phone (Chromium's mobile
emulation, so the page's viewport meta applies as on a phone) without scrolling
sideways: the document's scrollWidth is at most the viewport's width. At 1280 the
demo boards fit whole, so the date and the report link are on screen.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

import httpx
import pytest

from grader.hosting.leaderboard.formatting import fact_value, number, p_value, when
from tests.hosting.browser import http_server, require_chromium, sized_driver
from tests.hosting.leaderboard_world import make_world, seed_demo
from tests.hosting.support import admin
from tests.hosting.world import World

MEASURE = """
const page = document.documentElement;
return {
  scroll: page.scrollWidth,
  viewport: page.clientWidth,
  boxes: [...document.querySelectorAll('.table-wrap')].map(box => [box.scrollWidth, box.clientWidth]),
  rightmost: Math.max(...[...document.querySelectorAll('table.board td')].map(cell => cell.getBoundingClientRect().right)),
};
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[World, str]]:
    require_chromium()
    world = make_world(tmp_path_factory.mktemp("layout"), None)
    seed_demo(world)
    with http_server(world.ctx) as url:
        yield world, url
    world.ctx.db.dispose()


def browser(width: int):  # type: ignore[no-untyped-def]
    """Chromium as a desktop window of ``width`` pixels, or (below 500) as a phone of that width."""
    return sized_driver(width, 844 if width < 500 else 900)


def layout(url: str, width: int) -> dict:
    driver = browser(width)
    try:
        driver.get(url)
        found = driver.execute_script(MEASURE)
        found["phone_cards"] = driver.execute_script("return getComputedStyle(document.querySelector('table.board thead')).display") == "none"
        return found
    finally:
        driver.quit()


def assert_fits(found: dict, width: int) -> None:
    # a desktop window's vertical scrollbar may take its width off the viewport; a phone's takes nothing
    assert width - 20 <= found["viewport"] <= width, found
    assert found["scroll"] <= found["viewport"], f"the page scrolls sideways at {width} px: {found}"
    assert found["rightmost"] <= found["viewport"] + 0.5, found
    assert all(inner <= outer for inner, outer in found["boxes"]), f"a board needs its own scrollbar at {width} px: {found}"
    assert found["phone_cards"] == (width < 500)


@pytest.mark.slow
@pytest.mark.parametrize("width", [1280, 390])
def test_public_board_fits_without_sideways_scrolling(site: tuple[World, str], width: int) -> None:
    _, url = site
    assert_fits(layout(url + "/", width), width)


@pytest.mark.slow
def test_numbers_dates_and_legend_are_readable(site: tuple[World, str]) -> None:
    from selenium.webdriver.common.by import By

    _, url = site
    driver = browser(1280)
    try:
        driver.get(url + "/")
        headers = [th.text for th in driver.find_elements(By.CSS_SELECTOR, "#board-zero-shot th")]
        assert "vs. above" in headers and not [h for h in headers if "Holm" in h]
        legend = driver.find_element(By.ID, "legend").text
        assert "vs. above: the entry against the one ranked just above it, Holm-corrected" in legend
        assert 'below 0.0001 shown as "< 0.0001"' in legend
        cells = [td.text for td in driver.find_elements(By.CSS_SELECTOR, "#board-zero-shot td.vs") if td.text]
        assert cells and all(text.startswith("p ") and "t-test p " in text and "Δ " in text and ", d " in text for text in cells), cells
        assert "t-test p < 0.0001" in " ".join(cells)  # bob's t-test p underflows the printed precision
        assert not [text for text in cells if "p 0.0000" in text or "(t:" in text]
        times = driver.find_elements(By.CSS_SELECTOR, "table.board time")
        assert times
        for element in times:
            machine, shown = element.get_attribute("datetime"), element.text
            assert machine.endswith("Z") and "T" in machine and shown == f"{machine[:10]} {machine[11:16]}"
            assert driver.execute_script("return arguments[0].getClientRects().length", element) == 1  # one line: it does not wrap
        facts = [b.text for b in driver.find_elements(By.CSS_SELECTOR, "#board-zero-shot .badge.fact")]
        assert "params 22.7M" in facts and "max len 512" in facts
    finally:
        driver.quit()


@pytest.mark.slow
def test_csv_says_which_part_and_true_false(site: tuple[World, str]) -> None:
    _, url = site
    rows = list(csv.DictReader(io.StringIO(httpx.get(url + "/leaderboard.csv", timeout=60).text)))
    assert rows and list(rows[0])[:2] == ["part", "board"]
    assert {row["part"] for row in rows} == {"public"}
    assert {row["baseline"] for row in rows} == {"true", "false"}
    assert [row["rank"] for row in rows if row["baseline"] == "true"] == [""]


@pytest.mark.slow
def test_private_board_fits_and_its_csv_says_private(site: tuple[World, str]) -> None:
    world, url = site
    admin(world.state.root, "end", "--yes")
    for width in (1280, 390):
        assert_fits(layout(url + "/?part=private", width), width)
    rows = list(csv.DictReader(io.StringIO(httpx.get(url + "/leaderboard.csv?part=private", timeout=60).text)))
    assert rows and {row["part"] for row in rows} == {"private"}


def test_formatting_functions() -> None:
    assert [p_value(v) for v in (None, 0.0, 0.00004999, 0.00005, 0.0001, 0.01234, 1.0)] == [
        "",
        "< 0.0001",
        "< 0.0001",
        "0.0001",
        "0.0001",
        "0.0123",
        "1.0000",
    ]
    assert (number(0.15873), number(0.8263, 2), number(None)) == ("0.1587", "0.83", "")
    assert (when("2026-12-01T01:49:20Z"), when(None), when("not a date")) == ("2026-12-01 01:49", "", "not a date")
    assert [fact_value("parameters", n) for n in (22_713_216, 1_300_000_000, 5_000)] == ["22.7M", "1.3B", "5,000"]
    assert fact_value("license", "apache-2.0") == "apache-2.0"
