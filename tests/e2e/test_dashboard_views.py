"""The dashboard's tier and connectors pages (docs/dashboard.md).

The tier page runs on a small cluster with a tier: one
nameserver, one storage node (one raft group) uploading to ``file://<tmp>/tier`` in
small batches, no broker (appends go to the group's leader), and ``rip5 dashboard
--tier-url`` on the same tier. A second dashboard reads a tier whose manifest is
damaged and shows the cause. The connectors page reads a connector's metrics:
the connector's own metric set (connector/runner.py ``Metrics``) served by
prometheus-client's HTTP exporter in this process. With
``DASHBOARD_SCREENSHOTS=DIR`` both pages are saved there
(docs/img/dashboard-tier.png, dashboard-connectors.png), by headless Chromium."""

from __future__ import annotations

import html
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import start_http_server

from angelia_rpc.ports import free_port
from connector.runner import Metrics
from tests.e2e.cluster import LocalCluster
from tests.e2e.dashboard_process import fetch, start_dashboard
from tests.e2e.storage_calls import append, running
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e

TOPIC = "shelved"
NORMAL = 1
SENT = 30


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The module's cluster; its tier is the folder ``tier`` in its root."""
    root = tmp_path_factory.mktemp("dashboard-tier")
    batches = ("--tier-batch-messages", "10", "--tier-batch-wait-ms", "200")
    tier_flags = ("--tier-url", f"file://{root / 'tier'}", *batches)
    single = ("--replication-factor", "1")
    local = LocalCluster(
        root, storage=1, brokers=0, groups=1, nameserver_flags=single, storage_flags=tier_flags
    )
    yield from running(local)


def cells(page: str, row_id: str) -> list[str]:
    """The text of each cell of the table row ``row_id`` ([] if the page has none)."""
    row = re.search(rf'<tr id="{re.escape(row_id)}">(.*?)</tr>', page, re.DOTALL)
    if row is None:
        return []
    return [html.unescape(cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row.group(1))]


def screenshot(url: str, name: str) -> None:
    """Save the page at ``url`` as ``dashboard-<name>.png`` when DASHBOARD_SCREENSHOTS
    names a folder."""
    folder = os.environ.get("DASHBOARD_SCREENSHOTS")
    if folder:
        path = Path(folder) / f"dashboard-{name}.png"
        flags = ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1100,500"]
        argv = ["/usr/bin/chromium", *flags, f"--screenshot={path}", url]
        subprocess.run(argv, check=True, capture_output=True, timeout=60)


def test_the_tier_page_shows_each_queues_upload_point_and_lag(cluster: LocalCluster) -> None:
    cluster.create({TOPIC: (1, NORMAL)}, {})
    append(cluster, TOPIC, 0, [f"shelved-{i}" for i in range(SENT)])
    tier_url = f"file://{cluster.root / 'tier'}"
    dashboard = start_dashboard(cluster, "dashboard", "--tier-url", tier_url)
    try:
        url = f"http://{dashboard.endpoint}/tier"
        row: list[str] = []

        def uploaded() -> bool:
            nonlocal row
            status, page = fetch(url)
            assert status == 200, page
            row = cells(page, f"tier-{TOPIC}-0")
            return bool(row) and row[3] == str(SENT)

        wait_until(uploaded, timeout_s=30, what="every message uploaded, on the page")
        group, queue, _applied, upload_point, end, lag, newest = row
        assert (group, queue, upload_point, end, lag) == ("1", f"{TOPIC}:0", "30", "30", "0")
        assert newest.endswith(" s ago")
        screenshot(url, "tier")
    finally:
        assert dashboard.stop() == 0, (cluster.root / "dashboard.log").read_text()[-4000:]


def test_a_damaged_manifest_is_shown_with_its_cause(cluster: LocalCluster, tmp_path: Path) -> None:
    damaged = tmp_path / "groups" / "00000"
    damaged.mkdir(parents=True)
    (damaged / "manifest.json").write_bytes(b"not a manifest")
    dashboard = start_dashboard(cluster, "damaged", "--tier-url", f"file://{tmp_path}")
    try:
        status, page = fetch(f"http://{dashboard.endpoint}/tier")
        assert status == 502, page
        shown = re.search(r'<p class="error" id="error">(.*?)</p>', page)
        assert shown is not None, page
        message = html.unescape(shown.group(1))
        assert message.startswith("the tier cannot be read: ObjectCorrupted: "), message
        assert "manifest.json" in message, message
    finally:
        assert dashboard.stop() == 0, (cluster.root / "damaged.log").read_text()[-4000:]


def test_the_connectors_page_shows_each_rules_figures_from_its_metrics(
    cluster: LocalCluster,
) -> None:
    metrics = Metrics()
    metrics.messages.labels("mirror-orders").inc(120)
    metrics.bytes.labels("mirror-orders").inc(4_800)
    metrics.lag.labels("mirror-orders").set(7)
    metrics.delay.labels("mirror-orders").set(35)
    metrics.last_sync.labels("mirror-orders").set(1)
    metrics.errors.labels("mirror-audit").inc(2)
    port = free_port()
    exporter, thread = start_http_server(port, "127.0.0.1", registry=metrics.registry)
    silent = f"127.0.0.1:{free_port()}"  # nothing listens there
    targets = f"127.0.0.1:{port},{silent}"
    dashboard = start_dashboard(cluster, "connectors", "--connector-metrics", targets)
    try:
        url = f"http://{dashboard.endpoint}/connectors"
        status, page = fetch(url)
        assert status == 200, page
        orders = cells(page, "rule-mirror-orders")
        assert orders[:6] == [f"127.0.0.1:{port}", "mirror-orders", "120", "4800", "7", "35 ms"]
        assert orders[6].endswith(" ago")  # synced at epoch ms 1
        assert orders[7] == "0"
        audit = cells(page, "rule-mirror-audit")
        assert audit == [f"127.0.0.1:{port}", "mirror-audit", "0", "0", "0", "0 ms", "never", "2"]
        assert f"metrics not answering: {silent}" in page
        screenshot(url, "connectors")
    finally:
        exporter.shutdown()
        exporter.server_close()
        thread.join(timeout=10)
        assert dashboard.stop() == 0, (cluster.root / "connectors.log").read_text()[-4000:]
