"""Linearizability checks of a group's client history.

Two checkers over the same history:

* ``check_queue`` — the replicated object is an append-only queue of unique
  values, and the final committed queue (which the state machine safety
  checker has already proven identical on every replica) fixes the order of
  the appends. Linearizability then reduces to pairwise real-time checks:
  an append that completed before another was invoked sits earlier in the
  queue; a read sees every append that completed before it was invoked and
  none invoked after it returned; reads never go backwards in real time;
  acknowledged appends survive, failed ones never appear. O(n log n).
* ``check_register`` — a Wing & Gong search (with Lowe's memoisation of
  (linearized set, state), as in Knossos/Porcupine) over the register view of
  the same history: an append writes the register, a read returns the last
  value. It assumes nothing about the final log, so it cross-checks the
  queue checker on small histories. It has a step budget and answers None
  when the budget runs out.

An operation with an unknown outcome may take effect at any time after its
invocation, or never; a failed operation never took effect.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from tests.sim.history import Operation, OpKind, Outcome

_INF = float("inf")


def _done(op: Operation) -> float:
    """Completion time, infinite when the outcome is unknown."""
    return _INF if op.completed_at is None else op.completed_at


def check_queue(ops: Sequence[Operation], final_queue: Sequence[int]) -> list[str]:
    """Violations of queue linearizability for one group's history (empty: none)."""
    violations: list[str] = []
    position: dict[int, int] = {}
    for i, value in enumerate(final_queue, start=1):
        if value in position:
            violations.append(f"value {value} applied twice (positions {position[value]} and {i})")
        position[value] = i
    appends = [op for op in ops if op.kind is OpKind.APPEND]
    reads = [op for op in ops if op.kind is OpKind.READ and op.outcome is Outcome.OK]
    invoked = {op.value: op for op in appends}
    for value in final_queue:
        if value not in invoked:
            violations.append(f"value {value} in the queue was never appended by a client")

    placed: list[tuple[int, Operation]] = []  # (position, op) of appends that took effect
    for op in appends:
        pos = position.get(op.value)
        if op.outcome is Outcome.OK:
            if pos is None:
                violations.append(f"acknowledged append lost: {op.describe()}")
                continue
            if op.position != pos:
                violations.append(
                    f"append reported position {op.position}, is at {pos}: {op.describe()}"
                )
        elif op.outcome is Outcome.FAIL and pos is not None:
            violations.append(f"failed append took effect at {pos}: {op.describe()}")
        if pos is not None:
            placed.append((pos, op))

    # append vs append: a.done < b.invoked => pos(a) < pos(b).
    placed.sort(key=lambda item: item[0])
    suffix_done = [_INF] * (len(placed) + 1)
    suffix_op: list[Operation | None] = [None] * (len(placed) + 1)
    for i in range(len(placed) - 1, -1, -1):
        done = _done(placed[i][1])
        if done < suffix_done[i + 1]:
            suffix_done[i], suffix_op[i] = done, placed[i][1]
        else:
            suffix_done[i], suffix_op[i] = suffix_done[i + 1], suffix_op[i + 1]
    for i, (_pos, op) in enumerate(placed):
        if suffix_done[i + 1] < op.invoked_at:
            later = suffix_op[i + 1]
            assert later is not None
            violations.append(
                f"real-time order broken: {later.describe()} completed before "
                f"{op.describe()} was invoked but sits after it in the queue"
            )

    # read contents: the queue prefix of the length seen ends with the value seen.
    for r in reads:
        length, last = r.read_length, r.read_last
        expected = final_queue[length - 1] if 0 < length <= len(final_queue) else 0
        if length > len(final_queue) or last != expected:
            violations.append(
                f"read saw a state never committed (queue has {len(final_queue)}, "
                f"value at {length} is {expected}): {r.describe()}"
            )

    # append vs read: done(a) < r.invoked => pos(a) <= L; a.invoked > r.done => pos(a) > L.
    by_done = sorted(placed, key=lambda item: _done(item[1]))
    done_keys = [_done(op) for _pos, op in by_done]
    prefix_max: list[tuple[int, Operation | None]] = []
    best: tuple[int, Operation | None] = (0, None)
    for pos, op in by_done:
        if pos > best[0]:
            best = (pos, op)
        prefix_max.append(best)
    by_invoked = sorted(placed, key=lambda item: item[1].invoked_at)
    invoked_keys = [op.invoked_at for _pos, op in by_invoked]
    suffix_min: list[tuple[float, Operation | None]] = [(_INF, None)] * (len(by_invoked) + 1)
    for i in range(len(by_invoked) - 1, -1, -1):
        pos, op = by_invoked[i]
        suffix_min[i] = (pos, op) if pos < suffix_min[i + 1][0] else suffix_min[i + 1]
    for r in reads:
        assert r.completed_at is not None
        k = bisect.bisect_left(done_keys, r.invoked_at)
        if k:
            pos_max, op_max = prefix_max[k - 1]
            if pos_max > r.read_length and op_max is not None:
                violations.append(f"stale read: {r.describe()} misses earlier {op_max.describe()}")
        k = bisect.bisect_right(invoked_keys, r.completed_at)
        pos_min, op_min = suffix_min[k]
        if pos_min <= r.read_length and op_min is not None:
            violations.append(
                f"read from the future: {r.describe()} sees later {op_min.describe()}"
            )

    # read vs read: r1.done < r2.invoked => L1 <= L2.
    reads_by_done = sorted(reads, key=_done)
    read_done_keys = [_done(r) for r in reads_by_done]
    best_read: tuple[int, Operation | None] = (-1, None)
    read_prefix: list[tuple[int, Operation | None]] = []
    for r in reads_by_done:
        if r.read_length > best_read[0]:
            best_read = (r.read_length, r)
        read_prefix.append(best_read)
    for r in reads:
        k = bisect.bisect_left(read_done_keys, r.invoked_at)
        if k:
            length_max, earlier = read_prefix[k - 1]
            if length_max > r.read_length and earlier is not None:
                violations.append(f"reads went backwards: {earlier.describe()} then {r.describe()}")
    return violations


