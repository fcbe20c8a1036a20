"""Delayed operations (Kafka's purgatory) on one timing wheel."""
