"""Compact text forms of the core's values, for scenario files and failures."""

from __future__ import annotations

from raft.core.confchange import decode_conf_change, decode_conf_change_v2
from raft.types import (
    ConfState,
    Entry,
    EntryType,
    HardState,
    Message,
    Ready,
    Snapshot,
    SoftState,
)


def _ids(ids: frozenset[int]) -> str:
    return "(" + " ".join(str(i) for i in sorted(ids)) + ")"


def conf_state(cs: ConfState) -> str:
    """Voters=(1 2 3) Learners=(4)."""
    text = f"Voters:{_ids(cs.voters)}"
    if cs.voters_outgoing:
        text += f"&&{_ids(cs.voters_outgoing)}"
    if cs.learners:
        text += f" Learners:{_ids(cs.learners)}"
    if cs.learners_next:
        text += f" LearnersNext:{_ids(cs.learners_next)}"
    if cs.auto_leave:
        text += " AutoLeave"
    return text


def entry(e: Entry) -> str:
    """term/index type data."""
    if e.type == EntryType.CONF_CHANGE:
        change = decode_conf_change(e.data)
        return f"{e.term}/{e.index} ConfChange {change.type.name.lower()} {change.node_id}"
    if e.type == EntryType.CONF_CHANGE_V2:
        v2 = decode_conf_change_v2(e.data)
        if v2.leaves_joint():
            return f"{e.term}/{e.index} ConfChangeV2 leave-joint"
        changes = " ".join(f"{c.type.name.lower()} {c.node_id}" for c in v2.changes)
        return f"{e.term}/{e.index} ConfChangeV2 {v2.transition.name.lower()}: {changes}"
    return f"{e.term}/{e.index} {e.data.decode(errors='replace')!r}"


def entries(es: tuple[Entry, ...] | list[Entry]) -> str:
    """[e1, e2] in short form."""
    return "[" + ", ".join(entry(e) for e in es) + "]"


def snapshot(s: Snapshot) -> str:
    """Index, term and membership of a snapshot."""
    meta = s.metadata
    return f"Index:{meta.index} Term:{meta.term} {conf_state(meta.conf_state)}"


def message(m: Message) -> str:
    """1->2 APP Term:1 Log:1/3 Commit:3 Entries:[...]."""
    parts = [f"{m.from_}->{m.to} {m.type.name}", f"Term:{m.term}"]
    kind = m.type.name
    if kind in ("APP", "VOTE", "PRE_VOTE"):
        parts.append(f"Log:{m.log_term}/{m.index}")
    elif m.index and not m.reject:
        parts.append(f"Index:{m.index}")
    if m.reject and kind == "APP_RESP":
        parts.append(f"Rejected (Index:{m.index} Hint:{m.reject_hint}/{m.log_term})")
    elif m.reject:
        parts.append("Rejected")
    if m.commit:
        parts.append(f"Commit:{m.commit}")
    if m.entries:
        parts.append(f"Entries:{entries(m.entries)}")
    if m.snapshot is not None:
        parts.append(f"Snapshot:[{snapshot(m.snapshot)}]")
    if m.context:
        parts.append(f"Context:{m.context.decode(errors='replace')}")
    return " ".join(parts)


def hard_state(hs: HardState) -> str:
    """Term, vote and commit."""
    return f"HardState Term:{hs.term} Vote:{hs.vote} Commit:{hs.commit}"


def soft_state(ss: SoftState) -> str:
    """Leader and role."""
    return f"Lead:{ss.lead} Role:{ss.role.name}"


def ready(rd: Ready) -> list[str]:
    """Every non-empty field of a Ready, one per line."""
    lines = [f"Ready MustSync={str(rd.must_sync).lower()}:"]
    if rd.soft_state is not None:
        lines.append(soft_state(rd.soft_state))
    if rd.hard_state is not None:
        lines.append(hard_state(rd.hard_state))
    if rd.entries:
        lines.append("Entries:")
        lines.extend(entry(e) for e in rd.entries)
    if rd.snapshot is not None:
        lines.append(f"Snapshot {snapshot(rd.snapshot)}")
    if rd.committed_entries:
        lines.append("CommittedEntries:")
        lines.extend(entry(e) for e in rd.committed_entries)
    if rd.messages:
        lines.append("Messages:")
        lines.extend(message(m) for m in rd.messages)
    if rd.read_states:
        lines.append("ReadStates:")
        lines.extend(
            f"Index:{rs.index} Context:{rs.request_ctx.decode(errors='replace')}"
            for rs in rd.read_states
        )
    return lines
