"""Connector: replicates messages from one rip5 cluster to another."""
