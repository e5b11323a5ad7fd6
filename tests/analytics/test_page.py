"""The live page in headless Chromium, in one browser session: the snapshot, live updates in
place, the chart growing on a time axis that fits its points, a value that looks like HTML shown
as text, a re-subscribe that leaves nothing of the old stream behind, a resume after the server
restarts, and a status line that tells the stream's state at every step."""

import json
import re
import shutil
import time
import urllib.parse

import pytest

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
TRAP = "<img src=x onerror=window.pwned=1>"  # a server name that looks like markup
MAX_X_SPAN = 300  # seconds: the chart of a few updates spans seconds to minutes, never days

# Installed before the page's own script: records every state the status line shows (its
# state attribute, the state's name, the detail), so a passing contradiction is caught too.
RECORDER = """
window.__states = [];
new MutationObserver(() => {
  const conn = document.getElementById("conn"), status = document.getElementById("status");
  if (!conn || !status) return;
  const now = [conn.dataset.state, conn.textContent, status.textContent];
  if (JSON.stringify(now) !== JSON.stringify(window.__states.at(-1))) window.__states.push(now);
}).observe(document, {subtree: true, childList: true, characterData: true, attributes: true});
"""
BATCH = r"batch \d+"
PROGRESS = rf"(subscribed \(snapshot at {BATCH}\)|live \({BATCH}\))"
# Each state: its name on the page, and what the detail next to it may say.
STATES = {
    "idle": ("not subscribed", ""),
    "subscribing": ("subscribing", r"subscribing to \S+ on \S+"),
    "connecting": ("connecting", rf"{PROGRESS}; opening the stream"),
    "live": ("live", rf"{PROGRESS}|fresh snapshot \({BATCH}\)"),
    "reconnecting": ("reconnecting", rf"stream lost after {BATCH}; retrying"),
    "resubscribing": ("resubscribing", rf"the server lost our handle; subscribing again after "
                                       rf"{BATCH}|subscribing again failed \(.*\); retrying .*"),
    "closed": ("closed", "dropped: .+"),
    "error": ("error", "(subscribe failed|parameters are not JSON|listing the analytics "
                       "failed): .+"),
}


def wait_until(condition, what, seconds=60):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"not met within {seconds} s: {what()}"
        time.sleep(0.2)


@pytest.fixture
def browser():
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.skip("Chromium is absent: .ci/run installs Debian's chromium and chromium-driver")
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=webdriver.ChromeService(CHROMEDRIVER), options=options)
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RECORDER})
    yield driver
    driver.quit()


def states_seen(browser):
    """The states the status line went through (each once in a row), having checked that in
    every one its two parts agree."""
    seen = browser.execute_script("return window.__states;")
    for state, name, detail in seen:
        assert state in STATES, f"unknown state {state!r}: {seen}"
        assert name == STATES[state][0] and re.fullmatch(STATES[state][1], detail), \
            f"the status line contradicts itself: {name!r} next to {detail!r} (all: {seen})"
    states = [state for state, _, _ in seen if state != "idle"]
    return [s for i, s in enumerate(states) if i == 0 or states[i - 1] != s]


def assert_x_fits_points(browser):
    """The chart's time axis contains its points and spans at most MAX_X_SPAN seconds."""
    low, high, times = browser.execute_script(
        "const c = window.lakestream.chart; return [c.scales.x.min, c.scales.x.max, c.data[0]];")
    assert times and low <= min(times) <= max(times) <= high, (low, high, times)
    assert high - low <= MAX_X_SPAN, f"the time axis spans {high - low:.0f} s for {times}"


