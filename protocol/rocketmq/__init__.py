"""The RocketMQ client protocols rip5 speaks."""
