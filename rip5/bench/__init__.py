"""Benchmarks behind ``rip5 bench <target>``."""
