"""The ports the broker depends on (base.py) and their in-memory implementations."""
