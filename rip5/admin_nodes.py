"""``rip5 admin node`` and ``rip5 admin broker``: take a storage node out of a
cluster (drain, then remove), or a broker (drain: it exits when done).

- ``node drain N`` records node N as draining (replicated: a nameserver
  failover carries on with it). The nameserver leader's sweeps then move
  every replica off it, at most ``--moves-max`` groups at a time (the
  nameserver's option; fewer while the cluster's append p99 is above twice
  what it was before moves began: ``nameserver/move_throttle.py``; the
  progress shows how many at once), each as a raft membership change: the new replica
  joins as a learner, is caught up by snapshot and log, is promoted, and
  only then is N's replica removed (N hands leadership away first when it
  leads). N gets no new replica and no leadership while draining. The
  command shows the progress until N hosts nothing (``--no-wait``: return
  at once).
- ``node undrain N`` stops a drain; the rebalance gives N its share again.
- ``node remove N`` forgets a node that is down and hosts nothing: drain it,
  stop its process, then remove it (a live node would register again with
  its next heartbeat, so that is refused).
- ``broker drain B`` (B: a broker id, its peer address, or its client
  address, as ``rip5 admin cluster status`` lists them) asks broker B to
  drain: it refuses new client calls with a retriable status, stops
  heartbeating, lets its calls in flight (long polls) finish, then exits.
  The command shows the calls still in flight until B is gone.

SHELL (the nameserver and brokers over Angelia; a clock for the progress display).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import click
import uvloop

from angelia_rpc import AngeliaError, Peers, RpcConfig
from angelia_rpc.cluster_services import BrokerService
from angelia_rpc.nameserver_client import NameserverClient
from protocol import broker_api as br
from protocol import errors as codes
from protocol import nameserver_api as api
from rip5.admin import (
    CALL_TIMEOUT_MS,
    DEFAULT_CLUSTER,
    EXIT_REFUSED,
    fail,
    nameserver_option,
    parse_nameservers,
    run,
)

POLL_INTERVAL_S = 1.0


@dataclass(frozen=True, slots=True)
class DrainProgress:
    """Where a drain stands, from one cluster status."""

    node_id: int
    replicas: int  # groups N is still a replica of (a move away under way counts)
    moving: int  # of those, groups with a move under way
    leaders: int  # groups N leads, as the state records them
    hosted: int  # replicas N itself reports hosting (its last heartbeat)
    alive: bool
    moves_budget: int = 0  # groups the nameserver lets move at once now (0: not told)

    @property
    def done(self) -> bool:
        """N is a replica of nothing, and (if alive) reports hosting nothing."""
        return self.replicas == 0 and (self.hosted == 0 or not self.alive)

    def line(self) -> str:
        """One line for the operator."""
        return (
            f"node {self.node_id}: {self.replicas} replicas left ({self.moving} moving"
            + (f", at most {self.moves_budget} at once" if self.moves_budget else "")
            + "), "
            f"leads {self.leaders}, hosts {self.hosted}"
            + ("" if self.alive else ", down")
            + (": drained" if self.done else "")
        )


def drain_progress(status: api.ClusterStatusResponse, node_id: int) -> DrainProgress:
    """The progress of draining ``node_id``; ValueError if the status has no such node."""
    node = next((n for n in status.storage_nodes if n.node_id == node_id), None)
    if node is None:
        raise ValueError(f"storage node {node_id} is not registered")
    groups = [g for g in status.groups if node_id in g.replicas]
    return DrainProgress(
        node_id,
        replicas=len(groups),
        moving=sum(1 for g in groups if g.joining or g.leaving),
        leaders=sum(1 for g in status.groups if g.leader == node_id),
        hosted=node.groups,
        alive=node.alive,
        moves_budget=status.moves_budget,
    )


@click.group()
def node() -> None:
    """drain | undrain | remove a storage node."""


@node.command("drain")
@click.argument("node_id", type=click.IntRange(min=1))
@nameserver_option
@click.option("--cluster", "cluster", default=DEFAULT_CLUSTER, show_default=True)
@click.option("--wait/--no-wait", default=True, show_default=True, help="show progress until done")
@click.option("--timeout-s", type=click.FloatRange(min=1), default=3600, show_default=True)
def drain(node_id: int, nameserver: str, cluster: str, wait: bool, timeout_s: float) -> None:
    """Move every replica and leadership off storage node NODE_ID."""
    request = api.StorageNodeRequest(node_id, draining=True)
    run(nameserver, lambda ns: ns.drain_storage_node(request, timeout_ms=CALL_TIMEOUT_MS))
    click.echo(f"node {node_id}: draining")
    if not wait:
        return
    progress = uvloop.run(_follow(parse_nameservers(nameserver), cluster, node_id, timeout_s))
    if not progress.done:
        fail(f"{progress.line()}; not drained after {timeout_s:g} s", EXIT_REFUSED)


@node.command("undrain")
@click.argument("node_id", type=click.IntRange(min=1))
@nameserver_option
def undrain(node_id: int, nameserver: str) -> None:
    """Stop draining NODE_ID: it takes its share of replicas again."""
    request = api.StorageNodeRequest(node_id, draining=False)
    run(nameserver, lambda ns: ns.drain_storage_node(request, timeout_ms=CALL_TIMEOUT_MS))
    click.echo(f"node {node_id}: no longer draining")


@node.command("remove")
@click.argument("node_id", type=click.IntRange(min=1))
@nameserver_option
def remove(node_id: int, nameserver: str) -> None:
    """Forget NODE_ID, once it is drained and stopped."""
    request = api.StorageNodeRequest(node_id)
    run(nameserver, lambda ns: ns.remove_storage_node(request, timeout_ms=CALL_TIMEOUT_MS))
    click.echo(f"node {node_id}: removed")


async def _follow(
    addresses: list[str], cluster: str, node_id: int, timeout_s: float
) -> DrainProgress:
    """Print the drain's progress whenever it changes, until done or ``timeout_s``;
    the last progress seen. A nameserver briefly unreachable (an election) is waited
    out."""
    client = NameserverClient(addresses)
    request = api.NameRequest(cluster)
    deadline = time.monotonic() + timeout_s
    shown = ""
    progress: DrainProgress | None = None
    try:
        while True:
            try:
                status = await client.call(
                    lambda ns: ns.cluster_status(request, timeout_ms=CALL_TIMEOUT_MS)
                )
                progress = drain_progress(status, node_id)
            except AngeliaError as exc:
                click.echo(f"(nameserver: {exc.message}; retrying)", err=True)
            except ValueError as exc:
                fail(str(exc), EXIT_REFUSED)
            if progress is not None:
                line = progress.line()
                if line != shown:
                    click.echo(line)
                    shown = line
                if progress.done or time.monotonic() >= deadline:
                    return progress
            elif time.monotonic() >= deadline:
                fail(f"no answer from the nameserver in {timeout_s:g} s", EXIT_REFUSED)
            await asyncio.sleep(POLL_INTERVAL_S)
    finally:
        await client.close()


@click.group()
def broker() -> None:
    """drain a broker."""


def broker_id_of(status: api.ClusterStatusResponse, name: str) -> str:
    """The broker id (peer address) of the broker named ``name`` (its id or its client
    address); ValueError if no registered broker has that name."""
    for info in status.brokers:
        if name in (info.broker_id, info.address):
            return info.broker_id
    known = ", ".join(f"{b.broker_id} (client {b.address})" for b in status.brokers)
    raise ValueError(f"no broker {name!r} is registered; brokers: {known or 'none'}")


@broker.command("drain")
@click.argument("broker_name", metavar="B")
@nameserver_option
@click.option("--cluster", "cluster", default=DEFAULT_CLUSTER, show_default=True)
@click.option("--wait/--no-wait", default=True, show_default=True, help="wait until B exits")
@click.option("--timeout-s", type=click.FloatRange(min=1), default=120, show_default=True)
def drain_broker(
    broker_name: str, nameserver: str, cluster: str, wait: bool, timeout_s: float
) -> None:
    """Drain broker B: new calls refused (clients retry on other brokers), calls in
    flight finished, then B exits."""
    status = run(
        nameserver,
        lambda ns: ns.cluster_status(api.NameRequest(cluster), timeout_ms=CALL_TIMEOUT_MS),
    )
    try:
        broker_id = broker_id_of(status, broker_name)
    except ValueError as exc:
        fail(str(exc), EXIT_REFUSED)
    if not uvloop.run(_drain_broker(broker_id, wait, timeout_s)):
        fail(f"broker {broker_id}: still running after {timeout_s:g} s", EXIT_REFUSED)


async def _drain_broker(broker_id: str, wait: bool, timeout_s: float) -> bool:
    """Ask ``broker_id`` to drain, then (``wait``) show its calls in flight until it
    no longer answers; whether it is gone (or, without ``wait``, draining)."""
    peers = Peers(RpcConfig())
    stub = peers.stub(BrokerService, broker_id)
    deadline = time.monotonic() + timeout_s
    shown = ""
    try:
        while True:
            try:
                answer = await stub.drain(br.DrainRequest(), timeout_ms=CALL_TIMEOUT_MS)
            except AngeliaError as exc:
                if shown and exc.code is codes.UNAVAILABLE:
                    click.echo(f"broker {broker_id}: exited")
                    return True
                fail(
                    f"broker {broker_id} refused the drain: {exc.code.name}: {exc.message}",
                    EXIT_REFUSED,
                )
            line = (
                f"broker {broker_id}: draining, {answer.in_flight} calls in flight, "
                f"{answer.refused} refused"
            )
            if line != shown:
                click.echo(line)
                shown = line
            if not wait:
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(POLL_INTERVAL_S / 4)
    finally:
        await peers.close()
