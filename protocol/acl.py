"""ACL 2.0 (RocketMQ 5.3's access control): users, policies, and the decision.

A **user** has a name, a secret (the key its requests are signed with, see
``protocol/acl_signature.py``) and a type: a SUPER user may do anything; a
NORMAL user only what its **policy** allows. A policy (:class:`Acl`) belongs
to one user (its subject) and holds **entries**; each entry names a
**resource**, the **actions** it covers, a **decision** (ALLOW or DENY) and
optionally the source networks (CIDRs) it applies to (none: from anywhere).

Resources are written as RocketMQ writes them: ``Topic:orders`` (a literal
name), ``Topic:order*`` (a prefix), ``Topic:*`` (every topic), ``*`` (every
resource of every type); types are ``Cluster``, ``Topic`` and ``Group``.
Actions: ``Pub``, ``Sub``, ``Create``, ``Update``, ``Delete``, ``Get``,
``List`` and ``All`` (every action).

The decision (:func:`decide`), for one user, resource and action:

1. a SUPER user is allowed;
2. the entries that match (resource pattern, action, source address) are
   ranked by specificity: a named type before ``*``; then a literal name
   before a prefix before every name; then a longer prefix before a shorter;
3. among the most specific matching entries, DENY beats ALLOW;
4. no matching entry: denied (nothing is allowed unless a policy says so).

Every value here is a frozen dataclass of scalars, tuples and ``IntEnum``s,
encoded positionally (``protocol/positional.py``) in the nameserver's log
and snapshots: fields are ONLY ADDED AT THE END with a default, enum values
are append-only.

PURE.
"""

from __future__ import annotations

import enum
import ipaddress
from dataclasses import dataclass

from protocol import errors
from protocol.errors import CodedError


class InvalidAcl(CodedError):
    """A user, resource, action or policy written wrongly (the message names it)."""

    code = errors.BAD_REQUEST


class Unauthenticated(CodedError):
    """The caller is not who it claims: no credential, an unknown user, a bad signature
    or a stale date."""

    code = errors.UNAUTHENTICATED


class Forbidden(CodedError):
    """The caller is known but no policy lets it do the action on the resource."""

    code = errors.PERMISSION_DENIED


class UserType(enum.IntEnum):
    """A SUPER user may do anything; a NORMAL user what its policy allows. Append-only."""

    SUPER = 1
    NORMAL = 2


class ResourceType(enum.IntEnum):
    """What a resource is. ANY stands for every type (the resource ``*``). Append-only."""

    ANY = 1
    CLUSTER = 2
    TOPIC = 3
    GROUP = 4


class ResourcePattern(enum.IntEnum):
    """How a resource's name matches: every name, exactly, or as a prefix. Append-only."""

    ANY = 1
    LITERAL = 2
    PREFIXED = 3


class Action(enum.IntEnum):
    """What a caller does to a resource. ALL covers every action. Append-only."""

    ALL = 1
    PUB = 2
    SUB = 3
    CREATE = 4
    UPDATE = 5
    DELETE = 6
    GET = 7
    LIST = 8


class Decision(enum.IntEnum):
    """What a matching policy entry decides. Append-only."""

    ALLOW = 1
    DENY = 2


_TYPE_NAMES = {
    "Cluster": ResourceType.CLUSTER,
    "Topic": ResourceType.TOPIC,
    "Group": ResourceType.GROUP,
}
_ACTION_NAMES = {action.name.lower(): action for action in Action}
_DECISION_NAMES = {decision.name.lower(): decision for decision in Decision}
_USER_TYPE_NAMES = {user_type.name.lower(): user_type for user_type in UserType}


@dataclass(frozen=True, slots=True)
class User:
    """One user: ``name`` is the access key its clients send, ``secret`` signs them."""

    name: str
    secret: str
    user_type: UserType = UserType.NORMAL


