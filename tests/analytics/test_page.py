"""The live page in headless Chromium, in one browser session: the snapshot, live updates in
place, the chart growing, a value that looks like HTML shown as text, a re-subscribe that leaves
nothing of the old stream behind, and a resume after the server restarts."""

import json
import shutil
import time
import urllib.parse

import pytest

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
TRAP = "<img src=x onerror=window.pwned=1>"  # a server name that looks like markup


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
    yield driver
    driver.quit()


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

    live.feed([{"sym": "s2", "cpu": 25.5}, {"sym": "s3", "cpu": 99.0}])
    shows([[TRAP, "5", "1"], ["s1", "10", "1"], ["s2", "25.5", "2"]])  # s2 updated in place
    assert "live (batch 2)" in browser.find_element("id", "status").text
    assert browser.find_element("id", "conn").text == "live"
    assert browser.execute_script("return [...document.querySelectorAll('td.changed')]"
                                  ".map(td => td.textContent);") == ["25.5"]
    assert points() == 2  # the chart grew by the update
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
    assert "live (batch 4)" in browser.find_element("id", "status").text

    # a failed subscribe clears the table and says why
    browser.execute_script("document.getElementById('params').value = '{\"syms\": 3}';"
                           "document.querySelector('#form button').click();")
    wait_until(lambda: "subscribe failed" in browser.find_element("id", "status").text,
               lambda: browser.find_element("id", "status").text)
    assert table() == [] and "must be a list of string" in browser.find_element("id", "status").text
