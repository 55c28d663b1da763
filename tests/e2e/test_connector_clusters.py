"""The connector between two real rip5 clusters ("east" copies to "west").

Two clusters for the module (each 1 nameserver, 3 storage nodes, 2 brokers,
4 raft groups) and one connector process (``python -m rip5 connector``) run
by the tests, SIGKILLed and restarted, sent SIGHUP. Messages go in and come
out through our own gRPC v2 stubs. Every check waits for a condition with a
deadline.

Sizes are kept small for ``make test`` (hundreds of messages, about a
minute): the 100,000-message run with crashes belongs to a larger opt-in run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from angelia_rpc.ports import free_port
from connector.plan import Pending, format_pending, last_pending
from protocol.rocketmq.v2 import definition_pb2 as pb
from protocol.rocketmq.v2 import service_pb2 as spb
from protocol.rocketmq.v2 import service_pb2_grpc
from tests.e2e.cluster import RIP5, LocalCluster, Process
from tests.e2e.prometheus import prometheus

pytestmark = [pytest.mark.integration, pytest.mark.alone]

NORMAL, FIFO = 1, 2
META = (("x-mq-client-id", "e2e-connector-client"),)
WAIT_S = 60.0
FIFO_MESSAGES = int(os.environ.get("RIP5_E2E_CONNECTOR_MESSAGES", "200"))
"""Messages of the crash test: 200 in ``make test``; the larger run sets 100000
(``RIP5_E2E_CONNECTOR_MESSAGES=100000 pytest tests/e2e/test_connector_clusters.py``)."""
Stub = service_pb2_grpc.MessagingServiceStub

EAST_TOPICS = {
    "Orders": (2, NORMAL),
    "Late": (1, NORMAL),
    "Fifo": (2, FIFO),
    "Added": (1, NORMAL),
    "Made": (2, FIFO),
}
WEST_TOPICS = {
    "OrdersCopy": (3, NORMAL),
    "Late": (1, NORMAL),
    "Fifo": (3, FIFO),
    "Added": (1, NORMAL),
}
GROUPS = (
    "connector-orders",
    "connector-late",
    "connector-fifo",
    "connector-added",
    "connector-made",
    "moving",
)


def _rules(east: LocalCluster, west: LocalCluster, *, added: bool = False) -> str:
    text = f"""
[clusters.east]
endpoints = ["127.0.0.1:{east.broker_port(0)}", "127.0.0.1:{east.broker_port(1)}"]
[clusters.west]
endpoints = ["127.0.0.1:{west.broker_port(0)}", "127.0.0.1:{west.broker_port(1)}"]

[[rules]]
name = "orders"
from = "east"
to = "west"
topic = "Orders"
target_topic = "OrdersCopy"
filter = "TagA || TagB"
start = "earliest"

[[rules]]
name = "late"
from = "east"
to = "west"
topic = "Late"

