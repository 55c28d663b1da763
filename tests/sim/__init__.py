"""Seeded, deterministic whole-cluster simulation of the raft core (VOPR style).

Run it::

    make test                       # seeds 0..199 with the rest of the suite
    make sim SEEDS=10000            # seeds 0..9999 (only the simulation)
    RIP5_SIM_SEED=1234 .venv/bin/python -m pytest tests/sim -k replay
                                    # replay one seed; RIP5_SIM_TRACE=N shows N events

Modules: ``events`` (simulated clock and event queue), ``network`` (seeded
drop / delay / duplicate / reorder / partitions), ``disk`` (fsync, crash,
torn writes, recovery), ``replica`` (a node of real RawNodes following the
Ready contract, with a queue state machine), ``cluster`` (clients, faults,
the two-phase run), ``checkers`` (Raft safety invariants, incremental),
``linearizability`` (queue and Wing & Gong register checks), ``history``.

A run's behaviour is a function of its seed and the code: a seed that fails
replays exactly on the same commit.
"""
