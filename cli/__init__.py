"""The ``kraftsim`` console script (``main.py``) and the sub-commands that mirror Kafka's tools:
``storage.py`` (format), ``features.py``, ``metadata_quorum.py``, and the container image's
entrypoint (``container.py``). The simulated brokers, the migration and Spark keep their own
``cli.py`` beside their code; every one shares ``common.py``.
"""