[[rules]]
name = "fifo"
from = "east"
to = "west"
topic = "Fifo"
start = "earliest"
"""
    if added:
        text += '\n[[rules]]\nname = "added"\nfrom = "east"\nto = "west"\ntopic = "Added"\n'
    return text


class Connector:
    """The connector process of the tests."""

    def __init__(self, root: Path, rules_path: Path) -> None:
        self.root = root
        self.rules_path = rules_path
        self.process: Process | None = None
        self.metrics = ""
        self.before: dict[str, list[str]] = {}

    def start(self) -> None:
        argv = [
            *RIP5,
            "connector",
            "--data-dir",
            str(self.root / "connector"),
            "--rules",
            str(self.rules_path),
            "--metrics-listen",
            f"127.0.0.1:{free_port()}",
        ]
        self.process = Process("connector", argv, self.root / "connector.log", {})
        self.process.start()
        self.metrics = argv[-1]

    def command(self, *args: str) -> str:
        done = subprocess.run(
            [*RIP5, "connector", *args, "--rules", str(self.rules_path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout


@pytest.fixture(scope="module")
def clusters(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LocalCluster, LocalCluster]]:
    """East and west, with their topics and groups."""
    root = tmp_path_factory.mktemp("connector")
    east = LocalCluster(root / "east", groups=4, brokers=2)
    west = LocalCluster(root / "west", groups=4, brokers=2)
    try:
        east.start()
        west.start()
        east.create(EAST_TOPICS, dict.fromkeys(GROUPS, (False, 3)))
        # The target has the "late" rule's group too: the connector reads the target
        # with it when it looks for copies of a batch a crash left unfinished.
        west.create(WEST_TOPICS, dict.fromkeys(("reader", "connector-late"), (False, 3)))
        yield east, west
    finally:
        codes = {**east.stop(), **{f"west-{k}": v for k, v in west.stop().items()}}
    died = {name: code for name, code in codes.items() if code != 0}
    assert not died, f"processes did not stop cleanly: {died} (logs in {root})"


@pytest.fixture(scope="module")
def stubs(clusters: tuple[LocalCluster, LocalCluster]) -> Iterator[tuple[Stub, Stub]]:
    east, west = clusters
    # The tests use each cluster's second broker: the crash test kills the first.
    ports = (east.broker_port(1), west.broker_port(1))
    channels = [grpc.insecure_channel(f"127.0.0.1:{port}") for port in ports]
    try:
        yield Stub(channels[0]), Stub(channels[1])
    finally:
        for channel in channels:
            channel.close()


@pytest.fixture(scope="module")
def connector(
    clusters: tuple[LocalCluster, LocalCluster], stubs: tuple[Stub, Stub]
) -> Iterator[Connector]:
    """The connector, started after "Orders" and "Late" got messages (see the tests)."""
    east, west = clusters
    root = east.root.parent
    rules_path = root / "rules.toml"
    rules_path.write_text(_rules(east, west))
    before = {
        "orders": _send(stubs[0], "Orders", [("TagA", 3), ("TagC", 2), ("TagB", 2), ("", 1)]),
        "late": _send(stubs[0], "Late", [("", 4)]),
    }
    process = Connector(root, rules_path)
    process.before = before
    process.start()
    try:
        yield process
    finally:
        if process.process is not None:
            assert process.process.stop() == 0, (root / "connector.log").read_text()[-3000:]


_counter = iter(range(10**9))


def _send(
    stub: Stub,
    topic: str,
    batches: list[tuple[str, int]],
    group: str | None = None,
    per_call: int = 1,
) -> list[str]:
    """Send (tag, count) batches, ``per_call`` messages a call; the ids in order."""
    messages = []
    for tag, count in batches:
        for _ in range(count):
            message_id = f"01{os.getpid():08X}{next(_counter):022X}"
            system = pb.SystemProperties(
                message_id=message_id,
                message_type=pb.FIFO if group else pb.NORMAL,
                body_encoding=pb.IDENTITY,
                keys=[f"key-{message_id}"],
            )
            if tag:
                system.tag = tag
            if group:
                system.message_group = group
            messages.append(
                pb.Message(
                    topic=pb.Resource(name=topic),
                    body=f"body of {message_id}".encode(),
                    user_properties={"origin": "e2e"},
                    system_properties=system,
                )
            )
    for first in range(0, len(messages), per_call):
        request = spb.SendMessageRequest(messages=messages[first : first + per_call])
        sent = stub.SendMessage(request, metadata=META, timeout=20)
        assert sent.status.code == pb.OK, sent.status
    return [m.system_properties.message_id for m in messages]


def _stored(stub: Stub, topic: str, queues: int) -> int:
    """How many messages the topic's queues hold (from their offsets)."""
    return sum(end - first for first, end in (_offsets(stub, topic, q) for q in range(queues)))


def _offsets(stub: Stub, topic: str, queue: int) -> tuple[int, int]:
    bounds = []
    for policy in (pb.BEGINNING, pb.END):
        answer = stub.QueryOffset(
            spb.QueryOffsetRequest(
                message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=queue),
                query_offset_policy=policy,
            ),
            metadata=META,
            timeout=20,
        )
        assert answer.status.code == pb.OK, answer.status
        bounds.append(int(answer.offset))
    return bounds[0], bounds[1]


def _read(stub: Stub, topic: str, queue: int, start: int = 0) -> list[pb.Message]:
    """Every message of the queue from ``start`` to its end, by pulls."""
    _, end = _offsets(stub, topic, queue)
    found: list[pb.Message] = []
    offset = start
    while offset < end:
        request = spb.PullMessageRequest(
            group=pb.Resource(name="reader"),
            message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=queue),
            offset=offset,
            batch_size=32,
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        )
        request.long_polling_timeout.FromSeconds(5)
        for response in stub.PullMessage(request, metadata=META, timeout=30):
            kind = response.WhichOneof("content")
            if kind == "message":
                found.append(response.message)
            elif kind == "next_offset":
                offset = response.next_offset
    return found


def _copies(stub: Stub, topic: str, queues: int) -> dict[int, list[pb.Message]]:
    return {queue: _read(stub, topic, queue) for queue in range(queues)}


