"""The page at ``/`` in a real browser (headless Chromium driven by Selenium) against live servers on loopback.

Each test renders what the REST API answered and checks it against the API's own reply to the same request.
Screenshots go to ``runs/test-artifacts/browser/`` ($SIDEKICK_ARTIFACTS overrides ``runs/test-artifacts``);
``make screenshots`` also copies them to ``docs/screenshots/`` for the README. Chromium and chromedriver come
from Debian (``make browser`` installs them; ``make test`` runs it): without them these tests skip, or fail when
$SIDEKICK_REQUIRE_BROWSER is set (as ``make test`` sets it).

Run: .venv/bin/python -m pytest tests/serving/test_webui.py -q -m integration
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("SIDEKICK_ARTIFACTS", ROOT / "runs" / "test-artifacts")) / "browser"
WAIT_S = 30.0


def _find(*names: str) -> str | None:
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """A headless Chromium (Debian's ``chromium`` + ``chromedriver``; nothing is downloaded)."""
    chrome, driver_path = _find("chromium", "chromium-browser", "google-chrome"), _find("chromedriver")
    if chrome is None or driver_path is None:
        why = "headless Chromium is not installed: run `make browser` (apt-get install chromium chromium-driver)"
        if os.environ.get("SIDEKICK_REQUIRE_BROWSER"):
            pytest.fail(why)
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chrome
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,900",
                "--disable-extensions", "--no-first-run", "--lang=en-US"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(WAIT_S)
    yield driver
    driver.quit()


@pytest.fixture
def browser(chromium: Any) -> Any:
    """The module's browser with its console log read empty (each test sees only its own page errors)."""
    chromium.get("about:blank")
    page_errors(chromium)
    return chromium


def shot(driver: Any, name: str) -> Path:
    """A screenshot of the whole page (the window grown to the page's height for the picture)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    width, height = driver.get_window_size()["width"], driver.get_window_size()["height"]
    full = int(driver.execute_script("return Math.max(document.body.scrollHeight, window.innerHeight)"))
    driver.set_window_size(width, min(max(height, full + 140), 4000))
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    driver.set_window_size(width, height)
    if os.environ.get("SIDEKICK_SCREENSHOTS"):
        out = Path(os.environ["SIDEKICK_SCREENSHOTS"])
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, out / path.name)
    return path


def wait_for(driver: Any, css: str, count: int = 1) -> list[Any]:
    """The elements matching ``css`` once there are at least ``count`` of them (fails after WAIT_S)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def found(d: Any) -> list[Any] | bool:
        elements = d.find_elements(By.CSS_SELECTOR, css)
        return elements if len(elements) >= count else False

    elements: list[Any] = WebDriverWait(driver, WAIT_S).until(found, message=f"no {count} x {css!r} on the page")
    return elements


def find(driver: Any, css: str) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, css)


def page_errors(driver: Any) -> list[str]:
    """Severe console messages (script errors, failed loads) since the last call."""
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


@pytest.fixture
def fallback_server(live_server: Any) -> str:
    """A server with the three apps and no model (every answer is the app's fallback: deterministic), or the
    server at $SIDEKICK_UI_BASE (``make screenshots`` points it at ``make demo``'s)."""
    if os.environ.get("SIDEKICK_UI_BASE"):
        return os.environ["SIDEKICK_UI_BASE"].rstrip("/")
    base, _ = live_server(None)
    return str(base)


# ------------------------------------------------------------------------------------------------ shopping
def test_shopping_turn_renders_item_cards_and_cart(browser: Any, fallback_server: str) -> None:
    base, message = fallback_server, "waterproof hiking boots under 80"
    expected = httpx.post(f"{base}/v1/shopping/sessions", json={"message": message}, timeout=WAIT_S).json()
    assert expected["items"], "the fallback found nothing to show: the test world changed"

    browser.get(base + "/")
    find(browser, "#shop-input").send_keys(message + "\n")  # Enter sends, as in any chat
    cards = wait_for(browser, ".msg.agent .cards > .card")
    rendered = [c.find_element("css selector", ".title").text for c in cards]
    assert rendered == [i["title"] for i in expected["items"]]
    first = expected["items"][0]
    assert f"{first['price']:.2f}" in cards[0].text
    assert cards[0].get_attribute("data-item-id") == first["item_id"]
    if first["sid"]:
        assert cards[0].get_attribute("title") == f"SID {first['sid']}"  # the SID shows on hover
    reply_text = find(browser, ".msg.agent .text").text
    assert reply_text == expected["reply"]
    if expected["degraded"]:
        assert find(browser, ".msg.agent .badge.degraded").text == f"degraded: {expected['reason']}"

    cards[0].find_element("css selector", "button.add").click()  # the cart route, no model
    line = wait_for(browser, ".cart-line")[0]
    assert first["title"] in line.text
    assert find(browser, "#cart-total").text == f"{first['price']:.2f}"
    find(browser, "#shop-input").click()  # the pointer leaves the card (its SID tooltip closes) for the picture
    shot(browser, "shopping")
    line.find_element("css selector", "button.remove").click()
    wait_for(browser, ".cart-lines .empty")
    assert find(browser, "#cart-total").text == "0.00"
    assert page_errors(browser) == []


