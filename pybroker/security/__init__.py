"""Authorization (Kafka's org.apache.kafka.metadata.authorizer): see authorizer.py."""
