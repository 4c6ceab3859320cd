"""Kafka's config definitions as data: topic configs (LogConfig) and a node's configs
(KafkaConfig), with their types, defaults, validators and synonyms. Read by the controller, the
simulated brokers and the migration alike.
"""
