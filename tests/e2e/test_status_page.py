"""The status page in a real headless browser: Debian's chromium through its chromedriver and
selenium, nothing downloaded. A `cluster up --tls` cluster with a token: the page loads with the token, shows
the three nodes and the leader, and changes when the leader is killed (the page is served by a follower, so it
keeps refreshing), keeping the dead node visible in its groups and among the bookies. Its screenshot goes to QUORUMLOG_SCREENSHOT_DIR (bench/results/ for the README) or the
test's temporary directory."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from quorumlog.local_ports import free_base_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
TOKEN = "page-token-5f0e"


@pytest.fixture
def browser():
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip("needs Debian's chromium and chromium-driver (make system-deps installs them)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,900", "--ignore-certificate-errors"):  # (the cluster's own CA)
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            got = predicate()
        except Exception:  # noqa: BLE001 - the page is still loading or re-rendering
            got = None
        if got:
            return got
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_the_status_page_shows_the_nodes_and_the_leader_and_follows_a_leader_kill(browser, tmp_path):
    from selenium.webdriver.common.by import By

    data = str(tmp_path / "cluster")
    env = dict(os.environ, QUORUMLOG_TOKEN=TOKEN)
    cli = [sys.executable, "-m", "quorumlog.cli"]
    base = free_base_port(6)  # (node ports, then HTTP ports: ephemeral ones next to a free one may be taken)
    up = subprocess.run([*cli, "cluster", "up", "--nodes", "3", "--data-dir", data, "--tls", "--base-port",
                         str(base), "--http-base-port", str(base + 3), "--json"],
                        capture_output=True, text=True, timeout=120, env=env)
    assert up.returncode == 0, up.stderr
    doc = json.loads(up.stdout)
    try:
        leader = doc["leader_id"]
        follower = next(n for n in doc["nodes"] if n["id"] != leader)
        url = f"https://127.0.0.1:{follower['http_port']}/?token={TOKEN}"
        browser.get(url)

        def rows():
            return browser.find_elements(By.CSS_SELECTOR, "#nodes tbody tr[data-node]")
        _wait(lambda: len(rows()) == 3 and all(r.get_attribute("data-state") == "up" for r in rows()), 30,
              "the page never showed three live nodes")
        assert sorted(r.get_attribute("data-node") for r in rows()) == ["n0", "n1", "n2"]
        _wait(lambda: browser.find_element(By.ID, "leader-default").text == leader, 30,
              f"the page never showed the leader {leader}")
        assert browser.find_element(By.ID, "served-by").text == follower["id"]
        assert TOKEN not in browser.find_element(By.TAG_NAME, "body").text
        assert len(browser.find_elements(By.CSS_SELECTOR, "#bookies tbody tr[data-bookie]")) == 3
        # under load the leader's row shows its appends per second and the sparklines fill
        load = subprocess.Popen([*cli, "bench", "--cluster", data, "--writers", "16", "--duration-s", "6",
                                 "--warmup-s", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        try:
            _wait(lambda: int(browser.find_element(By.CSS_SELECTOR, f"#nodes tr[data-node='{leader}'] td:nth-child(6)")
                              .text or 0) > 0, 30, "the leader's appends/s never rose under load")
            time.sleep(3)  # a few more points in the sparklines for the screenshot
        finally:
            load.wait(60)
        shots = os.environ.get("QUORUMLOG_SCREENSHOT_DIR") or str(tmp_path)
        os.makedirs(shots, exist_ok=True)
        browser.save_screenshot(os.path.join(shots, f"status-page-{time.strftime('%Y-%m-%d')}.png"))

        os.kill(next(n["pid"] for n in doc["nodes"] if n["id"] == leader), signal.SIGKILL)
        new = _wait(lambda: (lambda t: t if t not in (leader, "none", "") else None)(
            browser.find_element(By.ID, "leader-default").text), 30, "the page never showed a new leader")
        assert new in {"n0", "n1", "n2"} - {leader}
        _wait(lambda: browser.find_element(By.CSS_SELECTOR, f"#nodes tr[data-node='{leader}']")
              .get_attribute("data-state") == "down", 30, "the killed leader never showed as unreachable")
        # the dead member stays visible: in its groups' member lists and among the bookies, red, with how long
        member = browser.find_element(By.CSS_SELECTOR, f"#groups tr[data-group='default'] [data-member='{leader}']")
        assert member.get_attribute("data-state") == "down" and "down" in member.text, member.text
        assert len(browser.find_elements(By.CSS_SELECTOR, "#groups tr[data-group='default'] [data-member]")) == 3
        assert browser.find_element(By.CSS_SELECTOR, f"#bookies tr[data-bookie='{leader}']") \
            .get_attribute("data-state") == "down"
        _wait(lambda: "unreachable for " in browser.find_element(By.CSS_SELECTOR, f"#nodes tr[data-node='{leader}']")
              .text, 10, "the dead node's row never said for how long")
        # without the token the page says what is missing instead of showing anything
        browser.get(f"https://127.0.0.1:{follower['http_port']}/cluster")
        assert "unauthorized" in browser.find_element(By.TAG_NAME, "body").text
    finally:
        subprocess.run([*cli, "cluster", "down", "--data-dir", data], capture_output=True, timeout=60, env=env)
