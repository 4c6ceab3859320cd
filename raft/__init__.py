"""The Raft layer over the metadata log: who leads which epoch, and what is committed.

``core/`` is Kafka 3.9's KafkaRaftClient as a sans-I/O state machine (elections, replication,
the high watermark, snapshots fetched by followers), for a static quorum of any size.
``client.py`` runs it on the event loop (``network.py``: its connections to the other voters;
``disk_log.py``: the metadata log on disk as its log; ``apis.py``: the Raft RPCs it serves). The
controller (``controller/quorum_controller.py``) follows what it reports. ``sim/`` runs the same
core on virtual time, with faults (``kraftsim simulate``).
"""
