"""The Raft layer over the metadata log: who leads which epoch, and what is committed.

Today kraftsim is a single-voter quorum: ``election.py`` makes this node the leader of a new
epoch at start-up, and ``leader.py`` commits an offset once it is flushed to this node's disk.
Serving the log to observers (Fetch, FetchSnapshot) and more voters grow here.
"""
