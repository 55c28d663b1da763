"""Operating a running cluster: a real Prometheus scrapes every role's metrics
(docs/metrics.md) while the official client loads the cluster, and
``rip5 dashboard`` (docs/dashboard.md) is driven in a real headless Chromium
(Debian's ``chromium`` and ``chromium-driver``, Makefile SYSTEM_DEPS; Selenium,
no browser download).

One cluster (a nameserver, three storage nodes, a broker; every process with
its own ``--metrics-listen``), one Prometheus, one dashboard and one browser
session serve the whole module; its last test turns ACL on (it creates users) and
logs in to a second dashboard started with ``--acl``. With ``DASHBOARD_SCREENSHOTS=DIR`` the
dashboard tests save a screenshot of each page there (how docs/img/dashboard-*.png
are made).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select, WebDriverWait

from angelia_rpc.nameserver_client import NameserverClient
from protocol import nameserver_api as api
from protocol.acl import Action, Decision, UserType
from protocol.acl_wire import signed_by
from tests.e2e.cluster import LocalCluster
from tests.e2e.dashboard_process import start_dashboard
from tests.e2e.prometheus import Prometheus, prometheus
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.alone]

NORMAL = 1
GROUPS = 8
TOPIC = "metered"
GROUP = "metered-group"
CONSUMED = 40  # the group acks this many, then lags behind the rest
DELAYED_TOPIC = "later"
DELAYED = 5
DELAY = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = LocalCluster(tmp_path_factory.mktemp("ops"), storage=3, brokers=1, groups=GROUPS)
    try:
        local.start()
        # One queue: the group's lag covers the queues it has consumption state in
        # (docs/metrics.md), and it consumes this one.
        local.create({TOPIC: (1, NORMAL), DELAYED_TOPIC: (2, DELAY)}, {GROUP: (False, 3)})
        yield local
    finally:
        codes = local.stop()
    died = {name: code for name, code in codes.items() if code != 0}
    assert not died, f"processes did not stop cleanly: {died} (logs in {local.root})"


@pytest.fixture(scope="module")
def scraper(cluster: LocalCluster) -> Iterator[Prometheus]:
    jobs: dict[str, list[str]] = {}
    for name, address in cluster.metrics_addresses.items():
        jobs.setdefault(name.split("-")[0], []).append(address)
    with prometheus(cluster.root / "prometheus", jobs) as server:
        yield server


def client(cluster: LocalCluster, scenario: str, *args: object) -> subprocess.Popen[str]:
    """Start a scenario of tests/e2e/metrics_client.py (the official client) on broker 0."""
    home = cluster.root / "home"
    home.mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "tests.e2e.metrics_client", scenario]
    argv += [str(cluster.broker_port(0)), *(str(a) for a in args)]
    return subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HOME": str(home)},
    )


def finish(process: subprocess.Popen[str], stop: Path) -> dict[str, Any]:
    """Tell a scenario to stop; the JSON it printed."""
    stop.touch()
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, f"client failed:\n{out}\n{err}"
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def test_prometheus_scrapes_every_role_and_queries_rates_and_lag_under_load(
    cluster: LocalCluster, scraper: Prometheus
) -> None:
    processes = len(cluster.metrics_addresses)
    scraper.wait_for("every process scraped", "sum(up)", lambda v: v == processes)

    stop = cluster.root / "load.stop"
    load = client(cluster, "load", TOPIC, GROUP, stop, CONSUMED)
    try:
        rate = f'sum(rate(rocketmq_messages_in_total{{topic="{TOPIC}"}}[5s]))'
        scraper.wait_for("a send rate", rate, lambda v: v > 0)
        assert load.poll() is None, "the load ended before its rate was seen"
        lag = f'sum(rocketmq_consumer_lag_messages{{consumer_group="{GROUP}",topic="{TOPIC}"}})'
        scraper.wait_for("the group's lag", lag, lambda v: v > 0)
        producers = 'sum(rocketmq_producer_connections{language="PYTHON",protocol_type="grpc"})'
        scraper.wait_for("the load's producer", producers, lambda v: v >= 1)
        assert load.poll() is None, "the load ended before the lag was seen"
    finally:
        done = finish(load, stop)
    sent, acked = done["sent"], done["acked"]
    assert acked == CONSUMED
    assert sent > CONSUMED

    # Once the load is over, the figures settle on exactly what the client did.
    total_in = f'sum(rocketmq_messages_in_total{{topic="{TOPIC}"}})'
    scraper.wait_for("every send counted", total_in, lambda v: v == sent)
    scraper.wait_for("the lag of what was not consumed", lag, lambda v: v == sent - acked)
    total_out = f'sum(rocketmq_messages_out_total{{topic="{TOPIC}",consumer_group="{GROUP}"}})'
    assert scraper.value(total_out) == acked
    body_bytes = f'sum(rocketmq_throughput_in_total{{topic="{TOPIC}"}})'
    assert scraper.value(body_bytes) == sum(len(f"m{i}".encode() * 8) for i in range(sent))
    sizes = f'sum(rocketmq_message_size_bucket{{topic="{TOPIC}",le="1024.0"}})'
    assert scraper.value(sizes) == sent
    age = f'max(rocketmq_consumer_lag_latency_milliseconds{{consumer_group="{GROUP}"}})'
    assert (scraper.value(age) or 0) > 0
    sends = 'sum(rocketmq_rpc_latency_milliseconds_count{request_code="SendMessage"})'
    assert (scraper.value(sends) or 0) >= sent

    # Delayed messages wait in the storage's timers, counted per topic.
    later = client(cluster, "delayed", DELAYED_TOPIC, "-", cluster.root / "later.stop", DELAYED)
    assert finish(later, cluster.root / "later.stop") == {"sent": DELAYED}
    timing = f'sum(rocketmq_timing_messages{{topic="{DELAYED_TOPIC}"}})'
    scraper.wait_for("the delayed messages", timing, lambda v: v == DELAYED)

    # Storage and nameserver figures of their own.
    assert scraper.value('sum(rip5_raft_leaders{node_type="storage"})') == GROUPS
    assert scraper.value('sum(rip5_raft_groups{node_type="storage"})') == GROUPS * 3
    assert scraper.value('rip5_nameserver_storage_nodes{alive="true"}') == 3
    assert scraper.value('rip5_nameserver_leader{node_type="nameserver"}') == 1
    counted = ("sum(rip5_nameserver_topics)", "sum(rip5_nameserver_consumer_groups)")
    for what, query in zip(("topics", "consumer groups"), counted, strict=True):
        scraper.wait_for(f"the {what} counted", query, lambda v: v >= 1)
    assert (scraper.value('sum(rip5_raft_fsync_seconds_count{node_type="storage"})') or 0) > 0


# -- the dashboard, in Chromium ---------------------------------------------------------

WATCHED = "watched"
WATCHERS = "watchers"
SENT = 60
ACKED = 15
PAGES = ("/", "/topics", "/groups", "/clients", "/messages", "/dlq", "/tier", "/connectors")


@pytest.fixture(scope="module")
def dashboard(cluster: LocalCluster) -> Iterator[str]:
    """``rip5 dashboard`` on the cluster, charting its broker; its base URL."""
    broker_metrics = cluster.metrics_addresses["broker-1"]
    flags = ("--broker-metrics", broker_metrics, "--sample-interval-ms", "500")
    process = start_dashboard(cluster, "dashboard", *flags)
    try:
        yield f"http://{process.endpoint}"
    finally:
        assert process.stop() == 0, (cluster.root / "dashboard.log").read_text()[-4000:]


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    """One headless Chromium session for every dashboard test."""
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    options.add_argument("--window-size=1100,800")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
    try:
        yield driver
    finally:
        driver.quit()


def visit(browser: WebDriver, url: str) -> None:
    """Load ``url``; the page must not log an error in the console."""
    browser.get(url)
    severe = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert not severe, (url, severe)


def submit(browser: WebDriver, button: WebElement) -> None:
    """Click a form's button and wait until the page it leads to has replaced this one."""
    page = browser.find_element(By.TAG_NAME, "html")
    button.click()

    def replaced(_browser: WebDriver) -> bool:
        try:
            page.is_enabled()
        except StaleElementReferenceException:
            return True
        except WebDriverException as exc:
            # chromedriver, asked in the middle of the navigation, answers this instead
            # of "stale element": the old page's node has left its document.
            if "does not belong to the document" in str(exc):
                return True
            raise
        return False

    WebDriverWait(browser, 30).until(replaced)


