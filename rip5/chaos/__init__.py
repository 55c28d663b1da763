"""``rip5 chaos``: an OpenChaos-style fault suite run against a cluster of real processes.

The pure parts take values and give values: :mod:`rip5.chaos.history` (what
the clients did and saw), :mod:`rip5.chaos.checkers` (what a history proves:
lost, duplicated, out of order, ...) and :mod:`rip5.chaos.schedule` (which
fault hits which process when, from a seed). The shells run them:
:mod:`rip5.chaos.cluster` (processes and fault proxies),
:mod:`rip5.chaos.faults` (the injectors), :mod:`rip5.chaos.workload`
(producers and consumers over gRPC v2), :mod:`rip5.chaos.report` and
:mod:`rip5.chaos.run` (the command).
"""
