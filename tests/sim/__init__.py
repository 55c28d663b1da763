"""Seeded, deterministic whole-cluster simulation of the raft core (VOPR style)."""
