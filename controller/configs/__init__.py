"""This node's configuration: ``server.properties`` as kraftsim reads it (``server_config.py``),
the broker config Kafka's DynamicBrokerConfig would show for this node, its runtime loggers, and
the controller's checks of topic configs. Kafka's config definitions themselves are data in
``metadata/config_defs/``.
"""