def test_live_page_end_to_end(live, browser, tmp_path):
    live.feed([{"sym": "s1", "cpu": 10.0}, {"sym": "s2", "cpu": 20.0}, {"sym": "s3", "cpu": 30.0},
               {"sym": TRAP, "cpu": 5.0}])
    wait_until(lambda: live.manager.published("servers") == 1, lambda: "batch 1 published")
    query = urllib.parse.urlencode({"token": "t-ann", "auto": "1", "analytic": "cpu_by_server",
                                    "target": "servers",
                                    "params": json.dumps({"syms": ["s1", "s2", TRAP]})})
    browser.get(f"{live.url}/?{query}")

    def table():  # read in one script: the page re-renders the rows on every update
        return browser.execute_script(
            "return [...document.querySelectorAll('#live tbody tr')]"
            ".map(tr => [...tr.querySelectorAll('td')].map(td => td.textContent));")

    def shows(expected):
        wait_until(lambda: table() == expected, lambda: f"table is {table()}, expected {expected}")

    def points():
        return browser.execute_script("const c = window.lakestream.chart; "
                                      "return c ? c.data[0].length : -1;")

    # the snapshot; the markup-like name is text: no element made of it, no script run
    shows([[TRAP, "5", "1"], ["s1", "10", "1"], ["s2", "20", "1"]])
    assert browser.find_elements("css selector", "#live img") == []
    assert browser.execute_script("return window.pwned === undefined")
    assert browser.find_element("id", "chart-note").text == ""  # uPlot is served locally
    assert points() == 1 and browser.find_elements("css selector", "#chart canvas")
    assert_x_fits_points(browser)  # one point: a short window around it (uPlot's own: 1000 days)
    def conn():
        return browser.find_element("id", "conn").text

    wait_until(lambda: conn() == "live", conn)
    assert browser.find_element("id", "status").text == "subscribed (snapshot at batch 1)"
    page_client = browser.execute_script("return window.lakestream.client;")
    assert live.server.clients[page_client].connected  # live on the page: a stream is open
    assert states_seen(browser) == ["subscribing", "connecting", "live"]

    live.feed([{"sym": "s2", "cpu": 25.5}, {"sym": "s3", "cpu": 99.0}])
    shows([[TRAP, "5", "1"], ["s1", "10", "1"], ["s2", "25.5", "2"]])  # s2 updated in place
    assert "live (batch 2)" in browser.find_element("id", "status").text
    assert browser.find_element("id", "conn").text == "live"
    assert browser.execute_script("return [...document.querySelectorAll('td.changed')]"
                                  ".map(td => td.textContent);") == ["25.5"]
    assert points() == 2  # the chart grew by the update
    assert_x_fits_points(browser)
    browser.save_screenshot(str(tmp_path / "live_page.png"))

    # re-subscribe: the old stream is closed, its handle released, and its rows never come back
    browser.execute_script("document.getElementById('params').value = arguments[0];"
                           "document.querySelector('#form button').click();",
                           json.dumps({"syms": ["s3"]}))
    shows([["s3", "99", "2"]])
    wait_until(lambda: len(live.manager.handles("ann")) == 1, lambda: live.manager.handles("ann"))
    live.feed([{"sym": "s1", "cpu": 11.0}, {"sym": "s3", "cpu": 100.0}])
    shows([["s3", "100", "3"]])

    # the server restarts while a batch runs: the page subscribes again and resumes after
    # batch 3 (the same subscription, so batch 4 arrives as a delta, not a fresh snapshot)
    live.stop()
    live.feed([{"sym": "s3", "cpu": 101.0}])
    live.start()
    shows([["s3", "101", "4"]])
    wait_until(lambda: browser.find_element("id", "conn").text == "live",
               lambda: browser.find_element("id", "conn").text)
    # batch 4 came as the delta after a snapshot at batch 3, or (when the new server had
    # published it before the page subscribed again) in the snapshot itself: either way, said so
    assert browser.find_element("id", "status").text in (
        "live (batch 4)", "subscribed (snapshot at batch 4)")

    # a failed subscribe clears the table and says why
    browser.execute_script("document.getElementById('params').value = '{\"syms\": 3}';"
                           "document.querySelector('#form button').click();")
    wait_until(lambda: "subscribe failed" in browser.find_element("id", "status").text,
               lambda: browser.find_element("id", "status").text)
    assert table() == [] and "must be a list of string" in browser.find_element("id", "status").text
    assert conn() == "error"
    assert states_seen(browser) == [
        "subscribing", "connecting", "live",  # the first subscription
        "subscribing", "connecting", "live",  # the re-subscribe
        "reconnecting", "resubscribing", "connecting", "live",  # the server restarts
        "subscribing", "error"]  # the failed subscribe
