"""The partition (queue group) state machine: pure, applied from a raft group's log.

Modules: ``commands`` (what the log holds; ``encode``/``decode``), ``state``
(``PartitionState.apply_entry``/``apply``), ``queries`` (what it holds and
the read queries), ``config`` (``PartitionConfig``), ``results``
(what apply returns), ``snapshot`` (``take_snapshot``/``restore``), ``reads``
(``record_at``: a queue entry's message from its log entry's bytes); inside:
``queues`` (queue index, dedup window), ``pop`` (leases, invisibility, FIFO),
``transactions``, ``timers``, ``chunks`` (the snapshot encoding kept by chunk).

What the host (the storage node's group driver) must do:

1. Propose commands with ``now_ms`` set to the leader's clock; nothing else
   brings time in.
2. Apply every committed NORMAL entry, in log order, once:
   ``state.apply_entry(entry.data, entry.index)`` (an empty no-op entry is
   fine). A ``StorageError`` it raises is the proposer's answer (every replica
   raises alike); the state stays consistent and the next entry follows.
3. After each apply, wake long-polling receivers of ``state.grown_queues``.
4. On the leader, propose ``Tick(now)`` once ``state.next_timer_due_ms()`` has
   passed (any other command releases due timers too).
5. Snapshot with ``take_snapshot(state)`` at ``state.applied_index``; a new or
   restarted replica uses ``restore(data)``, then applies later entries.
6. Read bodies from the log: a ``QueueEntry`` (from a receive or a read) names
   ``(log_index, position)``; ``reads.record_at(log_entry_bytes, entry, queue)``.
7. Truncate the log only below ``state.min_log_index_referenced()`` (and
   below the latest snapshot); ``TrimQueue`` is how retention frees entries.
8. Route ``%DLQ%<group>`` queue ``i`` to raft group ``i``: dead letters are
   appended to ``(%DLQ%<group>, config.group_id)`` of the group that held the
   message.
9. Transaction check-back (the broker holding the check lease): scan
   ``state.half_messages_due(...)``, ask producers, propose
   ``NoteTransactionChecks``; producers answer with ``EndTransaction``.

PURE (the whole package).
"""
