"""The UI: ``dg dev`` loads the code location; a run launched through its GraphQL API shows
its materialisation and metadata on the asset's page in headless Chromium."""

import shutil
import time

import pytest

from tests.dagster_project.conftest import graphql

WORKSPACE = """{ workspaceOrError { __typename ... on Workspace { locationEntries { name loadStatus
  locationOrLoadError { __typename ... on PythonError { message } } } } } }"""
LAUNCH = """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
  ... on RunConfigValidationInvalid { errors { message } } } }"""
STATUS = """query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }"""
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def _loaded_locations(port):
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        entries = graphql(port, WORKSPACE)["data"]["workspaceOrError"]["locationEntries"]
        if entries and all(e["loadStatus"] == "LOADED" for e in entries):
            return entries
        time.sleep(1)
    raise AssertionError("the code location did not load within 180 s")


def test_dagster_dev_loads_the_code_location(dagster_dev):
    entries = _loaded_locations(dagster_dev)
    assert [(e["name"], e["loadStatus"], e["locationOrLoadError"]["__typename"])
            for e in entries] == [("dagster_project", "LOADED", "RepositoryLocation")]


def _run_job(port, job):
    params = {"selector": {"repositoryLocationName": "dagster_project",
                           "repositoryName": "__repository__", "jobName": job},
              "runConfigData": {}}
    launched = graphql(port, LAUNCH, {"params": params})["data"]["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["run"]["runId"]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        status = graphql(port, STATUS, {"id": run_id})["data"]["runOrError"]["status"]
        if status in ("SUCCESS", "FAILURE", "CANCELED"):
            assert status == "SUCCESS", f"run {run_id} ended {status}"
            return run_id
        time.sleep(2)
    raise AssertionError(f"run {run_id} did not finish within 300 s")


def _browser():
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.skip("Chromium is absent: .ci/run installs Debian's chromium and chromium-driver")
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                 "--window-size=1600,1200"):
        options.add_argument(flag)
    return webdriver.Chrome(service=webdriver.ChromeService(CHROMEDRIVER), options=options)


def test_asset_page_shows_the_materialisation_and_its_metadata(dagster_dev, tmp_path):
    _loaded_locations(dagster_dev)
    browser = _browser()
    try:
        _run_job(dagster_dev, "running_sum_job")
        browser.get(f"http://127.0.0.1:{dagster_dev}/assets/running_sum?view=events")
        deadline = time.monotonic() + 90
        text = ""
        while time.monotonic() < deadline:
            text = browser.find_element("tag name", "body").text
            if all(word in text for word in ("rows_in", "checkpoint_id", "dead_letters")):
                break
            time.sleep(1)
        for button in browser.find_elements("xpath", "//button[normalize-space()='Skip']"):
            button.click()  # the first-visit newsletter dialog would cover the screenshot
        browser.save_screenshot(str(tmp_path / "asset_running_sum.png"))
        assert "Materialized" in text or "Materialization" in text, text[:2000]
        for word in ("rows_in", "checkpoint_id", "dead_letters", "source_lag"):
            assert word in text, f"{word} not on the asset page; screenshot in {tmp_path}"
    finally:
        browser.quit()
