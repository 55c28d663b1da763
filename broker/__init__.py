"""Broker: stateless compute that serves the official RocketMQ 5 clients."""
