"""A real Prometheus (Debian's ``prometheus``, in the Makefile's SYSTEM_DEPS) scraping
given targets every second, and its query API, for the metrics tests."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from angelia_rpc.ports import free_port

WAIT_S = 60.0


class Prometheus:
    """A running Prometheus at ``address``."""

    def __init__(self, address: str) -> None:
        self.address = address

    def query(self, expression: str) -> list[dict[str, Any]]:
        """The instant vector ``expression`` gives now ([] while Prometheus is not up)."""
        url = f"http://{self.address}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
        try:
            answer = json.loads(urllib.request.urlopen(url, timeout=5).read())
        except OSError:
            return []
        assert answer["status"] == "success", answer
        return list(answer["data"]["result"])

    def value(self, expression: str) -> float | None:
        """The value of a one-element vector, None if it is empty."""
        found = self.query(expression)
        assert len(found) <= 1, (expression, found)
        return float(found[0]["value"][1]) if found else None

    def wait_for(
        self, what: str, expression: str, check: Callable[[float], bool], timeout_s: float = WAIT_S
    ) -> float:
        """Wait until ``expression`` has a value that passes ``check``; that value."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.value(expression)
            if value is not None and check(value):
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}: {expression} = {value}")
            time.sleep(0.2)


@contextmanager
def prometheus(root: Path, jobs: Mapping[str, Sequence[str]]) -> Iterator[Prometheus]:
    """Prometheus scraping every second the targets of each job (job -> host:port list),
    with its data and log under ``root``."""
    binary = shutil.which("prometheus")
    assert binary, "prometheus is missing: run make system-deps"
    root.mkdir(parents=True, exist_ok=True)
    scrape = "".join(
        f"  - job_name: {job}\n    static_configs:\n      - targets: {list(targets)!r}\n"
        for job, targets in jobs.items()
    )
    config = root / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n" + scrape
    )
    address = f"127.0.0.1:{free_port()}"
    with (root / "prometheus.log").open("wb") as log:
        server = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={root / 'tsdb'}",
                f"--web.listen-address={address}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield Prometheus(address)
    finally:
        server.terminate()
        server.wait(timeout=30)
