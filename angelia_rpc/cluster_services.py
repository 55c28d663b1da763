"""The declarations of the cluster's internal services, shared by servers and callers.

A process that serves one of these binds its implementation to the
declaration here; a process that calls it (brokers, the admin CLI, benches,
tests) builds a stub from the same class. Brokers may not import the storage
node or the nameserver, so the declarations live beside the RPC layer, with
their request and response types in ``protocol.storage_api`` and
``protocol.nameserver_api``.

Evolution: methods are only added; a method's types change only by adding
fields at their end (see the api modules).

PURE.
"""

from __future__ import annotations

from angelia_rpc.service import ServerStream, Service, Unary
from protocol import broker_api as br
from protocol import control_api as ctl
from protocol import nameserver_api as ns
from protocol import storage_api as st


class StorageService(Service, name="storage"):
    """The storage node's API, called by brokers (and tests, benches)."""

    append = Unary(st.AppendRequest, st.AppendResponse)
    append_queues = Unary(st.AppendQueuesRequest, st.AppendQueuesResponse)
    read = Unary(st.ReadRequest, st.ReadResponse)
    receive = Unary(st.ReceiveRequest, st.ReceiveResponse)
    ack = Unary(st.AckRequest, st.AckResponse)
    change_invisible = Unary(st.ChangeInvisibleRequest, st.ChangeInvisibleResponse)
    commit_offset = Unary(st.CommitOffsetRequest, st.OffsetResponse)
    get_offset = Unary(st.GetOffsetRequest, st.OffsetResponse)
    queue_info = Unary(st.QueueInfoRequest, st.QueueInfoResponse)
    status = Unary(st.NodeStatusRequest, st.NodeStatusResponse)
    end_transaction = Unary(st.EndTransactionRequest, st.EndTransactionResponse)
    cancel_timer = Unary(st.CancelTimerRequest, st.CancelTimerResponse)
    scan_transactions = Unary(st.ScanTransactionsRequest, st.ScanTransactionsResponse)
    note_transaction_checks = Unary(
        st.NoteTransactionChecksRequest, st.NoteTransactionChecksResponse
    )
    query_messages = Unary(st.QueryMessagesRequest, st.QueryMessagesResponse)
    group_progress = Unary(st.GroupProgressRequest, st.GroupProgressResponse)
    export_snapshot = Unary(st.ExportSnapshotRequest, st.ExportSnapshotResponse)
    group_membership = Unary(st.GroupMembershipRequest, st.GroupMembershipResponse)
    readmit_replica = Unary(st.ReadmitRequest, st.GroupMembershipResponse)


class NameserverService(Service, name="nameserver"):
    """The nameserver's internal API."""

    create_cluster = Unary(ns.CreateClusterRequest, ns.ClusterResponse)
    create_topic = Unary(ns.CreateTopicRequest, ns.TopicResponse)
    update_topic = Unary(ns.UpdateTopicRequest, ns.TopicResponse)
    delete_topic = Unary(ns.NameRequest, ns.RevisionResponse)
    get_topic = Unary(ns.NameRequest, ns.TopicResponse)
    list_topics = Unary(ns.ListRequest, ns.TopicListResponse)
    create_consumer_group = Unary(ns.CreateConsumerGroupRequest, ns.ConsumerGroupResponse)
    update_consumer_group = Unary(ns.UpdateConsumerGroupRequest, ns.ConsumerGroupResponse)
    delete_consumer_group = Unary(ns.NameRequest, ns.RevisionResponse)
    get_consumer_group = Unary(ns.NameRequest, ns.ConsumerGroupResponse)
    list_consumer_groups = Unary(ns.ListRequest, ns.ConsumerGroupListResponse)
    route = Unary(ns.NameRequest, ns.RouteResponse)
    routes = Unary(ns.NamesRequest, ns.RoutesResponse)
    cluster_status = Unary(ns.NameRequest, ns.ClusterStatusResponse)
    storage_heartbeat = Unary(ns.StorageHeartbeatRequest, ns.StorageHeartbeatResponse)
    broker_heartbeat = Unary(ns.BrokerHeartbeatRequest, ns.RevisionResponse)
    report_leaders = Unary(ns.ReportLeadersRequest, ns.ReportLeadersResponse)
    drain_storage_node = Unary(ns.StorageNodeRequest, ns.RevisionResponse)
    remove_storage_node = Unary(ns.StorageNodeRequest, ns.RevisionResponse)
    acquire_lease = Unary(ns.LeaseRequest, ns.LeaseResponse)
    renew_lease = Unary(ns.LeaseRequest, ns.LeaseResponse)
    release_lease = Unary(ns.LeaseRequest, ns.RevisionResponse)
    watch = ServerStream(ns.WatchRequest, ns.WatchBatchInfo)
    create_user = Unary(ns.UserRequest, ns.RevisionResponse)
    update_user = Unary(ns.UserRequest, ns.RevisionResponse)
    delete_user = Unary(ns.UserRequest, ns.RevisionResponse)
    create_acl = Unary(ns.AclRequest, ns.RevisionResponse)
    update_acl = Unary(ns.AclRequest, ns.RevisionResponse)
    delete_acl = Unary(ns.AclRequest, ns.RevisionResponse)
    acl_tables = Unary(ns.AclTablesRequest, ns.AclTablesResponse)
    authenticate = Unary(ns.AuthenticateRequest, ns.AuthenticateResponse)
    create_topics = Unary(ns.CreateTopicsRequest, ns.CreateTopicsResponse)


class ControlService(Service, name="control"):
    """The nameserver's own membership and the RIP-44 controller (``protocol.control_api``)."""

    members = Unary(ctl.MembersRequest, ctl.MembersResponse)
    add_member = Unary(ctl.AddMemberRequest, ctl.MembersResponse)
    remove_member = Unary(ctl.RemoveMemberRequest, ctl.MembersResponse)
    replica_sets = Unary(ctl.ReplicaSetsRequest, ctl.ReplicaSetsResponse)
    alter_sync_state_set = Unary(ctl.AlterSyncStateSetRequest, ctl.ReplicaSetResponse)


class BrokerService(Service, name="broker"):
    """What one broker asks of another (types in ``protocol.broker_api``)."""

    deliver_orphan_check = Unary(br.OrphanCheckRequest, br.OrphanCheckResponse)
    clients = Unary(br.ClientsRequest, br.ClientsResponse)
    drain = Unary(br.DrainRequest, br.DrainResponse)
