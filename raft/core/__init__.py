"""The Raft layer of a KRaft quorum of any size, as a sans-I/O state machine: Kafka 3.9's
KafkaRaftClient (KIP-595) without threads, sockets or clocks, so that one core serves a real
network driver and the deterministic simulator (``kraftsim.raft.sim``) alike; with
``pre_vote``, Kafka 4.0's election (KIP-996).

The pieces, each in its own module:

- ``node.py``: :class:`~kraftsim.raft.core.node.RaftNode`, the driver's entry point (requests and
  responses in, requests and responses out, ``poll(now)``, appends, resignation, shutdown).
- ``quorum.py``, ``states.py``, ``leader_state.py``: the epoch states and the only transitions
  between them, durable ones written to the quorum-state store first.
- ``election_rpcs.py`` (Vote, BeginQuorumEpoch, EndQuorumEpoch), ``fetch_rpcs.py`` (Fetch,
  FetchSnapshot, DescribeQuorum), ``common.py`` (what every answer teaches), ``polling.py`` (what
  each state does on its timers), ``purgatory.py`` (parked fetches), ``requests.py`` (one request
  in flight per peer), ``rpcs.py`` (the messages, in the project's generated protocol classes).
- ``log.py`` and ``state_store.py``: the storage protocols, with in-memory implementations
  (``memory_log.py``, ``MemoryQuorumStateStore``) and Kafka's ``quorum-state`` file.

Where dynamic voters are, pre-vote, and Fetch v18:

- KIP-853 (dynamic voters): the voter set carries directory ids, endpoints and kraft.version
  ranges (``voters.py``), replicas are named by :class:`~kraftsim.raft.core.keys.ReplicaKey` with
  their directory, the store writes ``quorum-state`` v1 when kraft.version is 1, and LeaderState
  keeps voters and observers apart by key. ``voter_history.py`` is the one answer to "which voter
  set and kraft.version at this offset": seeded by the driver from the log at start-up
  (``kraftsim.raft.dynamic_voters.read_history``), then fed with the VotersRecord and
  KRaftVersionRecord control records as they are appended, fetched, truncated and snapshotted.
  Majorities use its latest set; a new leader's start-of-epoch records (``node.py``)
  and a snapshot's control records use it too. ``reconfig_rpcs.py`` handles AddRaftVoter,
  RemoveRaftVoter and UpdateRaftVoter, one change in flight at a time.
- KIP-996 (pre-vote, Kafka 4.0): a node built with ``pre_vote`` (a release serving Vote v2, 4.0
  and later) elects as Kafka 4.0's KafkaRaftClient does. Where a timer would make a Kafka 3.9
  voter stand, ``node.stand`` moves it to :class:`~kraftsim.raft.core.states.ProspectiveState`
  instead (in memory only, same epoch, keeping the leader and vote it knew), which sends Vote
  with PreVote (``polling.send_vote_requests``) and becomes a candidate once a majority grants
  it; refused by a majority or out of time it goes back to its leader or to Unattached in its
  epoch, and a voter answering UNSUPPORTED_VERSION (Kafka 3.9: the network cannot encode a
  pre-vote below Vote v2) makes it stand at once (``election_rpcs.handle_vote_response``). The
  transitions that differ from 3.9's are in ``quorum.py``: a vote is kept through moves within
  its epoch (so ``quorum-state`` names leader and vote together), a candidate out of time asks
  again, a resigned leader moves on to the next epoch. ``candidate_backoff`` off (Kafka 4.1)
  drops the refused candidate's backoff. ``handle_vote_request`` answers a pre-vote as Kafka
  4.0's voter does: granted to any log at least as up to date, whatever vote was cast in the
  epoch, with nothing persisted; by a follower only until its leader has answered a fetch;
  never by a leader.
- KIP-1166 (Fetch v18, Kafka 4.1): a follower's Fetch carries its high watermark
  (``polling.build_fetch``); a leader answers a v18 fetch whose high watermark is behind its own
  at once, and a parked one when its high watermark moves (``fetch_rpcs``, ``purgatory.py``).
"""
