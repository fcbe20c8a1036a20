"""Request handling (Kafka's KafkaApis), one small module per API family."""