@dataclass(frozen=True, slots=True)
class Resource:
    """A resource pattern; ``name`` is the literal name or the prefix ("" for ANY)."""

    resource_type: ResourceType
    pattern: ResourcePattern
    name: str = ""

    @property
    def text(self) -> str:
        """The resource as written (``Topic:orders``, ``Topic:order*``, ``Topic:*``, ``*``)."""
        if self.resource_type is ResourceType.ANY:
            return "*"
        type_name = self.resource_type.name.capitalize()
        if self.pattern is ResourcePattern.ANY:
            return f"{type_name}:*"
        suffix = "*" if self.pattern is ResourcePattern.PREFIXED else ""
        return f"{type_name}:{self.name}{suffix}"

    def matches(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this pattern covers the resource ``resource_type`` named ``name``."""
        if self.resource_type is not ResourceType.ANY and self.resource_type is not resource_type:
            return False
        if self.pattern is ResourcePattern.LITERAL:
            return name == self.name
        if self.pattern is ResourcePattern.PREFIXED:
            return name.startswith(self.name)
        return True

    @property
    def rank(self) -> tuple[int, int, int]:
        """Specificity: a larger rank is more specific (see the module docstring)."""
        pattern_rank = {ResourcePattern.ANY: 0, ResourcePattern.PREFIXED: 1}
        return (
            0 if self.resource_type is ResourceType.ANY else 1,
            pattern_rank.get(self.pattern, 2),
            len(self.name),
        )


@dataclass(frozen=True, slots=True)
class PolicyEntry:
    """One rule: ``decision`` for ``actions`` on ``resource``, from ``source_cidrs``
    (empty: from any address)."""

    resource: Resource
    actions: tuple[Action, ...]
    decision: Decision = Decision.ALLOW
    source_cidrs: tuple[str, ...] = ()

    def covers(self, action: Action, source_ip: str) -> bool:
        """Whether this entry applies to ``action`` from ``source_ip`` ("": unknown,
        which only an entry without source networks covers)."""
        if action not in self.actions and Action.ALL not in self.actions:
            return False
        if not self.source_cidrs:
            return True
        try:
            address = ipaddress.ip_address(source_ip)
        except ValueError:
            return False
        return any(
            address in ipaddress.ip_network(cidr, strict=False) for cidr in self.source_cidrs
        )


@dataclass(frozen=True, slots=True)
class Acl:
    """The policy of one user (``subject``, a user name): its entries, in any order."""

    subject: str
    entries: tuple[PolicyEntry, ...] = ()


@dataclass(frozen=True, slots=True)
class Verdict:
    """The answer of :func:`decide`: allowed or not, and why (for the error message)."""

    allowed: bool
    reason: str


def decide(
    user: User,
    acl: Acl | None,
    resource_type: ResourceType,
    name: str,
    action: Action,
    source_ip: str = "",
) -> Verdict:
    """Whether ``user`` (with its policy ``acl``) may do ``action`` on the resource
    ``resource_type`` ``name`` from ``source_ip`` (see the module docstring)."""
    if user.user_type is UserType.SUPER:
        return Verdict(True, "super user")
    matching = [
        entry
        for entry in (acl.entries if acl is not None else ())
        if entry.resource.matches(resource_type, name) and entry.covers(action, source_ip)
    ]
    if not matching:
        return Verdict(False, "no policy entry allows it")
    best_rank = max(entry.resource.rank for entry in matching)
    best = [entry for entry in matching if entry.resource.rank == best_rank]
    denying = [entry for entry in best if entry.decision is Decision.DENY]
    if denying:
        return Verdict(False, f"denied by the policy entry for {denying[0].resource.text}")
    return Verdict(True, "allowed by a policy entry")


def resource_text(resource_type: ResourceType, name: str) -> str:
    """One concrete resource as written in messages (``Topic:orders``)."""
    return f"{resource_type.name.capitalize()}:{name}"


# -- parsing what operators write -------------------------------------------------------


def parse_resource(text: str) -> Resource:
    """A resource pattern from its written form; :class:`InvalidAcl` names the mistake."""
    text = text.strip()
    if text == "*":
        return Resource(ResourceType.ANY, ResourcePattern.ANY)
    type_name, colon, name = text.partition(":")
    resource_type = _TYPE_NAMES.get(type_name.capitalize())
    if not colon or resource_type is None:
        raise InvalidAcl(
            f"resource {text!r}: write TYPE:NAME, TYPE:PREFIX*, TYPE:* or *, "
            f"TYPE one of {', '.join(_TYPE_NAMES)}"
        )
    if name == "*":
        return Resource(resource_type, ResourcePattern.ANY)
    if not name or "*" in name[:-1]:
        raise InvalidAcl(f"resource {text!r}: a name, or a prefix ending in one '*'")
    if name.endswith("*"):
        return Resource(resource_type, ResourcePattern.PREFIXED, name[:-1])
    return Resource(resource_type, ResourcePattern.LITERAL, name)


def parse_actions(text: str) -> tuple[Action, ...]:
    """Actions from a comma-separated list (``Pub,Sub``); case does not matter."""
    actions: list[Action] = []
    for word in (part.strip() for part in text.split(",")):
        action = _ACTION_NAMES.get(word.lower())
        if action is None:
            raise InvalidAcl(
                f"action {word!r}: one of {', '.join(a.name.capitalize() for a in Action)}"
            )
        if action not in actions:
            actions.append(action)
    return tuple(actions)


def parse_decision(text: str) -> Decision:
    """``Allow`` or ``Deny`` (any case)."""
    decision = _DECISION_NAMES.get(text.strip().lower())
    if decision is None:
        raise InvalidAcl(f"decision {text!r}: Allow or Deny")
    return decision


def parse_user_type(text: str) -> UserType:
    """``Super`` or ``Normal`` (any case)."""
    user_type = _USER_TYPE_NAMES.get(text.strip().lower())
    if user_type is None:
        raise InvalidAcl(f"user type {text!r}: Super or Normal")
    return user_type


def parse_source_cidrs(text: str) -> tuple[str, ...]:
    """Source networks from a comma-separated list of CIDRs or addresses ("": any)."""
    cidrs: list[str] = []
    for word in (part.strip() for part in text.split(",") if part.strip()):
        try:
            cidrs.append(str(ipaddress.ip_network(word, strict=False)))
        except ValueError:
            raise InvalidAcl(f"source {word!r} is not an address or CIDR network") from None
    return tuple(cidrs)


def check_user(user: User) -> None:
    """Refuse a user without a name or secret, or with characters the header cannot carry."""
    if not user.name or len(user.name) > 128:
        raise InvalidAcl("a user name is 1 to 128 characters")
    if any(ch in user.name for ch in " ,=\t\r\n"):
        raise InvalidAcl(f"user name {user.name!r}: no spaces, commas or '='")
    if not user.secret or len(user.secret) > 256:
        raise InvalidAcl(f"user {user.name!r}: a secret is 1 to 256 characters")


def parse_credentials_line(text: str, user_type: UserType = UserType.NORMAL) -> User:
    """The user of a credentials file's one line ``NAME:SECRET``; :class:`InvalidAcl`
    naming what is wrong."""
    name, colon, secret = text.strip().partition(":")
    if not colon:
        raise InvalidAcl("a credentials file holds one line NAME:SECRET")
    user = User(name, secret, user_type)
    check_user(user)
    return user


def check_acl(acl: Acl) -> None:
    """Refuse a policy without a subject or with an entry that covers no action."""
    if not acl.subject:
        raise InvalidAcl("a policy names its subject (a user)")
    for entry in acl.entries:
        if not entry.actions:
            raise InvalidAcl(f"policy entry for {entry.resource.text}: no actions")
        parse_source_cidrs(",".join(entry.source_cidrs))


def merge_entries(
    known: tuple[PolicyEntry, ...], added: tuple[PolicyEntry, ...]
) -> tuple[PolicyEntry, ...]:
    """``known`` with ``added`` in place of the entries for the same resources (an
    update replaces a resource's entry and keeps the others)."""
    replaced = {entry.resource for entry in added}
    return tuple(entry for entry in known if entry.resource not in replaced) + added


@dataclass(frozen=True, slots=True)
class AclTables:
    """Every user and policy of a cluster, as the nameserver keeps them and brokers
    cache them (one value, replaced whole on refresh)."""

    users: tuple[User, ...] = ()
    acls: tuple[Acl, ...] = ()

    def user(self, name: str) -> User | None:
        """The user named ``name``, None if there is none."""
        return next((user for user in self.users if user.name == name), None)

    def acl(self, subject: str) -> Acl | None:
        """The policy of user ``subject``, None if it has none."""
        return next((acl for acl in self.acls if acl.subject == subject), None)

    def check(
        self,
        user: User,
        resources: tuple[tuple[ResourceType, str], ...],
        action: Action,
        source_ip: str = "",
    ) -> None:
        """Raise :class:`Forbidden` naming the first of ``resources`` that ``user`` may
        not do ``action`` on (every one must be allowed: a receive needs its topic and
        its group)."""
        acl = self.acl(user.name)
        for resource_type, name in resources:
            verdict = decide(user, acl, resource_type, name, action, source_ip)
            if not verdict.allowed:
                raise Forbidden(
                    f"user {user.name!r} may not {action.name.capitalize()} on "
                    f"{resource_text(resource_type, name)}: {verdict.reason}"
                )
