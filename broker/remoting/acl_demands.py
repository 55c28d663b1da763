"""What each remoting request asks of ACL 2.0 (4.x clients): the action and the resources.

As ``broker/grpc/acl_demands.py`` for the same operations: sends, transaction
ends Pub on the topic; pulls, offsets, send-backs, consumer lists and queue
locks Sub on the topic and/or the group; message queries (QUERY_MESSAGE,
VIEW_MESSAGE_BY_ID) Sub or Get on the topic; a group's retry or dead-letter
topic counts as its group. Route and cluster lookups, heartbeats and unregistering
need only authentication (clients look routes up for topics they never use,
such as TBW102). A request code not listed demands All on the cluster
resource named after it.

PURE.
"""

from __future__ import annotations

from broker.acl_demand import GROUP, Demand, topic_resource
from protocol.acl import Action, ResourceType
from protocol.remoting import bodies, headers
from protocol.remoting.codes import RequestCode
from protocol.remoting.frames import RemotingCommand

_AUTHENTICATE_ONLY = frozenset(
    {
        RequestCode.GET_ROUTEINFO_BY_TOPIC,
        RequestCode.GET_BROKER_CLUSTER_INFO,
        RequestCode.HEART_BEAT,
        RequestCode.UNREGISTER_CLIENT,
    }
)
_SUB_ON_TOPIC = frozenset(
    {RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP}
)
_SUB_ON_TOPIC_AND_GROUP = frozenset(
    {
        RequestCode.PULL_MESSAGE,
        RequestCode.QUERY_CONSUMER_OFFSET,
        RequestCode.UPDATE_CONSUMER_OFFSET,
    }
)


def demand_of(request: RemotingCommand) -> Demand | None:
    """The demand of ``request``; None: the caller need only be authenticated. A header
    or body the request lacks raises as its handler would (answered INVALID_PARAMETER)."""
    code, fields = request.code, request.ext_fields
    if code in _AUTHENTICATE_ONLY:
        return None
    if code in (
        RequestCode.SEND_MESSAGE,
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.SEND_BATCH_MESSAGE,
    ):
        topic = headers.send_header(fields, short_keys=code != RequestCode.SEND_MESSAGE).topic
        resource = topic_resource(topic)
        action = Action.SUB if resource[0] is GROUP else Action.PUB  # a retry: the group's
        return Demand((action,), (resource,))
    if code == RequestCode.END_TRANSACTION:
        ended = headers.end_transaction_header(fields).topic
        return Demand((Action.PUB,), (topic_resource(ended),)) if ended else None
    if code in _SUB_ON_TOPIC:
        return Demand((Action.SUB,), (topic_resource(headers.text(fields, "topic")),))
    if code in _SUB_ON_TOPIC_AND_GROUP:
        topic, group = headers.text(fields, "topic"), headers.text(fields, "consumerGroup")
        return Demand((Action.SUB,), (topic_resource(topic), (GROUP, group)))
    if code == RequestCode.GET_CONSUMER_LIST_BY_GROUP:
        return Demand((Action.SUB,), ((GROUP, headers.consumer_group_header(fields)),))
    if code == RequestCode.CONSUMER_SEND_MSG_BACK:
        header = headers.send_back_header(fields)
        resources = [(GROUP, header.group)]
        if header.origin_topic:
            resources.insert(0, topic_resource(header.origin_topic))
        return Demand((Action.SUB,), tuple(resources))
    if code == RequestCode.QUERY_MESSAGE:
        topic = headers.query_message_header(fields).topic
        return Demand((Action.SUB, Action.GET), (topic_resource(topic),))
    if code == RequestCode.VIEW_MESSAGE_BY_ID:
        viewed = headers.view_message_header(fields).topic
        return Demand((Action.SUB, Action.GET), (topic_resource(viewed),)) if viewed else None
    if code in (RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ):
        return Demand((Action.SUB,), ((GROUP, bodies.parse_queue_locks(request.body).group),))
    return Demand((Action.ALL,), ((ResourceType.CLUSTER, f"remoting request {code}"),))