def screenshot(browser: WebDriver, name: str) -> None:
    """Save the page as ``dashboard-<name>.png`` when DASHBOARD_SCREENSHOTS names a
    folder."""
    folder = os.environ.get("DASHBOARD_SCREENSHOTS")
    if folder:
        browser.save_screenshot(str(Path(folder) / f"dashboard-{name}.png"))


def text_of(browser: WebDriver, element_id: str) -> str:
    """The text of the element with ``element_id`` (failing with the page's text if none)."""
    found = browser.find_elements(By.ID, element_id)
    assert found, f"no #{element_id} on {browser.current_url}:\n{browser.page_source[-3000:]}"
    return str(found[0].text)


def test_every_dashboard_page_loads_without_console_errors(
    browser: WebDriver, dashboard: str, cluster: LocalCluster
) -> None:
    for path in PAGES:
        visit(browser, dashboard + path)
        assert browser.title.endswith("rip5 dashboard"), (path, browser.title)
    visit(browser, dashboard + "/")
    assert text_of(browser, "storage-nodes").count(" up ") == 3
    assert "up" in text_of(browser, "brokers")
    raft_rows = browser.find_elements(By.CSS_SELECTOR, "#raft-groups tr")
    assert len(raft_rows) == GROUPS + 1  # and the header

    # The chart samples the broker's metrics every 500 ms: two samples make a rate.
    def charted() -> bool:
        visit(browser, dashboard + "/")
        return bool(browser.find_elements(By.CSS_SELECTOR, "svg.chart polyline"))

    wait_until(charted, timeout_s=30, what="the throughput chart")
    screenshot(browser, "cluster")


