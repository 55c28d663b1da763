"""ACL 2.0's pure core: resource patterns, the decision's precedence, signatures."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import errors
from protocol.acl import (
    Acl,
    AclTables,
    Action,
    Decision,
    Forbidden,
    InvalidAcl,
    PolicyEntry,
    Resource,
    ResourcePattern,
    ResourceType,
    Unauthenticated,
    User,
    UserType,
    check_acl,
    check_user,
    decide,
    merge_entries,
    parse_actions,
    parse_decision,
    parse_resource,
    parse_source_cidrs,
    parse_user_type,
)
from protocol.acl_signature import (
    CLASSIC_ACCESS_KEY,
    CLASSIC_SIGNATURE,
    DATE_TIME_HEADER,
    authorization,
    classic_signature,
    date_time_ms,
    format_date_time,
    parse_authorization,
    sign,
    verify,
    verify_classic,
)

ALICE = User("alice", "s3cret")
ROOT = User("root", "r00t", UserType.SUPER)
T = ResourceType.TOPIC
G = ResourceType.GROUP


def entry(resource: str, actions: str, decision: str = "Allow", sources: str = "") -> PolicyEntry:
    return PolicyEntry(
        parse_resource(resource),
        parse_actions(actions),
        parse_decision(decision),
        parse_source_cidrs(sources),
    )


def allowed(
    acl: Acl | None, resource_type: ResourceType, name: str, action: Action, source_ip: str = ""
) -> bool:
    return decide(ALICE, acl, resource_type, name, action, source_ip).allowed


def test_resources_parse_as_rocketmq_writes_them_and_print_back() -> None:
    cases = {
        "Topic:orders": Resource(T, ResourcePattern.LITERAL, "orders"),
        "Topic:order*": Resource(T, ResourcePattern.PREFIXED, "order"),
        "Group:*": Resource(G, ResourcePattern.ANY),
        "Cluster:c1": Resource(ResourceType.CLUSTER, ResourcePattern.LITERAL, "c1"),
        "*": Resource(ResourceType.ANY, ResourcePattern.ANY),
    }
    for text, resource in cases.items():
        assert parse_resource(text) == resource
        assert resource.text == text


@pytest.mark.parametrize("text", ["orders", "Queue:orders", "Topic:", "Topic:a*b*", "Topic:*x"])
def test_a_malformed_resource_is_refused_naming_it(text: str) -> None:
    with pytest.raises(InvalidAcl, match="resource") as raised:
        parse_resource(text)
    assert raised.value.code is errors.BAD_REQUEST


def test_actions_decisions_types_and_sources_parse_or_name_the_mistake() -> None:
    assert parse_actions("Pub, sub,PUB") == (Action.PUB, Action.SUB)
    assert parse_decision("deny") is Decision.DENY
    assert parse_user_type("Super") is UserType.SUPER
    assert parse_source_cidrs("10.0.0.0/8, 192.168.1.7") == ("10.0.0.0/8", "192.168.1.7/32")
    assert parse_source_cidrs("") == ()
    for parse, bad in (
        (parse_actions, "Pub,Publish"),
        (parse_decision, "maybe"),
        (parse_user_type, "admin"),
        (parse_source_cidrs, "10.0.0.300"),
    ):
        with pytest.raises(InvalidAcl, match=bad.split(",")[-1]):
            parse(bad)


def test_a_super_user_may_do_anything_and_nothing_is_allowed_without_a_policy() -> None:
    assert decide(ROOT, None, T, "orders", Action.DELETE).allowed
    verdict = decide(ALICE, None, T, "orders", Action.PUB)
    assert not verdict.allowed
    assert "no policy" in verdict.reason


def test_an_entry_covers_only_its_actions_and_resources() -> None:
    acl = Acl("alice", (entry("Topic:orders", "Pub"), entry("Group:g*", "Sub")))
    assert allowed(acl, T, "orders", Action.PUB)
    assert not allowed(acl, T, "orders", Action.SUB)
    assert not allowed(acl, T, "orders2", Action.PUB)
    assert allowed(acl, G, "g1", Action.SUB)
    assert not allowed(acl, T, "g1", Action.SUB)  # the type must match too
    everything = Acl("alice", (entry("*", "All"),))
    assert allowed(everything, G, "any", Action.UPDATE)


def test_deny_beats_allow_at_the_same_specificity() -> None:
    acl = Acl("alice", (entry("Topic:orders", "Pub,Sub"), entry("Topic:orders", "Pub", "Deny")))
    assert not allowed(acl, T, "orders", Action.PUB)
    assert allowed(acl, T, "orders", Action.SUB)
    verdict = decide(ALICE, acl, T, "orders", Action.PUB)
    assert "denied by the policy entry for Topic:orders" in verdict.reason


def test_the_most_specific_matching_entry_decides() -> None:
    acl = Acl(
        "alice",
        (
            entry("*", "All", "Deny"),
            entry("Topic:*", "Pub"),
            entry("Topic:ord*", "Pub", "Deny"),
            entry("Topic:orders*", "Pub"),
            entry("Topic:orders-eu", "Pub", "Deny"),
        ),
    )
    assert allowed(acl, T, "payments", Action.PUB)  # Topic:* beats *
    assert not allowed(acl, T, "ordinal", Action.PUB)  # the prefix beats Topic:*
    assert allowed(acl, T, "orders-us", Action.PUB)  # the longer prefix beats the shorter
    assert not allowed(acl, T, "orders-eu", Action.PUB)  # the literal beats every prefix
    assert not allowed(acl, G, "g", Action.SUB)  # only * matches a group: deny


def test_source_networks_limit_where_an_entry_applies() -> None:
    acl = Acl("alice", (entry("Topic:orders", "Pub", sources="10.1.0.0/16"),))
    assert allowed(acl, T, "orders", Action.PUB, "10.1.2.3")
    assert not allowed(acl, T, "orders", Action.PUB, "10.2.0.1")
    assert not allowed(acl, T, "orders", Action.PUB, "")  # unknown source: not covered


def test_tables_check_every_resource_and_name_the_refused_one() -> None:
    tables = AclTables((ALICE, ROOT), (Acl("alice", (entry("Topic:orders", "Sub"),)),))
    assert tables.user("alice") == ALICE
    assert tables.user("bob") is None
    tables.check(ALICE, ((T, "orders"),), Action.SUB)
    with pytest.raises(Forbidden) as raised:
        tables.check(ALICE, ((T, "orders"), (G, "billing")), Action.SUB)
    assert raised.value.code is errors.PERMISSION_DENIED
    assert "'alice' may not Sub on Group:billing" in str(raised.value)
    tables.check(ROOT, ((G, "billing"),), Action.DELETE)


def test_users_and_policies_are_checked_and_updates_replace_by_resource() -> None:
    check_user(ALICE)
    for bad in (User("", "x"), User("a b", "x"), User("a", "")):
        with pytest.raises(InvalidAcl):
            check_user(bad)
    with pytest.raises(InvalidAcl, match="subject"):
        check_acl(Acl(""))
    with pytest.raises(InvalidAcl, match="no actions"):
        check_acl(Acl("alice", (PolicyEntry(parse_resource("*"), ()),)))
    known = (entry("Topic:a", "Pub"), entry("Topic:b", "Sub"))
    merged = merge_entries(known, (entry("Topic:a", "Pub", "Deny"),))
    assert merged == (entry("Topic:b", "Sub"), entry("Topic:a", "Pub", "Deny"))


# -- signatures ------------------------------------------------------------------------

NOW_MS = 1_795_000_000_000
SKEW_MS = 60_000


def test_the_official_clients_header_parses_and_verifies() -> None:
    date_time = format_date_time(NOW_MS)
    assert date_time_ms(date_time) == NOW_MS // 1000 * 1000
    # The official Python client's form, as it builds it.
    signature = sign("s3cret", date_time)
    header = (
        f"MQv2-HMAC-SHA1 Credential=alice, SignedHeaders={DATE_TIME_HEADER}, Signature={signature}"
    )
    assert header == authorization("alice", "s3cret", date_time)
    credential = parse_authorization(header)
    assert credential.access_key == "alice"
    assert credential.signed_headers == (DATE_TIME_HEADER,)
    verify(credential, "s3cret", date_time, NOW_MS + 30_000, SKEW_MS)
    assert len(signature) == 40
    assert signature == signature.lower()


def test_a_wrong_secret_a_stale_date_or_a_malformed_header_is_unauthenticated() -> None:
    date_time = format_date_time(NOW_MS)
    credential = parse_authorization(authorization("alice", "s3cret", date_time))
    cases = [
        (lambda: verify(credential, "other", date_time, NOW_MS, SKEW_MS), "signature mismatch"),
        (lambda: verify(credential, "s3cret", date_time, NOW_MS + 61_000, SKEW_MS), "stale"),
        (lambda: verify(credential, "s3cret", date_time, NOW_MS - 61_000, SKEW_MS), "stale"),
        (lambda: verify(credential, "s3cret", "yesterday", NOW_MS, SKEW_MS), "not a date"),
        (lambda: parse_authorization("Basic abc"), "algorithm"),
        (lambda: parse_authorization("MQv2-HMAC-SHA1 Credential=a"), "missing SignedHeaders"),
    ]
    for call, words in cases:
        with pytest.raises(Unauthenticated, match=words) as raised:
            call()
        assert raised.value.code is errors.UNAUTHENTICATED


# -- what a client or operator may send: parsed or refused, nothing else -----------------


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=120))
def test_any_authorization_header_parses_or_is_unauthenticated(header: str) -> None:
    try:
        credential = parse_authorization(header)
    except Unauthenticated:
        return
    assert credential.access_key
    with pytest.raises(Unauthenticated):
        verify(credential, "secret", "not a date", NOW_MS, SKEW_MS)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_any_resource_text_parses_to_what_it_prints_or_is_refused(text: str) -> None:
    try:
        resource = parse_resource(text)
    except InvalidAcl:
        return
    assert parse_resource(resource.text) == resource


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.text(max_size=12), st.text(max_size=12), max_size=6),
    st.binary(max_size=64),
    st.text(min_size=1, max_size=16),
)
def test_a_classic_signature_verifies_only_its_own_fields_and_body(
    fields: dict[str, str], body: bytes, secret: str
) -> None:
    signed = {**fields, CLASSIC_ACCESS_KEY: "alice"}
    signed[CLASSIC_SIGNATURE] = classic_signature(signed, body, secret)
    verify_classic(signed, body, secret)
    with pytest.raises(Unauthenticated):
        verify_classic(signed, body + b"x", secret)
