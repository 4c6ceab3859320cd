"""The Raft layer over the metadata log: who leads which epoch, and what is committed.

kraftsim is a single-voter quorum: ``election.py`` makes this node the leader of a new epoch at
start-up, ``leader.py`` commits an offset once it is flushed to this node's disk, and ``apis.py``
answers the Raft RPCs (Fetch, FetchSnapshot, DescribeQuorum, Vote, ...). With more voters,
``leader.py``'s commit rule is what would change.
"""