def test_a_topic_is_created_updated_and_deleted_from_the_page(
    browser: WebDriver, dashboard: str
) -> None:
    visit(browser, dashboard + "/topics")
    form = browser.find_element(By.ID, "create-topic")
    form.find_element(By.NAME, "name").send_keys("from-the-page")
    queues = form.find_element(By.NAME, "queues")
    queues.clear()
    queues.send_keys("4")
    form.find_element(By.NAME, "local_retention_bytes").send_keys(str(64 << 20))
    submit(browser, form.find_element(By.TAG_NAME, "button"))
    assert text_of(browser, "note") == "created topic from-the-page"
    row = browser.find_element(By.ID, "topic-from-the-page")
    assert row.text.split()[:3] == ["from-the-page", "4", "normal"]
    cells = [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
    assert cells[4:7] == ["3 d", "local bytes 64 MiB", "off"], cells
    screenshot(browser, "topics")

    row.find_element(By.NAME, "queues").send_keys("8")
    row.find_element(By.NAME, "retention_ms").send_keys("5400000")
    Select(row.find_element(By.NAME, "read_replicas")).select_by_visible_text("on")
    submit(browser, row.find_element(By.XPATH, ".//button[text()='Update']"))
    assert text_of(browser, "note") == "updated topic from-the-page"
    row = browser.find_element(By.ID, "topic-from-the-page")
    cells = [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
    assert cells[:2] == ["from-the-page", "8"]
    assert cells[4:7] == ["1 h 30 min", "local bytes 64 MiB", "on"], cells

    # A limit that is not a number: 400, naming the field; the topic is untouched.
    row.find_element(By.NAME, "retention_ms").send_keys("soon")
    submit(browser, row.find_element(By.XPATH, ".//button[text()='Update']"))
    assert text_of(browser, "error") == "retention_ms: 'soon' is not a whole number"
    browser.get_log("browser")  # the refusal's 400, expected
    visit(browser, dashboard + "/topics")
    assert text_of(browser, "topic-from-the-page").split()[4:7] == ["1", "h", "30"]

    form = browser.find_element(By.ID, "create-topic")
    form.find_element(By.NAME, "name").send_keys("from-the-page")  # exists already
    submit(browser, form.find_element(By.TAG_NAME, "button"))
    assert text_of(browser, "error") == "ALREADY_EXISTS: topic 'from-the-page' exists already"
    # The refusal's status (400) is the console's only entry.
    logged = browser.get_log("browser")
    assert all("400" in entry["message"] for entry in logged), logged

    visit(browser, dashboard + "/topics")
    row = browser.find_element(By.ID, "topic-from-the-page")
    submit(browser, row.find_element(By.XPATH, ".//button[text()='Delete']"))
    assert text_of(browser, "note") == "deleted topic from-the-page"
    assert not browser.find_elements(By.ID, "topic-from-the-page")


def test_a_groups_lag_and_its_grpc_consumer_show_while_it_runs(
    browser: WebDriver, dashboard: str, cluster: LocalCluster
) -> None:
    cluster.create({WATCHED: (1, NORMAL)}, {WATCHERS: (False, 3)})
    sender = client(cluster, "send", WATCHED, "-", cluster.root / "unused.stop", SENT)
    ids = finish(sender, cluster.root / "unused.stop")["ids"]
    stop = cluster.root / "watchers.stop"
    consumer = client(cluster, "consume", WATCHED, WATCHERS, stop, ACKED)
    try:
        assert consumer.stdout is not None
        assert json.loads(consumer.stdout.readline()) == {"acked": ACKED}
        assert consumer.poll() is None  # it runs on, connected and idle

        def shown() -> bool:
            visit(browser, f"{dashboard}/groups/{WATCHERS}")
            clients = text_of(browser, "clients")
            return text_of(browser, "total-lag") == str(SENT - ACKED) and "PYTHON" in clients

        wait_until(shown, timeout_s=30, what="the group's lag and consumer")
        (row,) = browser.find_elements(By.CSS_SELECTOR, "#lag tr")[1:]
        assert row.find_element(By.CLASS_NAME, "lag").text == str(SENT - ACKED)
        assert "simple consumer" in text_of(browser, "clients")
        screenshot(browser, "group")
        visit(browser, dashboard + "/clients")
        assert WATCHERS in text_of(browser, "clients")
        screenshot(browser, "clients")
    finally:
        finish(consumer, stop)

    visit(browser, f"{dashboard}/messages?id={ids[7]}")
    found = text_of(browser, "found")
    assert ids[7] in found
    assert "body of message 7" in found
    visit(browser, f"{dashboard}/messages?topic={WATCHED}&key=key-3")
    assert "body of message 3" in text_of(browser, "found")
    screenshot(browser, "messages")
    visit(browser, f"{dashboard}/dlq?group={WATCHERS}")
    assert "no dead letter" in text_of(browser, "dead-letters")


def test_a_dead_letter_is_shown_and_resent_from_the_page(
    browser: WebDriver, dashboard: str, cluster: LocalCluster
) -> None:
    cluster.create({"doomed": (1, NORMAL)}, {"picky": (False, 1)})  # one attempt only
    stop = cluster.root / "doomed.stop"
    done = finish(client(cluster, "dead_letter", "doomed", "picky", stop), stop)
    assert done["redelivered"] == 0  # dead-lettered instead

    def listed() -> bool:
        visit(browser, f"{dashboard}/dlq?group=picky")
        return done["id"] in text_of(browser, "dead-letters")

    wait_until(listed, timeout_s=30, what="the dead letter on the page")
    letters = text_of(browser, "dead-letters")
    assert "doomed" in letters  # its original topic
    assert "nobody wants me" in letters
    screenshot(browser, "dlq")
    submit(browser, browser.find_element(By.CSS_SELECTOR, "#resend button"))
    assert text_of(browser, "note") == "resent 1 dead letters of picky"

    # Resent: the message is in its topic again (a new id, its origin in a property).
    def waiting_again() -> bool:
        visit(browser, f"{dashboard}/groups/picky")
        return text_of(browser, "total-lag") == "1"

    wait_until(waiting_again, timeout_s=30, what="the resent message waiting for the group")


# -- the dashboard behind a login (ACL on), last: the users it creates turn ACL on -------

SUPER_USER = ("root", "root-secret")
VIEWER = ("viewer", "viewer-secret")


async def _add_users(cluster: LocalCluster) -> None:
    """A super user (the first, unsigned: it turns ACL on) and a normal user allowed to
    create only topics named ``viewer-*``."""
    client = NameserverClient(cluster.nameserver_addresses, cluster.rpc.rpc_config())
    try:
        root = api.UserInfo(*SUPER_USER, int(UserType.SUPER))
        await client.call(lambda ns: ns.create_user(api.UserRequest(root)))
        signed = signed_by(*SUPER_USER, int(time.time() * 1000))
        viewer = api.UserInfo(*VIEWER, int(UserType.NORMAL))
        await client.call(lambda ns: ns.create_user(api.UserRequest(viewer, signed)))
        entry = api.PolicyEntryInfo("Topic:viewer-*", [int(Action.CREATE)], int(Decision.ALLOW))
        policy = api.AclRequest(api.AclInfo(VIEWER[0], [entry]), signed)
        await client.call(lambda ns: ns.create_acl(policy))
    finally:
        await client.close()


def refusals_logged(browser: WebDriver, status: int) -> None:
    """The console's entries since the last look are all the page's ``status``."""
    logged = browser.get_log("browser")
    assert all(str(status) in entry["message"] for entry in logged), logged


def log_in(browser: WebDriver, user: str, secret: str) -> None:
    """Fill the login form and send it."""
    form = browser.find_element(By.ID, "login")
    name = form.find_element(By.NAME, "user")
    name.clear()  # a refused login keeps the name typed
    name.send_keys(user)
    form.find_element(By.NAME, "secret").send_keys(secret)
    submit(browser, form.find_element(By.TAG_NAME, "button"))


def test_with_acl_a_user_logs_in_and_changes_run_signed_as_that_user(
    browser: WebDriver, cluster: LocalCluster
) -> None:
    asyncio.run(_add_users(cluster))
    process = start_dashboard(cluster, "acl-dashboard", "--acl")
    try:
        base = f"http://{process.endpoint}"
        visit(browser, base + "/topics")  # no login yet: to the login page
        assert browser.current_url == base + "/login"
        screenshot(browser, "login")

        log_in(browser, VIEWER[0], "not-the-secret")
        assert text_of(browser, "error").startswith("UNAUTHENTICATED: ")
        refusals_logged(browser, 401)
        log_in(browser, "nobody", "whatever")
        assert text_of(browser, "error") == "UNAUTHENTICATED: user 'nobody' does not exist"
        refusals_logged(browser, 401)

        log_in(browser, *VIEWER)
        assert text_of(browser, "note") == "logged in as viewer"
        assert text_of(browser, "user-name") == "viewer"

        # Signed as the viewer: its policy allows creating viewer-* topics only.
        for name in ("viewer-made", "elsewhere"):
            visit(browser, base + "/topics")
            form = browser.find_element(By.ID, "create-topic")
            form.find_element(By.NAME, "name").send_keys(name)
            submit(browser, form.find_element(By.TAG_NAME, "button"))
        error = text_of(browser, "error")
        assert error.startswith("PERMISSION_DENIED: "), error
        assert "viewer" in error, error
        assert "elsewhere" in error, error
        refusals_logged(browser, 403)
        screenshot(browser, "forbidden")
        visit(browser, base + "/topics")
        assert browser.find_elements(By.ID, "topic-viewer-made")
        assert not browser.find_elements(By.ID, "topic-elsewhere")

        submit(browser, browser.find_element(By.ID, "logout"))
        assert browser.current_url == base + "/login"
        visit(browser, base + "/")
        assert browser.current_url == base + "/login"  # logged out
    finally:
        assert process.stop() == 0, (cluster.root / "acl-dashboard.log").read_text()[-4000:]