def test_a_degraded_reply_shows_its_badge(browser: Any, live_server: Any, tiny_agent: Path) -> None:
    """A real model turn cut at its budget: the badge names the reason the API gives, with the latency."""
    base, _ = live_server(tiny_agent, apps=("shopping",))
    browser.get(base + "/")
    budget = find(browser, "#shop-budget")
    budget.clear()
    budget.send_keys("150")  # the tiny model's multi-step turn cannot finish in 50 ms of model time
    find(browser, "#shop-input").send_keys("a tent for two\n")
    reply = wait_for(browser, ".msg.agent")[0]
    badge = wait_for(browser, ".msg.agent .badge.degraded")[0]
    assert badge.text.startswith("degraded: ")
    reason = badge.text.removeprefix("degraded: ")
    assert reason in {"timeout", "budget", "step_limit", "parse_error", "empty_reply", "overload"}, reason
    assert reply.find_element("css selector", ".latency").text.endswith(" ms")
    shot(browser, "shopping-degraded")


def test_a_503_shows_a_retry_message(browser: Any, live_server: Any, tiny_agent: Path) -> None:
    """A budget shorter than the server's answer reserve cannot be met: admission answers 503 + Retry-After at
    once, and the page says so with a Retry button instead of failing silently."""
    base, _ = live_server(tiny_agent, apps=("shopping",))
    refused = httpx.post(f"{base}/v1/shopping/sessions", json={"message": "a tent", "budget_ms": 50}, timeout=WAIT_S)
    assert refused.status_code == 503 and refused.headers.get("retry-after")

    browser.get(base + "/")
    budget = find(browser, "#shop-budget")
    budget.clear()
    budget.send_keys("50")
    find(browser, "#shop-input").send_keys("a tent\n")
    alert = wait_for(browser, ".error.busy[role='alert']")[0]
    assert "cannot answer right now" in alert.text
    assert f"try again in {refused.headers['retry-after']} s" in alert.text
    retry = alert.find_element("css selector", "button.retry")
    shot(browser, "shopping-503")
    budget.clear()  # back to the server's default budget: the retry goes through
    retry.click()
    wait_for(browser, ".msg.agent")


# ------------------------------------------------------------------------------------------------ livestream
def test_livestream_answer_renders_with_its_facts(browser: Any, fallback_server: str) -> None:
    base = fallback_server
    streams = httpx.get(f"{base}/v1/livestream/streams", timeout=WAIT_S).json()["streams"]
    stream = streams[0]
    product = stream["products"][0]

    browser.get(base + "/#livestream")
    options = wait_for(browser, "#ls-stream option", len(streams))
    assert [o.get_attribute("value") for o in options] == [s["stream_id"] for s in streams]
    assert len(browser.find_elements("css selector", "#ls-bar .segment")) == len(stream["products"])
    # the slider starts on the first product, as a viewer who just joined sees it
    second = int(find(browser, "#ls-time").get_attribute("value"))
    assert product["start_s"] <= second < product["end_s"]
    assert product["title"] in find(browser, "#ls-onscreen").text

    question = "how much is this?"
    expected = httpx.post(f"{base}/v1/livestream/answer", timeout=WAIT_S, json={
        "question": question, "stream_id": stream["stream_id"], "ts_offset_s": second}).json()
    assert expected["cited_facts"], "the fallback cited nothing: the test world changed"
    find(browser, "#ls-question").send_keys(question + "\n")
    facts = wait_for(browser, "#ls-answer .fact")
    assert find(browser, "#ls-answer .text").text == expected["answer"]
    assert [f.text for f in facts] == expected["cited_facts"]
    shot(browser, "livestream")

    # between two products nothing is on screen, and the page says so
    gap = next((a["end_s"], b["start_s"]) for a, b in zip(stream["products"], stream["products"][1:], strict=False)
               if b["start_s"] > a["end_s"])
    browser.execute_script("const t = document.getElementById('ls-time'); t.value = arguments[0];"
                           "t.dispatchEvent(new Event('input'));", gap[0])
    assert find(browser, "#ls-onscreen").text.startswith("Nothing on screen")
    assert page_errors(browser) == []


