"""A deterministic simulator for the Raft layer (``kraftsim.raft.core``): voters and observers on
virtual time, a network that loses, delays, duplicates and reorders messages and can be
partitioned, nodes that crash (losing unflushed writes) and restart, leaders killed or shut down
gracefully, and clients appending records, with Raft's safety invariants checked after every
step (``invariants.py``). Everything random comes from generators seeded by one seed, so a seed
replays its run exactly; ``kraftsim simulate`` is the command line (``cli.py``).
"""
