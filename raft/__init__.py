"""The Raft layer over the metadata log: who leads which epoch, and what is committed.

The controller runs as a single-voter quorum: ``election.py`` makes this node the leader of a new
epoch at start-up, ``leader.py`` commits an offset once it is flushed to this node's disk, and
``apis.py`` answers the Raft RPCs (Fetch, FetchSnapshot, DescribeQuorum, Vote, ...).
``core/`` is the Raft layer for a quorum of any size (Kafka 3.9's KafkaRaftClient as a sans-I/O
state machine), which the controller does not run yet; ``sim/`` is its deterministic simulator
(``kraftsim simulate``).
"""
