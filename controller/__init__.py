"""The controller (Kafka's QuorumController and what runs it).

The core is here: ``quorum_controller.py`` (start-up, activation, the write and reply-after-commit
path), ``event_queue.py``, ``write_path.py``, ``controller_apis.py`` (every route run the same
way), ``routes.py``, ``result.py``, ``context.py``, ``envelope.py``, ``audit.py``, ``metrics.py``.
The rooms beside it: ``managers/`` (one control manager per slice of state, each with its
handlers and routes), ``configs/`` (this node's configuration), ``java/`` (where Kafka's answers
depend on Java's own behaviour) and ``process/`` (the controller process: start, signals, HTTP).
"""
