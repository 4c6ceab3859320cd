"""Java HashMap iteration order, which Kafka's CreateTopics follows when writing ConfigRecords."""

from kraftsim.controller.java.hash_order import hash_map_order, string_hash


def test_string_hash_matches_java() -> None:
    # Values of String.hashCode() as Java 17 prints them.
    assert string_hash("") == 0
    assert string_hash("hello") == 99162322
    assert string_hash("polygenelubricants") == -2147483648
    assert string_hash("retention.ms") == -1339220362
    assert string_hash("\U0001F600") == 1772899  # a surrogate pair counts as two UTF-16 units


def test_order_is_by_bucket_then_insertion() -> None:
    # "a" (97) and "q" (113) share bucket 1 of 16; "b" (98) is in bucket 2.
    assert hash_map_order(["b", "q", "a"]) == ["q", "a", "b"]
    assert hash_map_order(["a", "q", "b", "a"]) == ["a", "q", "b"]  # a repeated key keeps its first place


def test_the_table_grows_past_twelve_keys() -> None:
    # 13 keys resize the table to 32 buckets: "a" (97 -> 1) and "q" (113 -> 17) no longer share one.
    keys = ["q", "a", *(f"k{i}" for i in range(11))]
    order = hash_map_order(keys)
    assert order.index("a") < order.index("q")
    assert hash_map_order(keys[:12]).index("q") < hash_map_order(keys[:12]).index("a")
    # java.util.HashMap filled with q, a, k0..k10 prints [a, k0, k1, k2, k3, k4, k5, k6, k10, k7, k8, k9, q].
    assert order == ["a", "k0", "k1", "k2", "k3", "k4", "k5", "k6", "k10", "k7", "k8", "k9", "q"]


def test_presized_maps_keep_their_small_tables() -> None:
    from kraftsim.controller.java.hash_order import hashmap_capacity, order_by_hash

    types = ["user", "client-id", "ip"]
    # Java 17: a new HashMap<>(3) of these prints [client-id, user, ip]; a new HashMap<>() [ip, client-id, user].
    assert hashmap_capacity(3, initial=3) == 4 and hashmap_capacity(3) == 16
    assert order_by_hash(types, string_hash, hashmap_capacity(3, initial=3)) == ["client-id", "user", "ip"]
    assert order_by_hash(types, string_hash, hashmap_capacity(3)) == ["ip", "client-id", "user"]
    # new HashMap<>(1) grows to 2 buckets at its first entry and 4 at its second; (0) likewise.
    assert [hashmap_capacity(n, initial=1) for n in (1, 2, 3, 4)] == [2, 4, 4, 8]
    assert hashmap_capacity(13) == 32 and hashmap_capacity(12) == 16


def test_string_map_hash_is_javas_map_hash_code() -> None:
    from kraftsim.controller.java.hash_order import string_map_hash

    # Objects.hash(Map.of("user", "alice", "client-id" -> null)) is -1807702073 in Java 17: 31 + the map's hash.
    assert 31 + string_map_hash([("user", "alice"), ("client-id", None)]) == -1807702073
    assert string_map_hash([]) == 0


def test_scala_hash_map_order_is_kafkas_describe_configs_order() -> None:
    from kraftsim.controller.java.hash_order import scala_hash_map_order, scala_table_size
    from kraftsim.metadata.config_defs.topic import TOPIC_CONFIGS

    # The order a Kafka 3.9.2 controller listed a topic's 36 configs in (DescribeConfigs), and the
    # order of two of them asked for by name.
    kafka = ["compression.type", "remote.log.delete.on.disable", "leader.replication.throttled.replicas",
             "remote.storage.enable", "message.downconversion.enable", "min.insync.replicas", "segment.jitter.ms",
             "remote.log.copy.disable", "local.retention.ms", "cleanup.policy", "flush.ms",
             "follower.replication.throttled.replicas", "compression.lz4.level", "segment.bytes", "retention.ms",
             "compression.gzip.level", "flush.messages", "compression.zstd.level", "message.format.version",
             "max.compaction.lag.ms", "file.delete.delay.ms", "max.message.bytes", "min.compaction.lag.ms",
             "message.timestamp.type", "local.retention.bytes", "preallocate", "min.cleanable.dirty.ratio",
             "index.interval.bytes", "unclean.leader.election.enable", "retention.bytes", "delete.retention.ms",
             "message.timestamp.after.max.ms", "message.timestamp.before.max.ms", "segment.ms",
             "message.timestamp.difference.max.ms", "segment.index.bytes"]
    assert scala_hash_map_order(sorted(TOPIC_CONFIGS)) == kafka
    assert scala_hash_map_order(["retention.ms", "cleanup.policy"]) == ["cleanup.policy", "retention.ms"]
    # 16 buckets, doubled before the insertion that would reach three quarters (12 of 16).
    assert [scala_table_size(n) for n in (0, 11, 12, 23, 24, 36, 315)] == [16, 16, 32, 32, 64, 64, 512]
