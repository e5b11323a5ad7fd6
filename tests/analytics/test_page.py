"""The live page in headless Chromium: the table shows the snapshot, then updates in place
after new data is published."""

import json
import shutil
import time
import urllib.parse

import pytest

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def test_live_table_shows_snapshot_then_updates(live, tmp_path):
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.skip("Chromium is absent: .ci/run installs Debian's chromium and chromium-driver")
    from selenium import webdriver

    live.feed([{"sym": "s1", "cpu": 10.0}, {"sym": "s2", "cpu": 20.0}, {"sym": "s3", "cpu": 30.0}])
    deadline = time.monotonic() + 30
    while live.manager.published("servers") < 1:
        assert time.monotonic() < deadline
        time.sleep(0.1)

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    browser = webdriver.Chrome(service=webdriver.ChromeService(CHROMEDRIVER), options=options)
    try:
        query = urllib.parse.urlencode({"token": "t-ann", "auto": "1", "analytic": "cpu_by_server",
                                        "target": "servers", "params": json.dumps({"syms": ["s1", "s2"]})})
        browser.get(f"{live.url}/?{query}")

        def table():
            return [[cell.text for cell in row.find_elements("tag name", "td")]
                    for row in browser.find_elements("css selector", "#live tbody tr")]

        def wait_for_rows(expected):
            stop = time.monotonic() + 60
            while table() != expected:
                assert time.monotonic() < stop, f"table is {table()}, expected {expected}"
                time.sleep(0.2)

        wait_for_rows([["s1", "10", "1"], ["s2", "20", "1"]])  # the snapshot (s3 not subscribed)
        live.feed([{"sym": "s2", "cpu": 25.5}, {"sym": "s3", "cpu": 99.0}])
        wait_for_rows([["s1", "10", "1"], ["s2", "25.5", "2"]])  # s2 updated in place
        browser.save_screenshot(str(tmp_path / "live_table.png"))
        assert "live (batch 2)" in browser.find_element("id", "status").text
    finally:
        browser.quit()
