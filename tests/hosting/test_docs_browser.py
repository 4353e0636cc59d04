"""/docs runs under its Content-Security-Policy in a real Chromium: Swagger UI starts, nothing is refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hosting.browser import http_server, new_driver, require_chromium
from tests.hosting.leaderboard_world import make_world
from tests.hosting.world import World

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[World, str]]:
    require_chromium()
    world = make_world(tmp_path_factory.mktemp("docs"), None)
    with http_server(world.ctx) as url:
        yield world, url
    world.ctx.db.dispose()


def test_swagger_ui_runs_under_the_policy(site: tuple[World, str], tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    _world, url = site
    driver = new_driver()
    try:
        # Record every CSP refusal the page meets (the console would only show them as text).
        driver.execute_cdp_cmd(
            "Page.addScriptToEvaluateOnNewDocument",
            {
                "source": "window.__csp = []; document.addEventListener('securitypolicyviolation', e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));"
            },
        )
        driver.get(f"{url}/docs")
        # Swagger UI's bundle and its start-up file ran: it fetched /openapi.json and rendered the API's operations
        # (an OpenAPI version it cannot render shows .version-pragma instead, as 3.1 did before openapi_version="3.0.3").
        WebDriverWait(driver, 60).until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "#swagger-ui .swagger-ui .opblock")))
        assert driver.find_elements(By.CSS_SELECTOR, "#swagger-ui .version-pragma") == []
        assert "grader" in driver.find_element(By.CSS_SELECTOR, "#swagger-ui .information-container").text
        assert driver.execute_script("return typeof window.ui") == "object"
        assert driver.execute_script("return window.__csp") == []
        # and an inline script, were one injected, is refused by the same policy
        driver.execute_script("var s = document.createElement('script'); s.textContent = 'window.__ran = 1'; document.body.appendChild(s);")
        assert driver.execute_script("return window.__ran === undefined")
    finally:
        driver.quit()