# ------------------------------------------------------------------------------------------------ travel
def test_trip_plan_renders_stops_legs_and_opening_hours(browser: Any, fallback_server: str) -> None:
    base = fallback_server
    browser.get(base + "/#travel")
    request = find(browser, "#tr-request").get_attribute("value")
    find(browser, "#tr-plan").click()
    stops = wait_for(browser, "#tr-result .stops .stop")
    expected = httpx.post(f"{base}/v1/travel/plan", timeout=WAIT_S, json={
        "request": request, "constraints": {"day": "sat", "start_min": 600, "end_min": 1080, "mode": "transit",
                                            "must_categories": ["museum", "food"]}}).json()
    assert len(stops) == len(expected["stops"]) >= 2
    for row, stop in zip(stops, expected["stops"], strict=True):
        assert stop["name"] in row.text
        open_at = f"open {stop['opens'] // 60:02d}:{stop['opens'] % 60:02d}"
        assert open_at in row.text
    legs = browser.find_elements("css selector", "#tr-result .stops .leg")
    assert [leg.text for leg in legs] == [f"↓ {leg['travel_min']:g} min by {leg['mode']}" for leg in expected["legs"]]
    assert len(browser.find_elements("css selector", "#tr-result .bar .segment.stop")) == len(expected["stops"])
    shot(browser, "travel")
    assert page_errors(browser) == []


# ------------------------------------------------------------------------------------------------ the page itself
def test_keyboard_and_phone_width(browser: Any, fallback_server: str) -> None:
    """Tabs move with the arrow keys, every control has a label, and at 390 px nothing scrolls sideways."""
    from selenium.webdriver.common.keys import Keys

    base = fallback_server
    browser.get(base + "/")
    find(browser, "#tab-shopping").send_keys(Keys.ARROW_RIGHT)
    assert browser.switch_to.active_element.get_attribute("id") == "tab-livestream"
    assert find(browser, "#panel-livestream").is_displayed() and not find(browser, "#panel-shopping").is_displayed()
    browser.switch_to.active_element.send_keys(Keys.END)
    assert find(browser, "#panel-travel").is_displayed()
    unlabelled = browser.execute_script("""
        return Array.from(document.querySelectorAll('input, select, textarea, button')).filter((c) => {
          const label = c.id && document.querySelector(`label[for="${c.id}"]`);
          return !(label || c.getAttribute('aria-label') || (c.tagName === 'BUTTON' && c.textContent.trim()));
        }).map((c) => c.outerHTML.slice(0, 80));""")
    assert unlabelled == []

    size = browser.get_window_size()
    try:
        browser.set_window_size(390, 844)
        for tab in ("shopping", "livestream", "travel"):
            browser.get(f"{base}/#{tab}")
            wait_for(browser, f"#panel-{tab}:not([hidden])")
            sideways = browser.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
            assert sideways <= 0, f"{tab}: the page is {sideways} px wider than a phone"
        browser.get(base + "/")
        find(browser, "#shop-input").send_keys("a tent for two\n")
        wait_for(browser, ".msg.agent .card")
        assert browser.execute_script("return document.documentElement.scrollWidth - window.innerWidth") <= 0
        shot(browser, "phone")
    finally:
        browser.set_window_size(size["width"], size["height"])


def test_docs_work_offline(browser: Any, fallback_server: str) -> None:
    """/docs (Swagger UI) and /redoc render from the server's own assets: every script, stylesheet and API call
    the browser made went to the server itself (ReDoc's decorative 'powered by' logo image is the one thing it
    links elsewhere; offline it is simply not shown)."""
    base = fallback_server
    for path, css in (("/docs", ".opblock"), ("/redoc", "[data-section-id]")):
        browser.get(base + path)
        wait_for(browser, css, 5)
        loaded = browser.execute_script(
            "return performance.getEntriesByType('resource').map((e) => [e.name, e.initiatorType])")
        foreign = [u for u, kind in loaded if not u.startswith(base) and kind != "img"]
        assert not foreign, f"{path} loaded {foreign}"
        assert [e for e in page_errors(browser) if "/redoc/logo" not in e] == []
    shot(browser, "docs")


def test_an_app_the_server_does_not_serve_says_so(browser: Any, live_server: Any) -> None:
    base, _ = live_server(None, apps=("shopping",))
    browser.get(base + "/#livestream")
    notice = wait_for(browser, "#panel-livestream .notice")[0]
    assert "does not serve the livestream app" in notice.text and "serves: shopping" in notice.text
    assert "unserved" in find(browser, "#tab-travel").get_attribute("class")
    assert "unserved" not in (find(browser, "#tab-shopping").get_attribute("class") or "")
    errors = page_errors(browser)
    assert all("/v1/livestream/streams" in e and "404" in e for e in errors), errors  # the one call it tried
