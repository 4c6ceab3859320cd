"""The Raft layer over the metadata log: who leads which epoch, and what is committed.

The controller runs as a single-voter quorum: ``election.py`` makes this node the leader of a new
epoch at start-up, and ``leader.py`` commits an offset once it is flushed to this node's disk.
``core/`` is the Raft layer for a quorum of any size, a sans-I/O state machine the controller
does not run (it runs the single-voter code above); ``sim/`` is its deterministic simulator.
"""