def check_register(ops: Sequence[Operation], budget_steps: int = 200_000) -> bool | None:
    """Wing & Gong search over the register view; True/False, or None past the budget.

    Appends write their value; reads return ``read_last``. Failed appends and
    reads without a result are left out; unknown appends may be linearized
    anywhere after their invocation or not at all.
    """
    kept = [
        op
        for op in ops
        if (op.kind is OpKind.APPEND and op.outcome in (Outcome.OK, Outcome.UNKNOWN))
        or (op.kind is OpKind.READ and op.outcome is Outcome.OK)
    ]
    n = len(kept)
    if n == 0:
        return True
    # Events: (time, is_return, op index). Calls sort before returns at equal times,
    # which is correct because history times are strictly increasing step stamps.
    events: list[tuple[float, int, int]] = []
    for i, op in enumerate(kept):
        events.append((op.invoked_at, 0, i))
        events.append((_done(op), 1, i))
    events.sort()
    # A doubly linked list over event slots 1..2n with a head sentinel at 0.
    size = len(events) + 1
    nxt = list(range(1, size + 1))
    prv = list(range(-1, size - 1))
    nxt[size - 1] = -1
    call_slot = [0] * n
    return_slot = [0] * n
    for slot, (_t, is_return, i) in enumerate(events, start=1):
        if is_return:
            return_slot[i] = slot
        else:
            call_slot[i] = slot
    slot_op = [0] * size
    slot_is_return = [False] * size
    for slot, (_t, is_return, i) in enumerate(events, start=1):
        slot_op[slot] = i
        slot_is_return[slot] = bool(is_return)

    def unlink(slot: int) -> None:
        nxt[prv[slot]] = nxt[slot]
        if nxt[slot] != -1:
            prv[nxt[slot]] = prv[slot]

    def relink(slot: int) -> None:
        nxt[prv[slot]] = slot
        if nxt[slot] != -1:
            prv[nxt[slot]] = slot

    must_linearize = sum(1 for op in kept if op.completed_at is not None)
    is_write = [op.kind is OpKind.APPEND for op in kept]
    finite = [op.completed_at is not None for op in kept]
    state = 0
    linearized = 0
    linearized_finite = 0
    cache: set[tuple[int, int]] = set()
    stack: list[tuple[int, int]] = []  # (call slot, state before)
    entry = nxt[0]
    steps = 0
    while linearized_finite < must_linearize:
        steps += 1
        if steps > budget_steps:
            return None
        if entry == -1 or slot_is_return[entry]:
            # An operation returned before being linearized (or the list ran out): backtrack.
            if not stack:
                return False
            slot, state = stack.pop()
            i = slot_op[slot]
            linearized &= ~(1 << i)
            if finite[i]:
                linearized_finite -= 1
            relink(return_slot[i])
            relink(slot)
            entry = nxt[slot]
            continue
        i = slot_op[entry]
        op = kept[i]
        if is_write[i]:
            ok, new_state = True, op.value
        else:
            ok, new_state = state == op.read_last, state
        if ok:
            key = (linearized | (1 << i), new_state)
            if key not in cache:
                cache.add(key)
                stack.append((entry, state))
                state = new_state
                linearized |= 1 << i
                if finite[i]:
                    linearized_finite += 1
                unlink(entry)
                unlink(return_slot[i])
                entry = nxt[0]
                continue
        entry = nxt[entry]
    return True
