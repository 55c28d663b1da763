"""Transactions: ending them, and the cluster-wide check-back of orphans.

Ending: EndTransaction names the topic, the message id and the transaction
id (which carries the queue, see ``transaction_id.py``), so any broker can
commit or roll back a half message another broker stored.

Check-back: exactly one broker of the cluster scans for orphans at a time:
the holder of the nameserver lease ``checkback.LEASE_NAME``. Each scan
period it takes or extends the lease; if it cannot (another broker holds
it), it does nothing that period. When the holder dies its lease expires
and the next broker to ask takes over; the check counts live in storage, so
nothing is lost or repeated beyond one check. A check is delivered to a
live producer of the orphan's group connected to this broker, else through
another broker that reports such a producer (``BrokerPeers``); the
producer answers with an EndTransaction marked as a server check.

Ordering within a round: a check is sent before it is counted, so a crash
between the two costs at most one extra check, never a skipped one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Protocol

from broker.domain import HalfMessage, SendResult
from broker.errors import BrokerError
from broker.metrics import BrokerMetrics
from broker.processor import transaction_id as transaction_ids
from broker.processor import validation
from broker.processor.checkback import LEASE_NAME, CheckPolicy, plan_round
from broker.services.base import (
    NAMESERVER_QUIET_AT_START_MS,
    BrokerPeers,
    Clock,
    Coordination,
    MessageStore,
)
from protocol import errors as codes

log = logging.getLogger("broker.transaction")

LEASE_RELEASE_TIMEOUT_S = 1.0
"""How long a stopping broker tries to hand the check-back lease back."""


class LocalProducers(Protocol):
    """The producers connected to this broker (gRPC Telemetry streams, remoting
    connections)."""

    def maybe_send_check(self, producer_group: str, half: HalfMessage, transaction_id: str) -> bool:
        """Send a check-back of ``half`` to one connected producer of the group; whether
        one was connected."""
        ...


class AnyProducers:
    """Several sets of local producers as one: a check goes to the first that has a
    producer for it (one protocol's producers, then another's)."""

    def __init__(self, *producers: LocalProducers) -> None:
        self._producers = producers

    def maybe_send_check(self, producer_group: str, half: HalfMessage, transaction_id: str) -> bool:
        """Send through the first set that has a producer of the group."""
        return any(
            producers.maybe_send_check(producer_group, half, transaction_id)
            for producers in self._producers
        )


@dataclass(frozen=True, slots=True)
class CheckRound:
    """What one check-back round did (for logs and tests)."""

    checked: int = 0  # checks delivered to a producer
    unreachable: int = 0  # orphans with no live producer anywhere
    rolled_back: int = 0  # orphans rolled back after their last check


class TransactionProcessor:
    """EndTransaction, and the orphan check-back loop (see the module docstring).

    ``coordination`` and ``peers`` may be None for a single broker: it then
    owns the check-back alone and reaches only its own producers.
    """

    def __init__(
        self,
        store: MessageStore,
        clock: Clock,
        local: LocalProducers,
        *,
        owner: str,
        policy: CheckPolicy | None = None,
        coordination: Coordination | None = None,
        peers: BrokerPeers | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._local = local
        self.owner = owner
        self.policy = policy or CheckPolicy()
        self._coordination = coordination
        self._peers = peers
        self.holds_lease = False
        self._lease_warned = False  # a failing lease call was warned of (once per run)
        self._quiet_until_ms = clock.now_ms() + NAMESERVER_QUIET_AT_START_MS
        self.delivered_local = 0  # check-backs this broker sent to its own producers
        self.delivered_via_peer = 0  # check-backs it had another broker deliver
        self.metrics: BrokerMetrics | None = None  # set by the broker role when it exports them

    async def end(
        self,
        topic: str,
        message_id: str,
        transaction_id: str,
        commit: bool | None,
        *,
        from_check: bool = False,
    ) -> SendResult | None:
        """Commit (``True``), roll back (``False``) or leave (``None``: the producer does
        not know yet) a transaction; where a committed message went."""
        validation.check_topic(topic)
        queue, message_id = transaction_ids.decode(transaction_id, topic, message_id)
        if commit is None:
            log.info("transaction %s left unresolved by its producer", transaction_id)
            return None
        result = await self._store.end_transaction(queue, message_id, commit)
        if self.metrics is not None:
            self.metrics.ended(topic, commit)
        if from_check:
            log.info(
                "transaction %s %s by a check-back answer",
                transaction_id,
                "committed" if commit else "rolled back",
            )
        return result

    # ------------------------------------------------------------ check-back

    def deliver_local(self, half: HalfMessage, transaction_id: str) -> bool:
        """Send a check-back to a producer connected here (a peer broker asked us)."""
        return self._local.maybe_send_check(half.producer_group, half, transaction_id)

    async def _deliver(self, half: HalfMessage) -> bool:
        transaction_id = transaction_ids.encode(half.queue, half.message.message_id)
        if self.deliver_local(half, transaction_id):
            self.delivered_local += 1
            log.info("check-back of transaction %s sent to a producer here", transaction_id)
            return True
        if self._coordination is None or self._peers is None:
            return False
        brokers = await self._coordination.brokers_with_producers(half.producer_group)
        for broker in brokers:
            if broker == self.owner:
                continue
            if await self._peers.deliver_orphan_check(broker, half, transaction_id):
                self.delivered_via_peer += 1
                log.info(
                    "check-back of transaction %s sent through broker %s", transaction_id, broker
                )
                return True
        log.info(
            "check-back of transaction %s found no producer of %r (brokers reporting one: %s)",
            transaction_id,
            half.producer_group,
            brokers,
        )
        return False

    async def check_once(self) -> CheckRound:
        """One round over the orphans due now (the caller holds the lease)."""
        stored_before_ms, checked_before_ms = self.policy.window(self._clock.now_ms())
        orphans = await self._store.orphaned_transactions(
            stored_before_ms, checked_before_ms, self.policy.batch_max
        )
        log.debug("check-back round: %d orphans due", len(orphans))
        if not orphans:
            return CheckRound()
        plan = plan_round(orphans, self.policy.check_max)
        checked = unreachable = 0
        for half in plan.check:
            try:
                delivered = await self._deliver(half)
            except BrokerError as error:
                log.warning("check-back of %s failed: %s", half.message.message_id, error)
                delivered = False
            checked += delivered
            unreachable += not delivered
        rolled_back = await self._store.note_transaction_checks(
            plan.check + plan.give_up, self.policy.check_max
        )
        for half in rolled_back:
            log.warning(
                "transaction %s of topic %s rolled back: no answer after %d check-backs",
                transaction_ids.encode(half.queue, half.message.message_id),
                half.queue.topic,
                self.policy.check_max,
            )
        return CheckRound(checked, unreachable, len(rolled_back))

    async def maybe_take_lease(self) -> bool:
        """Take or extend the check-back lease; whether this broker holds it now."""
        if self._coordination is None:
            self.holds_lease = True
            return True
        try:
            held = await self._coordination.try_lease(
                LEASE_NAME, self.owner, self.policy.lease_ttl_ms
            )
        except BrokerError as error:
            # The nameserver cannot be asked: nobody can take the lease meanwhile, so
            # its holder goes on checking (an expiry seen by a broker that still
            # reaches the nameserver costs at most a repeated check, as a takeover does).
            away = error.code in (codes.UNAVAILABLE, codes.DEADLINE_EXCEEDED)
            held = away and self.holds_lease
            # INFO while the broker starts, then one warning per outage, the rest DEBUG.
            if self._lease_warned:
                level = logging.DEBUG
            elif self._clock.now_ms() < self._quiet_until_ms:
                level = logging.INFO
            else:
                level, self._lease_warned = logging.WARNING, True
            log.log(
                level,
                "transaction check lease unavailable%s: %s",
                " (checking on while the nameserver is away)" if held else "",
                error,
            )
        else:
            self._lease_warned = False
        if held != self.holds_lease:
            log.info("transaction check-back %s", "owned here" if held else "owned elsewhere")
        self.holds_lease = held
        return held

    async def run(self) -> None:
        """Forever: every scan period, if this broker holds the lease, one check round.

        Errors of one round (even unexpected ones) are logged and the next round
        runs; on cancellation
        the lease is released so another broker takes over at once.
        """
        try:
            while True:
                try:
                    if await self.maybe_take_lease():
                        await self.check_once()
                except BrokerError as error:
                    log.warning("transaction check round failed: %s", error)
                except Exception:  # a bug must not stop the check-back for good
                    log.exception("transaction check round failed unexpectedly")
                await asyncio.sleep(self.policy.scan_period_ms / 1000)
        finally:
            # Bounded: at shutdown the nameserver may be gone already, and an
            # unreleased lease only delays the takeover until it expires.
            if self.holds_lease and self._coordination is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(
                        self._coordination.release_lease(LEASE_NAME, self.owner),
                        LEASE_RELEASE_TIMEOUT_S,
                    )