def _ids(copies: dict[int, list[pb.Message]]) -> list[str]:
    return [m.system_properties.message_id for q in copies.values() for m in q]


def _until(what: str, check: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _metric(connector: Connector, name: str, rule: str) -> float | None:
    text = urllib.request.urlopen(f"http://{connector.metrics}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(f'{name}{{rule="{rule}"}} '):
            return float(line.split()[-1])
    return None


def test_a_tag_filtered_renamed_copy_from_the_earliest_offset_keeps_each_message(
    connector: Connector, stubs: tuple[Stub, Stub]
) -> None:
    east, west = stubs
    before = connector.before["orders"]
    after = _send(east, "Orders", [("TagB", 2), ("TagC", 1), ("TagA", 1)])
    sent = before + after
    wanted = [i for n, i in enumerate(sent) if n not in (3, 4, 7, 10)]  # TagC and untagged
    _until("the matching messages on west", lambda: len(_ids(_copies(west, "OrdersCopy", 3))) >= 8)
    copies = _copies(west, "OrdersCopy", 3)
    assert sorted(_ids(copies)) == sorted(wanted)
    for queue, messages in copies.items():
        for message in messages:
            system = message.system_properties
            props = dict(message.user_properties)
            assert system.tag in ("TagA", "TagB")
            assert list(system.keys) == [f"key-{system.message_id}"]
            assert message.body == f"body of {system.message_id}".encode()
            assert props["origin"] == "e2e"
            assert props["CONNECTOR_SOURCE_CLUSTER"] == "east"
            assert props["CONNECTOR_SOURCE_TOPIC"] == "Orders"
            # Source queue q lands in target queue q (2 source queues, 3 target queues).
            assert int(props["CONNECTOR_SOURCE_QUEUE"]) == queue
    # The metrics count what was copied; status shows no lag once done.
    _until(
        "the metrics",
        lambda: _metric(connector, "rip5_connector_replicated_messages_total", "orders") == 8,
    )
    assert (_metric(connector, "rip5_connector_replicated_bytes_total", "orders") or 0) > 0
    assert _metric(connector, "rip5_connector_delay_milliseconds", "orders") is not None
    _until("no lag", lambda: "lag=0" in connector.command("status", "--rule", "orders"))


def test_a_latest_start_copies_only_what_came_after_the_start(
    connector: Connector, stubs: tuple[Stub, Stub]
) -> None:
    east, west = stubs
    after = _send(east, "Late", [("", 3)])
    _until("the later messages on west", lambda: len(_ids(_copies(west, "Late", 1))) >= 3)
    assert _ids(_copies(west, "Late", 1)) == after


def test_a_prometheus_server_scrapes_the_metrics_and_answers_queries(
    connector: Connector, tmp_path: Path
) -> None:
    """Debian's prometheus (SYSTEM_DEPS) scrapes /metrics; its query API gives them back."""
    with prometheus(tmp_path, {"connector": [connector.metrics]}) as server:
        query = server.query
        copied = 'rip5_connector_replicated_messages_total{job="connector",rule="orders"}'
        _until("prometheus to scrape the connector", lambda: bool(query(copied)))
        assert float(query(copied)[0]["value"][1]) == 8
        for name in (
            "rip5_connector_replicated_bytes_total",
            "rip5_connector_delay_milliseconds",
            "rip5_connector_last_sync_timestamp_milliseconds",
            "rip5_connector_lag_messages",
            "rip5_connector_errors_total",
        ):
            # Scrapes come every second: a rule's series shows once a scrape saw it.
            def both_rules(name: str = name) -> bool:
                return {"orders", "late"} <= {r["metric"]["rule"] for r in query(name)}

            _until(f"{name} of both rules", both_rules)
        # TPS is the rate of the first (it needs two scrapes).
        tps = 'rate(rip5_connector_replicated_messages_total{rule="orders"}[1m])'
        _until("a rate over two scrapes", lambda: bool(query(tps)))
        assert float(query(tps)[0]["value"][1]) >= 0


def test_a_sigkilled_connector_and_killed_brokers_lose_and_double_nothing(
    connector: Connector, stubs: tuple[Stub, Stub], clusters: tuple[LocalCluster, LocalCluster]
) -> None:
    """FIFO messages flow while the connector is SIGKILLed and restarted twice and the
    target broker and the source broker it talks to first are each SIGKILLed once (it
    goes on through the others): the target holds each message once, in the order sent
    per message group."""
    east, west = stubs
    groups = [f"g{n}" for n in range(4)]
    sent: dict[str, list[str]] = {g: [] for g in groups}
    per_call = 1 if FIFO_MESSAGES <= 1_000 else 32

    def produce() -> None:
        left = FIFO_MESSAGES
        while left:
            for group in groups:
                count = min(per_call, left)
                sent[group] += _send(east, "Fifo", [("", count)], group=group, per_call=count)
                left -= count
                if not left:
                    break

    def copied(count: int) -> Callable[[], bool]:
        return lambda: _stored(west, "Fifo", 3) >= count

    brokers = {"source broker": clusters[0].brokers[0], "target broker": clusters[1].brokers[0]}
    crashes = ("connector", "target broker", "source broker", "connector")
    step = FIFO_MESSAGES // (len(crashes) + 1)
    producer = threading.Thread(target=produce)
    producer.start()
    try:
        # The crashes come at every fifth of the copies.
        for n, crash in enumerate(crashes, start=1):
            _until(f"copies before the {crash} crash", copied(step * n), 600)
            if crash == "connector":
                assert connector.process is not None
                connector.process.kill()
                connector.start()
            else:
                brokers[crash].kill()
                _until(f"copies going on without the {crash}", copied(step * n + step // 2), 600)
                brokers[crash].start()
    finally:
        producer.join()
    total = sum(len(ids) for ids in sent.values())
    assert total == FIFO_MESSAGES
    _until("every FIFO message on west", lambda: _stored(west, "Fifo", 3) >= total, 600)
    copies = _copies(west, "Fifo", 3)
    ids = _ids(copies)
    assert len(ids) == total
    assert set(ids) == {i for g in sent.values() for i in g}
    for group in groups:
        in_target = [
            m.system_properties.message_id
            for q in copies.values()
            for m in q
            if m.system_properties.message_group == group
        ]
        assert in_target == sent[group]  # one queue per group, in the order sent


def test_sighup_adds_a_rule_without_disturbing_the_others(
    connector: Connector, stubs: tuple[Stub, Stub], clusters: tuple[LocalCluster, LocalCluster]
) -> None:
    east, west = stubs
    assert connector.process is not None
    assert connector.process.popen is not None
    pid = connector.process.popen.pid
    connector.rules_path.write_text(_rules(*clusters, added=True))
    os.kill(pid, signal.SIGHUP)
    _until(
        "the added rule's metrics",
        lambda: _metric(connector, "rip5_connector_lag_messages", "added") is not None,
    )
    added = _send(east, "Added", [("", 3)])
    late = _send(east, "Late", [("", 2)])
    _until("the added rule's copies", lambda: len(_ids(_copies(west, "Added", 1))) >= 3)
    assert _ids(_copies(west, "Added", 1)) == added
    _until("the kept rule's copies", lambda: _ids(_copies(west, "Late", 1))[-2:] == late)
    assert connector.process.alive
    assert connector.process.popen.pid == pid


def test_a_rule_with_create_makes_its_missing_target_topic(
    clusters: tuple[LocalCluster, LocalCluster], stubs: tuple[Stub, Stub]
) -> None:
    """``create = true``: the target topic is missing, so the connector creates it
    through the target's nameservers, with the source's queue count and type (FIFO)."""
    east_cluster, west_cluster = clusters
    east, west = stubs
    root = east_cluster.root.parent / "made"
    root.mkdir()
    rules_path = root / "rules.toml"
    rules_path.write_text(
        f"""
[clusters.east]
endpoints = ["127.0.0.1:{east_cluster.broker_port(1)}"]
[clusters.west]
endpoints = ["127.0.0.1:{west_cluster.broker_port(1)}"]
nameservers = {json.dumps(west_cluster.nameserver_addresses)}

[[rules]]
name = "made"
from = "east"
to = "west"
topic = "Made"
target_topic = "MadeCopy"
start = "earliest"
create = true
"""
    )
    sent = _send(east, "Made", [("", 3)], group="made-group")
    process = Connector(root, rules_path)
    process.start()  # ready once its rules are prepared: the target topic exists
    try:
        route = west.QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name="MadeCopy")), metadata=META, timeout=20
        )
        assert route.status.code == pb.OK, route.status
        assert sorted({q.id for q in route.message_queues}) == [0, 1]
        assert {t for q in route.message_queues for t in q.accept_message_types} == {pb.FIFO}
        _until(
            "the copies in the created topic", lambda: len(_ids(_copies(west, "MadeCopy", 2))) >= 3
        )
        assert sorted(_ids(_copies(west, "MadeCopy", 2))) == sorted(sent)
    finally:
        assert process.process is not None
        assert process.process.stop() == 0, (root / "connector.log").read_text()[-3000:]


def test_translate_gives_target_offsets_where_a_moved_group_resumes_without_a_gap(
    connector: Connector, stubs: tuple[Stub, Stub]
) -> None:
    east, west = stubs
    _send(east, "Orders", [("TagA", 40)])
    _until("the copies", lambda: len(_ids(_copies(west, "OrdersCopy", 3))) >= 48)
    # Group "moving" consumed the first half of each source queue.
    committed = {}
    for queue in range(2):
        _, end = _offsets(east, "Orders", queue)
        committed[queue] = end // 2
        request = spb.UpdateOffsetRequest(
            group=pb.Resource(name="moving"),
            message_queue=pb.MessageQueue(topic=pb.Resource(name="Orders"), id=queue),
            offset=end // 2,
        )
        assert east.UpdateOffset(request, metadata=META, timeout=20).status.code == pb.OK
    out = connector.command(
        "translate",
        "--group",
        "moving",
        "--data-dir",
        str(connector.root / "connector"),
        "--rule",
        "orders",
    )
    resume: dict[int, tuple[int, str]] = {}
    for line in out.splitlines():
        rule, where, queue_text, offset_text, how_text = line.split()
        assert (rule, where) == ("orders", "west/OrdersCopy")
        resume[int(queue_text)] = (int(offset_text), how_text)
    assert set(resume) == {0, 1, 2}
    assert resume[2][1] == "end"  # no source queue maps to target queue 2
    for queue in (0, 1):
        offset, how = resume[queue]
        assert how == "translated"
        resumed = _read(west, "OrdersCopy", queue, start=offset)
        seen = {int(m.user_properties["CONNECTOR_SOURCE_OFFSET"]) for m in resumed}
        every = _read(west, "OrdersCopy", queue)
        wanted = {
            int(m.user_properties["CONNECTOR_SOURCE_OFFSET"])
            for m in every
            if int(m.user_properties["CONNECTOR_SOURCE_OFFSET"]) >= committed[queue]
        }
        assert wanted
        assert wanted <= seen


def test_a_batch_left_unfinished_beyond_the_dedup_window_is_found_not_resent(
    connector: Connector, stubs: tuple[Stub, Stub]
) -> None:
    """As if a crash 10 minutes ago had left the last two messages of "Late" sent but
    not committed: on restart the connector finds their copies on the target (the dedup
    window no longer covers them) and sends nothing again."""
    east, west = stubs
    assert connector.process is not None
    assert connector.process.stop() == 0
    _, end = _offsets(east, "Late", 0)
    unfinished = end - 2
    request = spb.UpdateOffsetRequest(
        group=pb.Resource(name="connector-late"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name="Late"), id=0),
        offset=unfinished,
    )
    assert east.UpdateOffset(request, metadata=META, timeout=20).status.code == pb.OK
    marks = connector.root / "connector" / "marks" / "late.marks"
    long_ago_ms = time.time_ns() // 1_000_000 - 600_000
    with marks.open("a") as out:
        out.write(format_pending(Pending(0, unfinished, long_ago_ms)))
    before = _ids(_copies(west, "Late", 1))
    connector.start()
    _until("the rule caught up", lambda: "lag=0" in connector.command("status", "--rule", "late"))
    assert _ids(_copies(west, "Late", 1)) == before
    assert last_pending(marks.read_text())[0] == Pending(0, unfinished, long_ago_ms)  # no send
    log = (connector.root / "connector.log").read_text()
    assert "rule=late queue=0 found=2" in log


def test_a_bad_rules_file_is_refused_at_start_with_its_line_and_key(tmp_path: Path) -> None:
    rules = tmp_path / "bad.toml"
    rules.write_text(
        '[clusters.a]\nendpoints = ["127.0.0.1:1"]\n'
        '[[rules]]\nname = "x"\nfrom = "a"\nto = "b"\ntopic = "T"\n'
    )
    done = subprocess.run(
        [*RIP5, "connector", "status", "--rules", str(rules)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert f"{rules} line 6, key 'rules[0] (x).to': no cluster 'b' (clusters: a)" in done.stderr
    started = subprocess.run(
        [*RIP5, "connector", "--data-dir", str(tmp_path / "data"), "--rules", str(rules)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert started.returncode == 2
    assert started.stderr == done.stderr
    assert "Traceback" not in started.stderr
