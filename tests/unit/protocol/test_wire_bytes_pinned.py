"""The bytes of every positional encoding are pinned: raft log entries and snapshots
already on disk, and peers of the previous version, must keep decoding.

Each value below is encoded and compared with the bytes the encoders wrote
before they were rebuilt on ``protocol.positional`` (the golden hex was
computed from that code); the golden bytes must also decode back to the value.
A change of any of these bytes is a wire format change: it needs a version,
not an edit of this table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from angelia_rpc.codec import codec_named
from nameserver import commands as ns_commands
from nameserver.codec import pack, unpack
from nameserver.records import RetryPolicy, StorageLoad, TopicRoute
from nameserver.state import MetadataState
from protocol import nameserver_api as ns
from protocol import storage_api as st
from protocol.acl import Action, Decision, PolicyEntry, User, UserType, parse_resource
from protocol.errors import WireError
from protocol.message_objects import ObjectEntry
from protocol.records import MessageRecord
from protocol.vocabulary import MessageType, Permission
from storage_node.partition import commands as partition

_MSGPACK = codec_named("msgpack")


def _angelia_encode(value: object) -> bytes:
    encoded: bytes = _MSGPACK.encoder(type(value))(value)
    return encoded


def _angelia_decode(kind: type) -> Callable[[bytes], object]:
    return _MSGPACK.decoder(kind)


_RECORD = MessageRecord(
    "orders",
    3,
    "m-1",
    b"body",
    "tagA",
    ("k1", "k2"),
    "mg",
    (("a", "1"), ("b", "2")),
    1_700_000_000_000,
    1_700_000_005_000,
    MessageType.DELAY,
    "10.0.0.1:9",
    "",
    "",
)
_HANDLE = st.ReceiptHandle("orders", 3, 41, 977)

PARTITION_COMMANDS: list[tuple[str, partition.Command]] = [
    ("append", partition.Append(1_700_000_000_123, (_RECORD, _RECORD._replace(message_id="m-2")))),
    ("receive", partition.Receive(5, "g", "orders", 3, 16, 30_000, 17)),
    (
        "receive-all-fields",
        partition.Receive(
            5,
            "g",
            "orders",
            3,
            16,
            30_000,
            17,
            "a || b",
            True,
            partition.InitialPosition.LATEST,
            "x",
        ),
    ),
    (
        "filtered-receive",
        partition.FilteredReceive(
            5, "g", "orders", 3, 16, 30_000, 17, evaluated_end=9, unmatched=(4, 7)
        ),
    ),
    ("ack", partition.Ack(6, "g", (_HANDLE, _HANDLE._replace(queue_offset=42, generation=978)))),
    ("release", partition.Release(6, "g", (_HANDLE,))),
    ("change-invisible", partition.ChangeInvisibleDuration(7, "g", _HANDLE, 0)),
    ("dead-letter", partition.DeadLetter(8, "g", _HANDLE)),
    ("commit-offset", partition.CommitOffset(9, "g", "orders", 3, 100)),
    ("commit-consumer-offset", partition.CommitConsumerOffset(14, "g", "orders", 3, 100)),
    ("end-transaction", partition.EndTransaction(10, "orders", "tx-1", True)),
    ("note-checks", partition.NoteTransactionChecks(11, ("tx-1", "tx-2"), 15)),
    ("tick", partition.Tick(2**40)),
    ("cancel-timer", partition.CancelTimer(12, "orders", "m-1")),
    ("trim-queue", partition.TrimQueue(13, "orders", 3, 64)),
    ("drop-topic", partition.DropTopic(15, "orders")),
    (
        "record-upload",
        partition.RecordUpload(16, "orders", 3, ObjectEntry("o/1", 0, 10, 100, 200, 4096, 77)),
    ),
    ("expire-tier", partition.ExpireTier(17, "orders", 3, 10)),
]

NAMESERVER_COMMANDS: list[tuple[str, ns_commands.Command]] = [
    ("create-cluster", ns_commands.CreateCluster("c1", 8, 3)),
    (
        "storage-heartbeat",
        ns_commands.StorageHeartbeat(1, "c1", "10.0.0.1:7700", 99, StorageLoad(3, 1, 10, 5, 2**33)),
    ),
    ("broker-heartbeat", ns_commands.BrokerHeartbeat("b1", "c1", "10.0.0.2:8081", 99, ("P1",))),
    (
        "create-topic",
        ns_commands.CreateTopic("t", "c1", 4, MessageType.FIFO, 3_600_000, Permission.READ),
    ),
    ("update-topic", ns_commands.UpdateTopic("t", 8, None, None, Permission.WRITE)),
    ("delete-topic", ns_commands.DeleteTopic("t")),
    (
        "create-group",
        ns_commands.CreateConsumerGroup("g", "c1", True, 5, RetryPolicy(100, 1000, 1.5, (1, 2))),
    ),
    ("update-group", ns_commands.UpdateConsumerGroup("g", None, 4, RetryPolicy())),
    ("delete-group", ns_commands.DeleteConsumerGroup("g")),
    (
        "set-replicas",
        ns_commands.SetReplicas(
            (
                ns_commands.ReplicaAssignment(1, (1, 2, 3)),
                ns_commands.ReplicaAssignment(2, (1, 2, 4), (4,), (3,)),
            )
        ),
    ),
    ("report-leaders", ns_commands.ReportLeaders(2, (ns_commands.LeaderReport(1, 2, 7),))),
    ("expire", ns_commands.Expire(1000, 10_000, 15_000)),
    ("acquire-lease", ns_commands.AcquireLease("l", "b1", 5, 100)),
    ("renew-lease", ns_commands.RenewLease("l", "b1", 6, 100)),
    ("release-lease", ns_commands.ReleaseLease("l", "b1")),
    ("remove-broker", ns_commands.RemoveBroker("b1")),
    (
        "create-topics",
        ns_commands.CreateTopics(
            (ns_commands.CreateTopic("t", "c1", 4), ns_commands.CreateTopic("u", "c1", 8)), True
        ),
    ),
    ("remove-storage-node", ns_commands.RemoveStorageNode(4)),
    ("drain-storage-node", ns_commands.DrainStorageNode(4)),
    ("create-user", ns_commands.CreateUser(User("alice", "s3cret", UserType.SUPER))),
    ("update-user", ns_commands.UpdateUser("alice", None, UserType.NORMAL)),
    ("delete-user", ns_commands.DeleteUser("alice")),
    (
        "put-acl",
        ns_commands.PutAcl(
            "alice",
            (
                PolicyEntry(parse_resource("Topic:ord*"), (Action.PUB, Action.SUB)),
                PolicyEntry(parse_resource("*"), (Action.ALL,), Decision.DENY, ("10.0.0.0/8",)),
            ),
            create=True,
        ),
    ),
    ("delete-acl", ns_commands.DeleteAcl("alice", (parse_resource("Group:g"),))),
]


def _metadata_state() -> MetadataState:
    state = MetadataState()
    for _name, command in NAMESERVER_COMMANDS[:5] + NAMESERVER_COMMANDS[6:8]:
        state.apply(command)
    state.apply(ns_commands.StorageHeartbeat(2, "c1", "10.0.0.3:7700", 99))
    state.apply(ns_commands.StorageHeartbeat(3, "c1", "10.0.0.4:7700", 99))
    state.apply(
        ns_commands.SetReplicas(
            tuple(ns_commands.ReplicaAssignment(group, (1, 2, 3)) for group in range(1, 9))
        )
    )
    state.apply(NAMESERVER_COMMANDS[10][1])
    state.apply(NAMESERVER_COMMANDS[12][1])
    return state


_MESSAGE = st.Message(
    "orders", 3, "m-1", b"body", "tagA", ["k1"], "mg", {"a": "1"}, 17, 0, 4, "h", "", ""
)
_DELIVERY = st.PackedDelivery("orders", 3, 41, 977, 1, 1_700_000_030_000, 1_700_000_000_000)
_RETRY = ns.RetryInfo(100, 1000, 2.0, [1, 2])
_HEARTBEAT = ns.StorageHeartbeatRequest(
    1, "c1", "10.0.0.1:7700", 3, 1, 10, 5, 2**33, [ns.GroupMembershipInfo(4, [1, 2, 3], [5])]
)

ANGELIA_VALUES: list[tuple[str, object]] = [
    ("append-request-messages", st.AppendRequest("orders", 3, [_MESSAGE])),
    ("append-request-records", st.AppendRequest("orders", 3, records=b"\x92\x01\x02")),
    ("append-response-listed", st.AppendResponse([st.AppendOutcome("m-1", 1, -1, True)], 5)),
    ("append-response-queued", st.AppendResponse([], 5, ["m-1", "m-2"], 40)),
    (
        "append-queues-request",
        st.AppendQueuesRequest(
            [st.AppendRequest("orders", 3, records=b"\x92\x01\x02"), st.AppendRequest("t", 0)]
        ),
    ),
    (
        "append-queues-response",
        st.AppendQueuesResponse(
            [
                st.QueueAppended(st.AppendResponse([], 5, ["m-1"], 40)),
                st.QueueAppended(None, WireError(40, "not the leader", True, "h:1")),
            ]
        ),
    ),
    ("read-response", st.ReadResponse([st.StoredMessage(40, 5, _MESSAGE)], 0, 41)),
    ("receive-request", st.ReceiveRequest("g", "orders", 3, 32, 30_000, packed=True)),
    (
        "receive-response",
        st.ReceiveResponse(
            [
                st.ReceivedMessage(
                    st.ReceiptHandle("orders", 3, 40, 9), 2, 77, st.StoredMessage(40, 5, _MESSAGE)
                )
            ],
            1,
            41,
        ),
    ),
    (
        "receive-response-packed",
        st.ReceiveResponse(
            [], 0, 41, b"\x91\x01", [_DELIVERY, _DELIVERY._replace(queue_offset=42)], 3
        ),
    ),
    ("ack-request", st.AckRequest("g", "orders", 3, [st.ReceiptHandle("orders", 3, 40, 9)] * 2)),
    ("ack-response", st.AckResponse([st.AckOutcome(40), st.AckOutcome(41, 17, "stale")])),
    ("change-invisible", st.ChangeInvisibleRequest("g", st.ReceiptHandle("orders", 3, 40, 9), 0)),
    ("commit-offset-request", st.CommitOffsetRequest("g", "orders", 3, 100)),
    ("commit-offset-request-consumer", st.CommitOffsetRequest("g", "orders", 3, 100, True)),
    ("offset-none", st.OffsetResponse(None)),
    ("offset", st.OffsetResponse(12)),
    ("node-status", st.NodeStatusResponse(1, 1, [1, 0, 2], [1])),
    ("node-status-reads", st.NodeStatusResponse(1, 1, [1, 0, 2], [1], 300)),
    (
        "scan-transactions",
        st.ScanTransactionsResponse([st.HalfMessageInfo(_MESSAGE, 5, 2)]),
    ),
    ("create-group-request", ns.CreateConsumerGroupRequest("g", "c1", True, 5, _RETRY)),
    ("update-topic-request", ns.UpdateTopicRequest("t", None, 2, None, 4)),
    ("update-topic-request-read-replicas", ns.UpdateTopicRequest("t", read_replicas=True)),
    ("create-topic-request-read-replicas", ns.CreateTopicRequest("t", "c1", 2, read_replicas=True)),
    (
        "route-response",
        ns.RouteResponse(
            ns.TopicInfo("t", "c1", 1, 1, 1000, 6),
            [
                ns.QueueRouteInfo(
                    0, 1, 3, ns.EndpointInfo(1, "h:1", True), [ns.EndpointInfo(2, "h:2", False)]
                )
            ],
            9,
        ),
    ),
    ("names-request", ns.NamesRequest(["t", "u"])),
    (
        "routes-response",
        ns.RoutesResponse(
            [
                ns.TopicRouted(ns.RouteResponse(ns.TopicInfo("t", "c1", 1, 1, 1000, 6), [], 9)),
                ns.TopicRouted(None, WireError(7, "topic 'u' does not exist", False, "")),
            ]
        ),
    ),
    ("report-leaders-response", ns.ReportLeadersResponse([True, False], 9)),
    ("list-request-unchanged-since", ns.ListRequest("c1", 7)),
    ("topic-list-response-unchanged", ns.TopicListResponse([], 9, True)),
    ("storage-heartbeat-request", _HEARTBEAT),
    (
        "storage-heartbeat-request-load",
        dataclasses.replace(_HEARTBEAT, fsync_p99_us=2500, group_loads=[ns.GroupLoadInfo(4, 120)]),
    ),
]

GOLDEN_HEX: dict[str, str] = {
    "partition/append": (
        "0152354d4201a118915d0000018bcfe5687b00000002929ea66f726465727303a36d2d31c404626f"
        "6479a47461674192a26b31a26b32a26d679292a161a13192a162a132cf0000018bcfe56800cf0000"
        "018bcfe57b8803aa31302e302e302e313a39a0a09ea66f726465727303a36d2d32c404626f6479a4"
        "7461674192a26b31a26b32a26d679292a161a13192a162a132cf0000018bcfe56800cf0000018bcf"
        "e57b8803aa31302e302e302e313a39a0a0"
    ),
    "partition/receive": "029b05a167a66f72646572730310cd753011a12ac200a0",
    "partition/receive-all-fields": "029b05a167a66f72646572730310cd753011a661207c7c2062c301a178",
    "partition/filtered-receive": "0d9d05a167a66f72646572730310cd753011a12ac200a009920407",
    "partition/ack": "039306a1679294a66f72646572730329cd03d194a66f7264657273032acd03d2",
    "partition/release": "0c9306a1679194a66f72646572730329cd03d1",
    "partition/change-invisible": "049407a16794a66f72646572730329cd03d100",
    "partition/dead-letter": "059308a16794a66f72646572730329cd03d1",
    "partition/commit-offset": "069509a167a66f72646572730364",
    "partition/commit-consumer-offset": "0e950ea167a66f72646572730364",
    "partition/end-transaction": "07940aa66f7264657273a474782d31c3",
    "partition/note-checks": "08930b92a474782d31a474782d320f",
    "partition/tick": "0991cf0000010000000000",
    "partition/cancel-timer": "0a930ca66f7264657273a36d2d31",
    "partition/trim-queue": "0b940da66f72646572730340",
    "partition/drop-topic": "0f920fa66f7264657273",
    "partition/record-upload": "109410a66f72646572730397a36f2f31000a64ccc8cd10004d",
    "partition/expire-tier": "119411a66f7264657273030a",
    "nameserver/create-cluster": "920193a263310803",
    "nameserver/storage-heartbeat": (
        "92029501a26331ad31302e302e302e313a37373030639503010a05cf0000000200000000"
    ),
    "nameserver/broker-heartbeat": "920396a26231a26331ad31302e302e302e323a383038316391a25031a0",
    "nameserver/create-topic": "92049aa174a263310402ce0036ee8004000000c2",
    "nameserver/update-topic": "920599a17408c0c002c0c0c0c0",
    "nameserver/delete-topic": "920691a174",
    "nameserver/create-group": "920795a167a26331c3059464cd03e8cb3ff8000000000000920102",
    "nameserver/update-group": "920894a167c00494cd03e8cdea60cb400000000000000090",
    "nameserver/delete-group": "920991a167",
    "nameserver/set-replicas": "920a9192940193010203909094029301020491049103",
    "nameserver/report-leaders": "920b92029193010207",
    "nameserver/expire": "920c93cd03e8cd2710cd3a98",
    "nameserver/acquire-lease": "920d94a16ca262310564",
    "nameserver/renew-lease": "920e94a16ca262310664",
    "nameserver/release-lease": "920f92a16ca26231",
    "nameserver/remove-broker": "921091a26231",
    "nameserver/create-topics": (
        "921892929aa174a263310401ce0f73140006000000c29aa175a263310801ce0f73140006000000c2c3"
    ),
    "nameserver/remove-storage-node": "92119104",
    "nameserver/drain-storage-node": "92129204c3",
    "nameserver/create-user": "92139193a5616c696365a673336372657401",
    "nameserver/update-user": "921493a5616c696365c002",
    "nameserver/delete-user": "921591a5616c696365",
    "nameserver/put-acl": (
        "921693a5616c6963659294930303a36f7264920203019094930101a091010291aa31302e302e302e302f38c3"
    ),
    "nameserver/delete-acl": "921792a5616c69636591930402a167",
    "nameserver/route": (
        "939aa174a263310802ce0036ee8002000000c29895000500c0939301ad31302e302e302e313a3737"
        "3030c39302ad31302e302e302e333a37373030c39303ad31302e302e302e343a37373030c3950103"
        "00c0939301ad31302e302e302e313a37373030c39302ad31302e302e302e333a37373030c39303ad"
        "31302e302e302e343a37373030c3950201079302ad31302e302e302e333a37373030c3929301ad31"
        "302e302e302e313a37373030c39303ad31302e302e302e343a37373030c395030700c0939301ad31"
        "302e302e302e313a37373030c39302ad31302e302e302e333a37373030c39303ad31302e302e302e"
        "343a37373030c395040600c0939301ad31302e302e302e313a37373030c39302ad31302e302e302e"
        "333a37373030c39303ad31302e302e302e343a37373030c395050400c0939301ad31302e302e302e"
        "313a37373030c39302ad31302e302e302e333a37373030c39303ad31302e302e302e343a37373030"
        "c395060200c0939301ad31302e302e302e313a37373030c39302ad31302e302e302e333a37373030"
        "c39303ad31302e302e302e343a37373030c395070800c0939301ad31302e302e302e313a37373030"
        "c39302ad31302e302e302e333a37373030c39303ad31302e302e302e343a37373030c30c"
    ),
    "nameserver/snapshot": (
        "93019a0c00099194a26331080103939701a26331ad31302e302e302e313a37373030c3639503010a"
        "05cf0000000200000000c29702a26331ad31302e302e302e333a37373030c363950000000000c297"
        "03a26331ad31302e302e302e343a37373030c363950000000000c29197a26231a26331ad31302e30"
        "2e302e323a38303831c36391a25031a0919aa174a263310802ce0036ee8002000000c29195a167a2"
        "6331c30494cd03e8cdea60cb400000000000000090989701a2633193010203020790909702a26331"
        "93010203000090909703a2633193010203000090909704a2633193010203000090909705a2633193"
        "010203000090909706a2633193010203000090909707a2633193010203000090909708a263319301"
        "0203000090909194a16ca26231690cdc001b940101a2633194a26331080103940106a1319701a263"
        "319000009090940106a1329702a263319000009090940106a1339703a263319000009090940106a1"
        "349704a263319000009090940106a1359705a263319000009090940106a1369706a2633190000090"
        "90940106a1379707a263319000009090940106a1389708a263319000009090940202a1319701a263"
        "31ad31302e302e302e313a37373030c3639503010a05cf0000000200000000c2940303a2623197a2"
        "6231a26331ad31302e302e302e323a38303831c36391a25031a0940404a1749aa174a263310402ce"
        "0036ee8004000000c2940504a1749aa174a263310802ce0036ee8002000000c2940605a16795a167"
        "a26331c3059464cd03e8cb3ff8000000000000920102940705a16795a167a26331c30494cd03e8cd"
        "ea60cb400000000000000090940802a1329702a26331ad31302e302e302e333a37373030c3639500"
        "00000000c2940902a1339703a26331ad31302e302e302e343a37373030c363950000000000c2940a"
        "06a1319701a263319301020300009090940a06a1329702a263319301020300009090940a06a13397"
        "03a263319301020300009090940a06a1349704a263319301020300009090940a06a1359705a26331"
        "9301020300009090940a06a1369706a263319301020300009090940a06a1379707a2633193010203"
        "00009090940a06a1389708a263319301020300009090940b06a1319701a263319301020302079090"
        "940c07a16c94a16ca26231690c"
    ),
    # A snapshot with ACL users and policies: their tables as a fourth item.
    "nameserver/snapshot-acl": (
        "94019a0000019090909090909090929193a5616c696365a6733363726574019192a5616c6963659294"
        "930303a36f7264920203019094930101a091010291aa31302e302e302e302f38"
    ),
    "angelia/append-request-messages": (
        "94a66f726465727303919ea66f726465727303a36d2d31c404626f6479a47461674191a26b31a26d"
        "6781a161a131110004a168a0a0c400"
    ),
    "angelia/append-request-records": "94a66f72646572730390c403920102",
    "angelia/append-response-listed": "949194a36d2d3101ffc30590ff",
    "angelia/append-response-queued": "94900592a36d2d31a36d2d3228",
    "angelia/append-queues-request": "919294a66f72646572730390c40392010294a1740090c400",
    "angelia/append-queues-response": (
        "91929294900591a36d2d3128c092c09428ae6e6f7420746865206c6561646572c3a3683a31"
    ),
    "angelia/names-request": "9192a174a175",
    "angelia/routes-response": (
        "919292939aa174a263310101cd03e806000000c29009c092c09407b8746f7069632027752720646f"
        "6573206e6f74206578697374c2a0"
    ),
    "angelia/read-response": (
        "96919328059ea66f726465727303a36d2d31c404626f6479a47461674191a26b31a26d6781a161a1"
        "31110004a168a0a00029ffc40090"
    ),
    "angelia/receive-request": "9da167a66f72646572730320cd753010a12ac2c2a000c301",
    "angelia/receive-response": (
        "96919494a66f7264657273032809024d9328059ea66f726465727303a36d2d31c404626f6479a474"
        "61674191a26b31a26d6781a161a131110004a168a0a00129c40090ff"
    ),
    "angelia/receive-response-packed": (
        "96900029c40291019297a66f72646572730329cd03d101cf0000018bcfe5dd30cf0000018bcfe568"
        "0097a66f7264657273032acd03d101cf0000018bcfe5dd30cf0000018bcfe5680003"
    ),
    "angelia/ack-request": "94a167a66f7264657273039294a66f726465727303280994a66f7264657273032809",
    "angelia/ack-response": "9192932800a0932911a57374616c65",
    "angelia/change-invisible": "93a16794a66f726465727303280900",
    "angelia/commit-offset-request": "95a167a66f72646572730364c2",
    "angelia/commit-offset-request-consumer": "95a167a66f72646572730364c3",
    "angelia/offset-none": "91c0",
    "angelia/offset": "910c",
    "angelia/node-status": "95010193010002910100",
    "angelia/node-status-reads": "950101930100029101cd012c",
    "angelia/scan-transactions": (
        "9191939ea66f726465727303a36d2d31c404626f6479a47461674191a26b31a26d6781a161a13111"
        "0004a168a0a00502"
    ),
    "angelia/create-group-request": ("96a167a26331c3059464cd03e8cb400000000000000092010293a0a0a0"),
    "angelia/update-topic-request": "9aa174c002c004c0c0c093a0a0a0c0",
    "angelia/update-topic-request-read-replicas": "9aa174c0c0c0c0c0c0c093a0a0a0c3",
    "angelia/create-topic-request-read-replicas": "9ba174a263310201000600000093a0a0a0c3",
    "angelia/route-response": (
        "939aa174a263310101cd03e806000000c291950001039301a3683a31c3919302a3683a32c209"
    ),
    "angelia/report-leaders-response": "9292c3c209",
    "angelia/list-request-unchanged-since": "92a2633107",
    "angelia/topic-list-response-unchanged": "939009c3",
    "angelia/storage-heartbeat-request": (
        "9d01a26331ad31302e302e302e313a3737303003010a05cf00000002000000009193049301020391050090c200"
    ),
    "angelia/storage-heartbeat-request-load": (
        "9d01a26331ad31302e302e302e313a3737303003010a05cf0000000200000000919304930102039105"
        "cd09c491920478c200"
    ),
}


def _acl_state() -> MetadataState:
    """A state with users and a policy (their snapshot tail)."""
    state = MetadataState()
    for name in ("create-user", "put-acl"):
        state.apply(dict(NAMESERVER_COMMANDS)[name])
    return state


def _cases() -> list[tuple[str, Callable[[], bytes], Callable[[bytes], Any], object]]:
    cases: list[tuple[str, Callable[[], bytes], Callable[[bytes], Any], object]] = []
    for name, command in PARTITION_COMMANDS:
        cases.append(
            (f"partition/{name}", partial(partition.encode, command), partition.decode, command)
        )
    for name, ns_command in NAMESERVER_COMMANDS:
        cases.append(
            (
                f"nameserver/{name}",
                partial(ns_commands.encode, ns_command),
                ns_commands.decode,
                ns_command,
            )
        )
    route = _metadata_state().route("t")
    cases.append(
        ("nameserver/route", lambda: pack(route), lambda data: unpack(TopicRoute, data), route)
    )
    cases.append(
        (
            "nameserver/snapshot",
            lambda: _metadata_state().snapshot(),
            lambda data: MetadataState.restore(data).snapshot(),
            None,
        )
    )
    cases.append(
        (
            "nameserver/snapshot-acl",
            lambda: _acl_state().snapshot(),
            lambda data: MetadataState.restore(data).snapshot(),
            None,
        )
    )
    for name, value in ANGELIA_VALUES:
        cases.append(
            (
                f"angelia/{name}",
                partial(_angelia_encode, value),
                _angelia_decode(type(value)),
                value,
            )
        )
    return cases


CASES = _cases()


@pytest.mark.parametrize(("name", "encode", "decode", "value"), CASES, ids=[c[0] for c in CASES])
def test_encoded_bytes_are_pinned(
    name: str, encode: Callable[[], bytes], decode: Callable[[bytes], Any], value: object
) -> None:
    golden = bytes.fromhex(GOLDEN_HEX[name])
    assert encode() == golden
    if value is None:  # a snapshot: restoring it gives a state with the same bytes
        assert decode(golden) == golden
    else:
        assert decode(golden) == value


# Bytes an older node wrote, before fields were appended to a type (with defaults): a
# newer node must still decode them to the same value.
OLDER_HEX: dict[str, str] = {
    # A broker heartbeat, and a snapshot holding a broker, before remoting_address.
    "nameserver/broker-heartbeat": "920395a26231a26331ad31302e302e302e323a383038316391a25031",
    "nameserver/snapshot": (
        "93019a0c00099194a26331080103939601a26331ad31302e302e302e313a37373030c3639503010a"
        "05cf00000002000000009602a26331ad31302e302e302e333a37373030c3639500000000009603a2"
        "6331ad31302e302e302e343a37373030c3639500000000009196a26231a26331ad31302e302e302e"
        "323a38303831c36391a250319196a174a263310802ce0036ee80029195a167a26331c30494cd03e8"
        "cdea60cb400000000000000090989701a2633193010203020790909702a263319301020300009090"
        "9703a2633193010203000090909704a2633193010203000090909705a26331930102030000909097"
        "06a2633193010203000090909707a2633193010203000090909708a2633193010203000090909194"
        "a16ca26231690cdc001b940101a2633194a26331080103940106a1319701a2633190000090909401"
        "06a1329702a263319000009090940106a1339703a263319000009090940106a1349704a263319000"
        "009090940106a1359705a263319000009090940106a1369706a263319000009090940106a1379707"
        "a263319000009090940106a1389708a263319000009090940202a1319601a26331ad31302e302e30"
        "2e313a37373030c3639503010a05cf0000000200000000940303a2623196a26231a26331ad31302e"
        "302e302e323a38303831c36391a25031940404a17496a174a263310402ce0036ee8004940504a174"
        "96a174a263310802ce0036ee8002940605a16795a167a26331c3059464cd03e8cb3ff80000000000"
        "00920102940705a16795a167a26331c30494cd03e8cdea60cb400000000000000090940802a13296"
        "02a26331ad31302e302e302e333a37373030c363950000000000940902a1339603a26331ad31302e"
        "302e302e343a37373030c363950000000000940a06a1319701a263319301020300009090940a06a1"
        "329702a263319301020300009090940a06a1339703a263319301020300009090940a06a1349704a2"
        "63319301020300009090940a06a1359705a263319301020300009090940a06a1369706a263319301"
        "020300009090940a06a1379707a263319301020300009090940a06a1389708a26331930102030000"
        "9090940b06a1319701a263319301020302079090940c07a16c94a16ca26231690c"
    ),
    # A snapshot holding storage nodes before draining (elastic storage).
    "nameserver/snapshot (before draining)": (
        "93019a0c00099194a26331080103939601a26331ad31302e302e302e313a37373030c3639503010a"
        "05cf00000002000000009602a26331ad31302e302e302e333a37373030c3639500000000009603a2"
        "6331ad31302e302e302e343a37373030c3639500000000009197a26231a26331ad31302e302e302e"
        "323a38303831c36391a25031a09196a174a263310802ce0036ee80029195a167a26331c30494cd03"
        "e8cdea60cb400000000000000090989701a2633193010203020790909702a2633193010203000090"
        "909703a2633193010203000090909704a2633193010203000090909705a263319301020300009090"
        "9706a2633193010203000090909707a2633193010203000090909708a26331930102030000909091"
        "94a16ca26231690cdc001b940101a2633194a26331080103940106a1319701a26331900000909094"
        "0106a1329702a263319000009090940106a1339703a263319000009090940106a1349704a2633190"
        "00009090940106a1359705a263319000009090940106a1369706a263319000009090940106a13797"
        "07a263319000009090940106a1389708a263319000009090940202a1319601a26331ad31302e302e"
        "302e313a37373030c3639503010a05cf0000000200000000940303a2623197a26231a26331ad3130"
        "2e302e302e323a38303831c36391a25031a0940404a17496a174a263310402ce0036ee8004940504"
        "a17496a174a263310802ce0036ee8002940605a16795a167a26331c3059464cd03e8cb3ff8000000"
        "000000920102940705a16795a167a26331c30494cd03e8cdea60cb400000000000000090940802a1"
        "329602a26331ad31302e302e302e333a37373030c363950000000000940902a1339603a26331ad31"
        "302e302e302e343a37373030c363950000000000940a06a1319701a263319301020300009090940a"
        "06a1329702a263319301020300009090940a06a1339703a263319301020300009090940a06a13497"
        "04a263319301020300009090940a06a1359705a263319301020300009090940a06a1369706a26331"
        "9301020300009090940a06a1379707a263319301020300009090940a06a1389708a2633193010203"
        "00009090940b06a1319701a263319301020302079090940c07a16c94a16ca26231690c"
    ),
    # ReadResponse before next_offset, records and stored_at (pull consumers).
    "angelia/read-response": (
        "93919328059ea66f726465727303a36d2d31c404626f6479a47461674191a26b31a26d6781a161a1"
        "31110004a168a0a00029"
    ),
    # ReceiveRequest before filter_kind (SQL92 filters).
    "angelia/receive-request": "9ca167a66f72646572730320cd753010a12ac2c2a000c3",
    # StorageHeartbeatRequest before fsync_p99_us and group_loads (load figures).
    "angelia/storage-heartbeat-request": (
        "9901a26331ad31302e302e302e313a3737303003010a05cf0000000200000000919304930102039105"
    ),
    # StorageHeartbeatRequest before data_lost (a node re-admitted after a damaged WAL).
    "angelia/storage-heartbeat-request (before data_lost)": (
        "9b01a26331ad31302e302e302e313a3737303003010a05cf00000002000000009193049301020391050090"
    ),
    "angelia/storage-heartbeat-request-load (before data_lost)": (
        "9b01a26331ad31302e302e302e313a3737303003010a05cf0000000200000000919304930102039105"
        "cd09c491920478"
    ),
    # StorageHeartbeatRequest before append_p99_us (the move throttle's figure).
    "angelia/storage-heartbeat-request (before append_p99_us)": (
        "9c01a26331ad31302e302e302e313a3737303003010a05cf00000002000000009193049301020391050090c2"
    ),
    "angelia/storage-heartbeat-request-load (before append_p99_us)": (
        "9c01a26331ad31302e302e302e313a3737303003010a05cf0000000200000000919304930102039105"
        "cd09c491920478c2"
    ),
    # NodeStatusResponse before reads (read replicas).
    "angelia/node-status": "940101930100029101",
    # A consumer group request before signed (an ACL admin's signature).
    "angelia/create-group-request": "95a167a26331c3059464cd03e8cb4000000000000000920102",
    # CommitOffsetRequest before keep_leases (every commit was an operator's reset).
    "angelia/commit-offset-request": "94a167a66f72646572730364",
    # Before the retention limits beside retention_ms (retention_bytes, local_retention_*):
    # a topic, its commands and requests, and what holds a topic (routes, the snapshot).
    "nameserver/create-topic": "920496a174a263310402ce0036ee8004",
    "nameserver/update-topic": "920595a17408c0c002",
    "nameserver/route": (
        "9396a174a263310802ce0036ee80029895000500c0939301ad31302e302e302e313a37373030c393"
        "02ad31302e302e302e333a37373030c39303ad31302e302e302e343a37373030c395010300c09393"
        "01ad31302e302e302e313a37373030c39302ad31302e302e302e333a37373030c39303ad31302e30"
        "2e302e343a37373030c3950201079302ad31302e302e302e333a37373030c3929301ad31302e302e"
        "302e313a37373030c39303ad31302e302e302e343a37373030c395030700c0939301ad31302e302e"
        "302e313a37373030c39302ad31302e302e302e333a37373030c39303ad31302e302e302e343a3737"
        "3030c395040600c0939301ad31302e302e302e313a37373030c39302ad31302e302e302e333a3737"
        "3030c39303ad31302e302e302e343a37373030c395050400c0939301ad31302e302e302e313a3737"
        "3030c39302ad31302e302e302e333a37373030c39303ad31302e302e302e343a37373030c3950602"
        "00c0939301ad31302e302e302e313a37373030c39302ad31302e302e302e333a37373030c39303ad"
        "31302e302e302e343a37373030c395070800c0939301ad31302e302e302e313a37373030c39302ad"
        "31302e302e302e333a37373030c39303ad31302e302e302e343a37373030c30c"
    ),
    "angelia/update-topic-request": "95a174c002c004",
    "angelia/route-response": (
        "9396a174a263310101cd03e80691950001039301a3683a31c3919302a3683a32c209"
    ),
    # Before read_replicas (a topic attribute: brokers spread its offset reads over
    # the replicas): a topic, its commands and requests, and what holds a topic.
    "nameserver/create-topic (before read_replicas)": "920499a174a263310402ce0036ee8004000000",
    "nameserver/update-topic (before read_replicas)": "920598a17408c0c002c0c0c0",
    "nameserver/create-topics (before read_replicas)": (
        "9218929299a174a263310401ce0f7314000600000099a175a263310801ce0f73140006000000c3"
    ),
    "nameserver/route (before read_replicas)": (
        "9399a174a263310802ce0036ee80020000009895000500c0939301ad31302e302e302e313a373730"
        "30c39302ad31302e302e302e333a37373030c39303ad31302e302e302e343a37373030c395010300"
        "c0939301ad31302e302e302e313a37373030c39302ad31302e302e302e333a37373030c39303ad31"
        "302e302e302e343a37373030c3950201079302ad31302e302e302e333a37373030c3929301ad3130"
        "2e302e302e313a37373030c39303ad31302e302e302e343a37373030c395030700c0939301ad3130"
        "2e302e302e313a37373030c39302ad31302e302e302e333a37373030c39303ad31302e302e302e34"
        "3a37373030c395040600c0939301ad31302e302e302e313a37373030c39302ad31302e302e302e33"
        "3a37373030c39303ad31302e302e302e343a37373030c395050400c0939301ad31302e302e302e31"
        "3a37373030c39302ad31302e302e302e333a37373030c39303ad31302e302e302e343a37373030c3"
        "95060200c0939301ad31302e302e302e313a37373030c39302ad31302e302e302e333a37373030c3"
        "9303ad31302e302e302e343a37373030c395070800c0939301ad31302e302e302e313a37373030c3"
        "9302ad31302e302e302e333a37373030c39303ad31302e302e302e343a37373030c30c"
    ),
    "nameserver/snapshot (before read_replicas)": (
        "93019a0c00099194a26331080103939701a26331ad31302e302e302e313a37373030c3639503010a"
        "05cf0000000200000000c29702a26331ad31302e302e302e333a37373030c363950000000000c297"
        "03a26331ad31302e302e302e343a37373030c363950000000000c29197a26231a26331ad31302e30"
        "2e302e323a38303831c36391a25031a09199a174a263310802ce0036ee80020000009195a167a263"
        "31c30494cd03e8cdea60cb400000000000000090989701a2633193010203020790909702a2633193"
        "010203000090909703a2633193010203000090909704a2633193010203000090909705a263319301"
        "0203000090909706a2633193010203000090909707a2633193010203000090909708a26331930102"
        "03000090909194a16ca26231690cdc001b940101a2633194a26331080103940106a1319701a26331"
        "9000009090940106a1329702a263319000009090940106a1339703a263319000009090940106a134"
        "9704a263319000009090940106a1359705a263319000009090940106a1369706a263319000009090"
        "940106a1379707a263319000009090940106a1389708a263319000009090940202a1319701a26331"
        "ad31302e302e302e313a37373030c3639503010a05cf0000000200000000c2940303a2623197a262"
        "31a26331ad31302e302e302e323a38303831c36391a25031a0940404a17499a174a263310402ce00"
        "36ee8004000000940504a17499a174a263310802ce0036ee8002000000940605a16795a167a26331"
        "c3059464cd03e8cb3ff8000000000000920102940705a16795a167a26331c30494cd03e8cdea60cb"
        "400000000000000090940802a1329702a26331ad31302e302e302e333a37373030c3639500000000"
        "00c2940902a1339703a26331ad31302e302e302e343a37373030c363950000000000c2940a06a131"
        "9701a263319301020300009090940a06a1329702a263319301020300009090940a06a1339703a263"
        "319301020300009090940a06a1349704a263319301020300009090940a06a1359705a26331930102"
        "0300009090940a06a1369706a263319301020300009090940a06a1379707a2633193010203000090"
        "90940a06a1389708a263319301020300009090940b06a1319701a263319301020302079090940c07"
        "a16c94a16ca26231690c"
    ),
    "angelia/update-topic-request (before read_replicas)": "99a174c002c004c0c0c093a0a0a0",
    "angelia/route-response (before read_replicas)": (
        "9399a174a263310101cd03e80600000091950001039301a3683a31c3919302a3683a32c209"
    ),
}

# A snapshot before the retention limits (the older one above predates remoting_address).
OLDER_SNAPSHOT_HEX = (
    "93019a0c00099194a26331080103939601a26331ad31302e302e302e313a37373030c3639503010a"
    "05cf00000002000000009602a26331ad31302e302e302e333a37373030c3639500000000009603a2"
    "6331ad31302e302e302e343a37373030c3639500000000009197a26231a26331ad31302e302e302e"
    "323a38303831c36391a25031a09196a174a263310802ce0036ee80029195a167a26331c30494cd03"
    "e8cdea60cb400000000000000090989701a2633193010203020790909702a2633193010203000090"
    "909703a2633193010203000090909704a2633193010203000090909705a263319301020300009090"
    "9706a2633193010203000090909707a2633193010203000090909708a26331930102030000909091"
    "94a16ca26231690cdc001b940101a2633194a26331080103940106a1319701a26331900000909094"
    "0106a1329702a263319000009090940106a1339703a263319000009090940106a1349704a2633190"
    "00009090940106a1359705a263319000009090940106a1369706a263319000009090940106a13797"
    "07a263319000009090940106a1389708a263319000009090940202a1319601a26331ad31302e302e"
    "302e313a37373030c3639503010a05cf0000000200000000940303a2623197a26231a26331ad3130"
    "2e302e302e323a38303831c36391a25031a0940404a17496a174a263310402ce0036ee8004940504"
    "a17496a174a263310802ce0036ee8002940605a16795a167a26331c3059464cd03e8cb3ff8000000"
    "000000920102940705a16795a167a26331c30494cd03e8cdea60cb400000000000000090940802a1"
    "329602a26331ad31302e302e302e333a37373030c363950000000000940902a1339603a26331ad31"
    "302e302e302e343a37373030c363950000000000940a06a1319701a263319301020300009090940a"
    "06a1329702a263319301020300009090940a06a1339703a263319301020300009090940a06a13497"
    "04a263319301020300009090940a06a1359705a263319301020300009090940a06a1369706a26331"
    "9301020300009090940a06a1379707a263319301020300009090940a06a1389708a2633193010203"
    "00009090940b06a1319701a263319301020302079090940c07a16c94a16ca26231690c"
)


@pytest.mark.parametrize("name", sorted(OLDER_HEX))
def test_older_encodings_still_decode(name: str) -> None:
    # A name may say which older version it is: "<case> (before <what>)".
    case_name = name.partition(" (")[0]
    (_, _, decode, value) = next(case for case in CASES if case[0] == case_name)
    # A snapshot restores to a state whose snapshot is today's bytes.
    expected = bytes.fromhex(GOLDEN_HEX[case_name]) if value is None else value
    assert decode(bytes.fromhex(OLDER_HEX[name])) == expected


def test_a_snapshot_before_the_retention_limits_still_decodes() -> None:
    (_, _, decode, _) = next(case for case in CASES if case[0] == "nameserver/snapshot")
    assert decode(bytes.fromhex(OLDER_SNAPSHOT_HEX)) == bytes.fromhex(
        GOLDEN_HEX["nameserver/snapshot"]
    )
