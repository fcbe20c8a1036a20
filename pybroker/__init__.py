"""pybroker: an Apache Kafka-compatible message broker in Python."""

__version__ = "0.1.0"
