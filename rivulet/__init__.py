"""Rivulet: a Kafka-protocol event-streaming broker in Python."""
