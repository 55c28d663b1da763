"""Locust users and the benchmark harness; clients of the public protocol only."""
