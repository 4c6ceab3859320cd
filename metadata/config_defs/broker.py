"""KafkaConfig's definitions as a Kafka 3.9 node has them: what DescribeConfigs reports for a BROKER.

Facts of the public broker config reference, as data: each config's name, type, default (as
``ConfigDef.convertToString`` renders it; None: no default), and whether it is internal (never
listed unless set) or dynamically updatable (read_only false; kept when it arrives in a
ConfigRecord). Beside them, the rules DynamicBrokerConfig applies to dynamic configs: their
synonyms (one config spelled in ms/minutes/hours, a listener override and its base name), which
ones may only be set per broker, which security configs only with a listener prefix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = (
    "BOOLEAN", "STRING", "INT", "SHORT", "LONG", "DOUBLE", "LIST", "CLASS", "PASSWORD")
# DescribeConfigsResponse.ConfigType ids; a config of unknown type is UNKNOWN (0).
CONFIG_TYPE_IDS: Final = {BOOLEAN: 1, STRING: 2, INT: 3, SHORT: 4, LONG: 5, DOUBLE: 6, LIST: 7, CLASS: 8,
                          PASSWORD: 9}
UNKNOWN_TYPE: Final = 0

STATIC, DYNAMIC, INTERNAL = "static", "dynamic", "internal"


@dataclass(frozen=True, slots=True)
class BrokerConfigDef:
    name: str
    type: str
    default: str | None
    kind: str  # STATIC, DYNAMIC or INTERNAL

    @property
    def dynamic(self) -> bool:
        return self.kind == DYNAMIC

    @property
    def internal(self) -> bool:
        return self.kind == INTERNAL


_ROWS: Final[tuple[tuple[str, str, str | None, str], ...]] = (
    ("advertised.listeners", STRING, None, DYNAMIC),
    ("alter.config.policy.class.name", CLASS, None, STATIC),
    ("alter.config.policy.kraft.compatibility.enable", BOOLEAN, "false", STATIC),
    ("alter.log.dirs.replication.quota.window.num", INT, "11", STATIC),
    ("alter.log.dirs.replication.quota.window.size.seconds", INT, "1", STATIC),
    ("authorizer.class.name", STRING, "", STATIC),
    ("auto.create.topics.enable", BOOLEAN, "true", STATIC),
    ("auto.include.jmx.reporter", BOOLEAN, "true", STATIC),
    ("auto.leader.rebalance.enable", BOOLEAN, "true", STATIC),
    ("background.threads", INT, "10", DYNAMIC),
    ("broker.heartbeat.interval.ms", INT, "2000", STATIC),
    ("broker.id", INT, "-1", STATIC),
    ("broker.id.generation.enable", BOOLEAN, "true", STATIC),
    ("broker.rack", STRING, None, STATIC),
    ("broker.session.timeout.ms", INT, "9000", STATIC),
    ("client.quota.callback.class", CLASS, None, STATIC),
    ("compression.gzip.level", INT, "-1", DYNAMIC),
    ("compression.lz4.level", INT, "9", DYNAMIC),
    ("compression.type", STRING, "producer", DYNAMIC),
    ("compression.zstd.level", INT, "3", DYNAMIC),
    ("connection.failed.authentication.delay.ms", INT, "100", STATIC),
    ("connections.max.idle.ms", LONG, "600000", STATIC),
    ("connections.max.reauth.ms", LONG, "0", STATIC),
    ("control.plane.listener.name", STRING, None, STATIC),
    ("controlled.shutdown.enable", BOOLEAN, "true", STATIC),
    ("controlled.shutdown.max.retries", INT, "3", STATIC),
    ("controlled.shutdown.retry.backoff.ms", LONG, "5000", STATIC),
    ("controller.listener.names", STRING, None, STATIC),
    ("controller.quorum.append.linger.ms", INT, "25", STATIC),
    ("controller.quorum.bootstrap.servers", LIST, "", STATIC),
    ("controller.quorum.election.backoff.max.ms", INT, "1000", STATIC),
    ("controller.quorum.election.timeout.ms", INT, "1000", STATIC),
    ("controller.quorum.fetch.timeout.ms", INT, "2000", STATIC),
    ("controller.quorum.request.timeout.ms", INT, "2000", STATIC),
    ("controller.quorum.retry.backoff.ms", INT, "20", STATIC),
    ("controller.quorum.voters", LIST, "", STATIC),
    ("controller.quota.window.num", INT, "11", STATIC),
    ("controller.quota.window.size.seconds", INT, "1", STATIC),
    ("controller.socket.timeout.ms", INT, "30000", STATIC),
    ("create.topic.policy.class.name", CLASS, None, STATIC),
    ("default.replication.factor", INT, "1", STATIC),
    ("delegation.token.expiry.check.interval.ms", LONG, "3600000", STATIC),
    ("delegation.token.expiry.time.ms", LONG, "86400000", STATIC),
    ("delegation.token.master.key", PASSWORD, None, STATIC),
    ("delegation.token.max.lifetime.ms", LONG, "604800000", STATIC),
    ("delegation.token.secret.key", PASSWORD, None, STATIC),
    ("delete.records.purgatory.purge.interval.requests", INT, "1", STATIC),
    ("delete.topic.enable", BOOLEAN, "true", STATIC),
    ("early.start.listeners", STRING, None, STATIC),
    ("eligible.leader.replicas.enable", BOOLEAN, "false", STATIC),
    ("fetch.max.bytes", INT, "57671680", STATIC),
    ("fetch.purgatory.purge.interval.requests", INT, "1000", STATIC),
    ("group.consumer.assignors", LIST, "org.apache.kafka.coordinator.group.assignor.UniformAssignor,org.apache.kafka.coordinator.group.assignor.RangeAssignor", STATIC),
    ("group.consumer.heartbeat.interval.ms", INT, "5000", STATIC),
    ("group.consumer.max.heartbeat.interval.ms", INT, "15000", STATIC),
    ("group.consumer.max.session.timeout.ms", INT, "60000", STATIC),
    ("group.consumer.max.size", INT, "2147483647", STATIC),
    ("group.consumer.migration.policy", STRING, "disabled", INTERNAL),
    ("group.consumer.min.heartbeat.interval.ms", INT, "5000", STATIC),
    ("group.consumer.min.session.timeout.ms", INT, "45000", STATIC),
    ("group.consumer.session.timeout.ms", INT, "45000", STATIC),
    ("group.coordinator.append.linger.ms", INT, "10", STATIC),
    ("group.coordinator.new.enable", BOOLEAN, "false", INTERNAL),
    ("group.coordinator.rebalance.protocols", LIST, "classic", STATIC),
    ("group.coordinator.threads", INT, "1", STATIC),
    ("group.initial.rebalance.delay.ms", INT, "3000", STATIC),
    ("group.max.session.timeout.ms", INT, "1800000", STATIC),
    ("group.max.size", INT, "2147483647", STATIC),
    ("group.min.session.timeout.ms", INT, "6000", STATIC),
    ("group.share.delivery.count.limit", INT, "5", STATIC),
    ("group.share.enable", BOOLEAN, "false", INTERNAL),
    ("group.share.heartbeat.interval.ms", INT, "5000", STATIC),
    ("group.share.max.groups", SHORT, "10", STATIC),
    ("group.share.max.heartbeat.interval.ms", INT, "15000", STATIC),
    ("group.share.max.record.lock.duration.ms", INT, "60000", STATIC),
    ("group.share.max.session.timeout.ms", INT, "60000", STATIC),
    ("group.share.max.size", SHORT, "200", STATIC),
    ("group.share.min.heartbeat.interval.ms", INT, "5000", STATIC),
    ("group.share.min.record.lock.duration.ms", INT, "15000", STATIC),
    ("group.share.min.session.timeout.ms", INT, "45000", STATIC),
    ("group.share.partition.max.record.locks", INT, "200", STATIC),
    ("group.share.record.lock.duration.ms", INT, "30000", STATIC),
    ("group.share.session.timeout.ms", INT, "45000", STATIC),
    ("initial.broker.registration.timeout.ms", INT, "60000", STATIC),
    ("inter.broker.listener.name", STRING, None, STATIC),
    ("inter.broker.protocol.version", STRING, "3.9-IV0", STATIC),
    ("kafka.metrics.polling.interval.secs", INT, "10", STATIC),
    ("kafka.metrics.reporters", LIST, "", STATIC),
    ("leader.imbalance.check.interval.seconds", LONG, "300", STATIC),
    ("leader.imbalance.per.broker.percentage", INT, "10", STATIC),
    ("listener.security.protocol.map", STRING, "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT", DYNAMIC),
    ("listeners", STRING, "PLAINTEXT://:9092", DYNAMIC),
    ("log.cleaner.backoff.ms", LONG, "15000", DYNAMIC),
    ("log.cleaner.dedupe.buffer.size", LONG, "134217728", DYNAMIC),
    ("log.cleaner.delete.retention.ms", LONG, "86400000", DYNAMIC),
    ("log.cleaner.enable", BOOLEAN, "true", STATIC),
    ("log.cleaner.io.buffer.load.factor", DOUBLE, "0.9", DYNAMIC),
    ("log.cleaner.io.buffer.size", INT, "524288", DYNAMIC),
    ("log.cleaner.io.max.bytes.per.second", DOUBLE, "1.7976931348623157E308", DYNAMIC),
    ("log.cleaner.max.compaction.lag.ms", LONG, "9223372036854775807", DYNAMIC),
    ("log.cleaner.min.cleanable.ratio", DOUBLE, "0.5", DYNAMIC),
    ("log.cleaner.min.compaction.lag.ms", LONG, "0", DYNAMIC),
    ("log.cleaner.threads", INT, "1", DYNAMIC),
    ("log.cleanup.policy", LIST, "delete", DYNAMIC),
    ("log.dir", STRING, "/tmp/kafka-logs", STATIC),
    ("log.dir.failure.timeout.ms", LONG, "30000", STATIC),
    ("log.dirs", STRING, None, STATIC),
    ("log.flush.interval.messages", LONG, "9223372036854775807", DYNAMIC),
    ("log.flush.interval.ms", LONG, None, DYNAMIC),
    ("log.flush.offset.checkpoint.interval.ms", INT, "60000", STATIC),
    ("log.flush.scheduler.interval.ms", LONG, "9223372036854775807", STATIC),
    ("log.flush.start.offset.checkpoint.interval.ms", INT, "60000", STATIC),
    ("log.index.interval.bytes", INT, "4096", DYNAMIC),
    ("log.index.size.max.bytes", INT, "10485760", DYNAMIC),
    ("log.initial.task.delay.ms", LONG, "30000", INTERNAL),
    ("log.local.retention.bytes", LONG, "-2", DYNAMIC),
    ("log.local.retention.ms", LONG, "-2", DYNAMIC),
    ("log.message.downconversion.enable", BOOLEAN, "true", DYNAMIC),
    ("log.message.format.version", STRING, "3.0-IV1", STATIC),
    ("log.message.timestamp.after.max.ms", LONG, "9223372036854775807", DYNAMIC),
    ("log.message.timestamp.before.max.ms", LONG, "9223372036854775807", DYNAMIC),
    ("log.message.timestamp.difference.max.ms", LONG, "9223372036854775807", DYNAMIC),
    ("log.message.timestamp.type", STRING, "CreateTime", DYNAMIC),
    ("log.preallocate", BOOLEAN, "false", DYNAMIC),
    ("log.retention.bytes", LONG, "-1", DYNAMIC),
    ("log.retention.check.interval.ms", LONG, "300000", STATIC),
    ("log.retention.hours", INT, "168", STATIC),
    ("log.retention.minutes", INT, None, STATIC),
    ("log.retention.ms", LONG, None, DYNAMIC),
    ("log.roll.hours", INT, "168", STATIC),
    ("log.roll.jitter.hours", INT, "0", STATIC),
    ("log.roll.jitter.ms", LONG, None, DYNAMIC),
    ("log.roll.ms", LONG, None, DYNAMIC),
    ("log.segment.bytes", INT, "1073741824", DYNAMIC),
    ("log.segment.delete.delay.ms", LONG, "60000", DYNAMIC),
    ("max.connection.creation.rate", INT, "2147483647", DYNAMIC),
    ("max.connections", INT, "2147483647", DYNAMIC),
    ("max.connections.per.ip", INT, "2147483647", DYNAMIC),
    ("max.connections.per.ip.overrides", STRING, "", DYNAMIC),
    ("max.incremental.fetch.session.cache.slots", INT, "1000", STATIC),
    ("max.request.partition.size.limit", INT, "2000", STATIC),
    ("message.max.bytes", INT, "1048588", DYNAMIC),
    ("metadata.log.dir", STRING, None, STATIC),
    ("metadata.log.max.record.bytes.between.snapshots", LONG, "20971520", STATIC),
    ("metadata.log.max.snapshot.interval.ms", LONG, "3600000", STATIC),
    ("metadata.log.segment.bytes", INT, "1073741824", STATIC),
    ("metadata.log.segment.min.bytes", INT, "8388608", INTERNAL),
    ("metadata.log.segment.ms", LONG, "604800000", STATIC),
    ("metadata.max.idle.interval.ms", INT, "500", STATIC),
    ("metadata.max.retention.bytes", LONG, "104857600", STATIC),
    ("metadata.max.retention.ms", LONG, "604800000", STATIC),
    ("metric.reporters", LIST, "", DYNAMIC),
    ("metrics.num.samples", INT, "2", STATIC),
    ("metrics.recording.level", STRING, "INFO", STATIC),
    ("metrics.sample.window.ms", LONG, "30000", STATIC),
    ("min.insync.replicas", INT, "1", DYNAMIC),
    ("node.id", INT, "-1", STATIC),
    ("num.io.threads", INT, "8", DYNAMIC),
    ("num.network.threads", INT, "3", DYNAMIC),
    ("num.partitions", INT, "1", STATIC),
    ("num.recovery.threads.per.data.dir", INT, "1", DYNAMIC),
    ("num.replica.alter.log.dirs.threads", INT, None, STATIC),
    ("num.replica.fetchers", INT, "1", DYNAMIC),
    ("offset.metadata.max.bytes", INT, "4096", STATIC),
    ("offsets.commit.required.acks", SHORT, "-1", STATIC),
    ("offsets.commit.timeout.ms", INT, "5000", STATIC),
    ("offsets.load.buffer.size", INT, "5242880", STATIC),
    ("offsets.retention.check.interval.ms", LONG, "600000", STATIC),
    ("offsets.retention.minutes", INT, "10080", STATIC),
    ("offsets.topic.compression.codec", INT, "0", STATIC),
    ("offsets.topic.num.partitions", INT, "50", STATIC),
    ("offsets.topic.replication.factor", SHORT, "3", STATIC),
    ("offsets.topic.segment.bytes", INT, "104857600", STATIC),
    ("password.encoder.cipher.algorithm", STRING, "AES/CBC/PKCS5Padding", STATIC),
    ("password.encoder.iterations", INT, "4096", STATIC),
    ("password.encoder.key.length", INT, "128", STATIC),
    ("password.encoder.keyfactory.algorithm", STRING, None, STATIC),
    ("password.encoder.old.secret", PASSWORD, None, STATIC),
    ("password.encoder.secret", PASSWORD, None, STATIC),
    ("principal.builder.class", CLASS, "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder", DYNAMIC),
    ("process.roles", LIST, "", STATIC),
    ("producer.id.expiration.check.interval.ms", INT, "600000", INTERNAL),
    ("producer.id.expiration.ms", INT, "86400000", DYNAMIC),
    ("producer.purgatory.purge.interval.requests", INT, "1000", STATIC),
    ("queued.max.request.bytes", LONG, "-1", STATIC),
    ("queued.max.requests", INT, "500", STATIC),
    ("quota.window.num", INT, "11", STATIC),
    ("quota.window.size.seconds", INT, "1", STATIC),
    ("remote.fetch.max.wait.ms", INT, "500", DYNAMIC),
    ("remote.log.index.file.cache.total.size.bytes", LONG, "1073741824", DYNAMIC),
    ("remote.log.manager.copier.thread.pool.size", INT, "-1", STATIC),
    ("remote.log.manager.copy.max.bytes.per.second", LONG, "9223372036854775807", DYNAMIC),
    ("remote.log.manager.copy.quota.window.num", INT, "11", STATIC),
    ("remote.log.manager.copy.quota.window.size.seconds", INT, "1", STATIC),
    ("remote.log.manager.expiration.thread.pool.size", INT, "-1", STATIC),
    ("remote.log.manager.fetch.max.bytes.per.second", LONG, "9223372036854775807", DYNAMIC),
    ("remote.log.manager.fetch.quota.window.num", INT, "11", STATIC),
    ("remote.log.manager.fetch.quota.window.size.seconds", INT, "1", STATIC),
    ("remote.log.manager.task.interval.ms", LONG, "30000", STATIC),
    ("remote.log.manager.task.retry.backoff.max.ms", LONG, "30000", INTERNAL),
    ("remote.log.manager.task.retry.backoff.ms", LONG, "500", INTERNAL),
    ("remote.log.manager.task.retry.jitter", DOUBLE, "0.2", INTERNAL),
    ("remote.log.manager.thread.pool.size", INT, "10", STATIC),
    ("remote.log.metadata.custom.metadata.max.bytes", INT, "128", STATIC),
    ("remote.log.metadata.manager.class.name", STRING, "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager", STATIC),
    ("remote.log.metadata.manager.class.path", STRING, None, STATIC),
    ("remote.log.metadata.manager.impl.prefix", STRING, "rlmm.config.", STATIC),
    ("remote.log.metadata.manager.listener.name", STRING, None, STATIC),
    ("remote.log.reader.max.pending.tasks", INT, "100", STATIC),
    ("remote.log.reader.threads", INT, "10", STATIC),
    ("remote.log.storage.manager.class.name", STRING, None, STATIC),
    ("remote.log.storage.manager.class.path", STRING, None, STATIC),
    ("remote.log.storage.manager.impl.prefix", STRING, "rsm.config.", STATIC),
    ("remote.log.storage.system.enable", BOOLEAN, "false", STATIC),
    ("replica.fetch.backoff.ms", INT, "1000", STATIC),
    ("replica.fetch.max.bytes", INT, "1048576", STATIC),
    ("replica.fetch.min.bytes", INT, "1", STATIC),
    ("replica.fetch.response.max.bytes", INT, "10485760", STATIC),
    ("replica.fetch.wait.max.ms", INT, "500", STATIC),
    ("replica.high.watermark.checkpoint.interval.ms", LONG, "5000", STATIC),
    ("replica.lag.time.max.ms", LONG, "30000", STATIC),
    ("replica.selector.class", STRING, None, STATIC),
    ("replica.socket.receive.buffer.bytes", INT, "65536", STATIC),
    ("replica.socket.timeout.ms", INT, "30000", STATIC),
    ("replication.quota.window.num", INT, "11", STATIC),
    ("replication.quota.window.size.seconds", INT, "1", STATIC),
    ("request.timeout.ms", INT, "30000", STATIC),
    ("reserved.broker.max.id", INT, "1000", STATIC),
    ("sasl.client.callback.handler.class", CLASS, None, STATIC),
    ("sasl.enabled.mechanisms", LIST, "GSSAPI", DYNAMIC),
    ("sasl.jaas.config", PASSWORD, None, DYNAMIC),
    ("sasl.kerberos.kinit.cmd", STRING, "/usr/bin/kinit", DYNAMIC),
    ("sasl.kerberos.min.time.before.relogin", LONG, "60000", DYNAMIC),
    ("sasl.kerberos.principal.to.local.rules", LIST, "DEFAULT", DYNAMIC),
    ("sasl.kerberos.service.name", STRING, None, DYNAMIC),
    ("sasl.kerberos.ticket.renew.jitter", DOUBLE, "0.05", DYNAMIC),
    ("sasl.kerberos.ticket.renew.window.factor", DOUBLE, "0.8", DYNAMIC),
    ("sasl.login.callback.handler.class", CLASS, None, STATIC),
    ("sasl.login.class", CLASS, None, STATIC),
    ("sasl.login.connect.timeout.ms", INT, None, STATIC),
    ("sasl.login.read.timeout.ms", INT, None, STATIC),
    ("sasl.login.refresh.buffer.seconds", SHORT, "300", DYNAMIC),
    ("sasl.login.refresh.min.period.seconds", SHORT, "60", DYNAMIC),
    ("sasl.login.refresh.window.factor", DOUBLE, "0.8", DYNAMIC),
    ("sasl.login.refresh.window.jitter", DOUBLE, "0.05", DYNAMIC),
    ("sasl.login.retry.backoff.max.ms", LONG, "10000", STATIC),
    ("sasl.login.retry.backoff.ms", LONG, "100", STATIC),
    ("sasl.mechanism.controller.protocol", STRING, "GSSAPI", STATIC),
    ("sasl.mechanism.inter.broker.protocol", STRING, "GSSAPI", DYNAMIC),
    ("sasl.oauthbearer.clock.skew.seconds", INT, "30", STATIC),
    ("sasl.oauthbearer.expected.audience", LIST, None, STATIC),
    ("sasl.oauthbearer.expected.issuer", STRING, None, STATIC),
    ("sasl.oauthbearer.jwks.endpoint.refresh.ms", LONG, "3600000", STATIC),
    ("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", LONG, "10000", STATIC),
    ("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", LONG, "100", STATIC),
    ("sasl.oauthbearer.jwks.endpoint.url", STRING, None, STATIC),
    ("sasl.oauthbearer.scope.claim.name", STRING, "scope", STATIC),
    ("sasl.oauthbearer.sub.claim.name", STRING, "sub", STATIC),
    ("sasl.oauthbearer.token.endpoint.url", STRING, None, STATIC),
    ("sasl.server.callback.handler.class", CLASS, None, STATIC),
    ("sasl.server.max.receive.size", INT, "524288", STATIC),
    ("security.inter.broker.protocol", STRING, "PLAINTEXT", STATIC),
    ("security.providers", STRING, None, STATIC),
    ("server.max.startup.time.ms", LONG, "9223372036854775807", INTERNAL),
    ("socket.connection.setup.timeout.max.ms", LONG, "30000", STATIC),
    ("socket.connection.setup.timeout.ms", LONG, "10000", STATIC),
    ("socket.listen.backlog.size", INT, "50", STATIC),
    ("socket.receive.buffer.bytes", INT, "102400", STATIC),
    ("socket.request.max.bytes", INT, "104857600", STATIC),
    ("socket.send.buffer.bytes", INT, "102400", STATIC),
    ("ssl.allow.dn.changes", BOOLEAN, "false", STATIC),
    ("ssl.allow.san.changes", BOOLEAN, "false", STATIC),
    ("ssl.cipher.suites", LIST, "", DYNAMIC),
    ("ssl.client.auth", STRING, "none", DYNAMIC),
    ("ssl.enabled.protocols", LIST, "TLSv1.2,TLSv1.3", DYNAMIC),
    ("ssl.endpoint.identification.algorithm", STRING, "https", DYNAMIC),
    ("ssl.engine.factory.class", CLASS, None, DYNAMIC),
    ("ssl.key.password", PASSWORD, None, DYNAMIC),
    ("ssl.keymanager.algorithm", STRING, "SunX509", DYNAMIC),
    ("ssl.keystore.certificate.chain", PASSWORD, None, DYNAMIC),
    ("ssl.keystore.key", PASSWORD, None, DYNAMIC),
    ("ssl.keystore.location", STRING, None, DYNAMIC),
    ("ssl.keystore.password", PASSWORD, None, DYNAMIC),
    ("ssl.keystore.type", STRING, "JKS", DYNAMIC),
    ("ssl.principal.mapping.rules", STRING, "DEFAULT", STATIC),
    ("ssl.protocol", STRING, "TLSv1.3", DYNAMIC),
    ("ssl.provider", STRING, None, DYNAMIC),
    ("ssl.secure.random.implementation", STRING, None, DYNAMIC),
    ("ssl.trustmanager.algorithm", STRING, "PKIX", DYNAMIC),
    ("ssl.truststore.certificates", PASSWORD, None, DYNAMIC),
    ("ssl.truststore.location", STRING, None, DYNAMIC),
    ("ssl.truststore.password", PASSWORD, None, DYNAMIC),
    ("ssl.truststore.type", STRING, "JKS", DYNAMIC),
    ("telemetry.max.bytes", INT, "1048576", STATIC),
    ("transaction.abort.timed.out.transaction.cleanup.interval.ms", INT, "10000", STATIC),
    ("transaction.max.timeout.ms", INT, "900000", STATIC),
    ("transaction.partition.verification.enable", BOOLEAN, "true", DYNAMIC),
    ("transaction.remove.expired.transaction.cleanup.interval.ms", INT, "3600000", STATIC),
    ("transaction.state.log.load.buffer.size", INT, "5242880", STATIC),
    ("transaction.state.log.min.isr", INT, "2", STATIC),
    ("transaction.state.log.num.partitions", INT, "50", STATIC),
    ("transaction.state.log.replication.factor", SHORT, "3", STATIC),
    ("transaction.state.log.segment.bytes", INT, "104857600", STATIC),
    ("transactional.id.expiration.ms", INT, "604800000", STATIC),
    ("unclean.leader.election.enable", BOOLEAN, "false", DYNAMIC),
    ("unclean.leader.election.interval.ms", LONG, "300000", INTERNAL),
    ("unstable.api.versions.enable", BOOLEAN, "false", INTERNAL),
    ("unstable.feature.versions.enable", BOOLEAN, "false", INTERNAL),
    ("zookeeper.clientCnxnSocket", STRING, None, STATIC),
    ("zookeeper.connect", STRING, None, STATIC),
    ("zookeeper.connection.timeout.ms", INT, None, STATIC),
    ("zookeeper.max.in.flight.requests", INT, "10", STATIC),
    ("zookeeper.metadata.migration.enable", BOOLEAN, "false", STATIC),
    ("zookeeper.metadata.migration.min.batch.size", INT, "200", INTERNAL),
    ("zookeeper.session.timeout.ms", INT, "18000", STATIC),
    ("zookeeper.set.acl", BOOLEAN, "false", STATIC),
    ("zookeeper.ssl.cipher.suites", LIST, None, STATIC),
    ("zookeeper.ssl.client.enable", BOOLEAN, "false", STATIC),
    ("zookeeper.ssl.crl.enable", BOOLEAN, "false", STATIC),
    ("zookeeper.ssl.enabled.protocols", LIST, None, STATIC),
    ("zookeeper.ssl.endpoint.identification.algorithm", STRING, "HTTPS", STATIC),
    ("zookeeper.ssl.keystore.location", STRING, None, STATIC),
    ("zookeeper.ssl.keystore.password", PASSWORD, None, STATIC),
    ("zookeeper.ssl.keystore.type", STRING, None, STATIC),
    ("zookeeper.ssl.ocsp.enable", BOOLEAN, "false", STATIC),
    ("zookeeper.ssl.protocol", STRING, "TLSv1.2", STATIC),
    ("zookeeper.ssl.truststore.location", STRING, None, STATIC),
    ("zookeeper.ssl.truststore.password", PASSWORD, None, STATIC),
    ("zookeeper.ssl.truststore.type", STRING, None, STATIC),
)

BROKER_CONFIGS: Final[dict[str, BrokerConfigDef]] = {r[0]: BrokerConfigDef(*r) for r in _ROWS}

# Broker quotas: dynamic-only configs (DynamicConfig.Broker adds them to the dynamic ones).
QUOTA_CONFIGS: Final[dict[str, BrokerConfigDef]] = {n: BrokerConfigDef(n, LONG, "9223372036854775807", DYNAMIC) for n in (
    "leader.replication.throttled.rate", "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second")}

# SslConfigs.RECONFIGURABLE_CONFIGS: dynamic only with a listener prefix.
DYNAMIC_SECURITY_CONFIGS: Final = frozenset({
    "ssl.key.password", "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.keystore.location",
    "ssl.keystore.password", "ssl.keystore.type", "ssl.truststore.certificates", "ssl.truststore.location",
    "ssl.truststore.password", "ssl.truststore.type"})
# DynamicListenerConfig.ReconfigurableConfigs
LISTENER_RECONFIGURABLE: Final = frozenset({
    "advertised.listeners", "listener.security.protocol.map", "listeners", "max.connection.creation.rate",
    "max.connections", "num.network.threads", "principal.builder.class", "sasl.enabled.mechanisms",
    "sasl.jaas.config", "sasl.kerberos.kinit.cmd", "sasl.kerberos.min.time.before.relogin",
    "sasl.kerberos.principal.to.local.rules", "sasl.kerberos.service.name", "sasl.kerberos.ticket.renew.jitter",
    "sasl.kerberos.ticket.renew.window.factor", "sasl.login.refresh.buffer.seconds",
    "sasl.login.refresh.min.period.seconds", "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter",
    "sasl.mechanism.inter.broker.protocol", "ssl.cipher.suites", "ssl.client.auth", "ssl.enabled.protocols",
    "ssl.endpoint.identification.algorithm", "ssl.engine.factory.class", "ssl.key.password",
    "ssl.keymanager.algorithm", "ssl.keystore.location", "ssl.keystore.password", "ssl.keystore.type",
    "ssl.protocol", "ssl.provider", "ssl.secure.random.implementation", "ssl.trustmanager.algorithm",
    "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.type"})
CLUSTER_LEVEL_LISTENER_CONFIGS: Final = frozenset({"max.connections", "max.connection.creation.rate",
                                                   "num.network.threads"})
# Dynamic configs that only a broker's own resource may set, never the cluster default ("").
PER_BROKER_CONFIGS: Final = (DYNAMIC_SECURITY_CONFIGS | LISTENER_RECONFIGURABLE) - CLUSTER_LEVEL_LISTENER_CONFIGS
# Listener configs of a SASL mechanism: listener.name.L.MECHANISM.NAME has NAME as its base.
_LISTENER_MECHANISM_CONFIGS: Final = ("sasl.jaas.config", "sasl.login.callback.handler.class", "sasl.login.class",
                                      "sasl.server.callback.handler.class", "connections.max.reauth.ms")
_LISTENER_CONFIG: Final = re.compile(r"listener\.name\.[^.]*\.(.*)")
_SPELLINGS: Final = (("log.roll.ms", "log.roll.hours"), ("log.roll.jitter.ms", "log.roll.jitter.hours"),
                     ("log.retention.ms", "log.retention.minutes", "log.retention.hours"))


def listener_base(name: str) -> str | None:
    """The base name of a listener override (listener.name.L.NAME), else None."""
    m = _LISTENER_CONFIG.fullmatch(name)
    return None if m is None else m.group(1)


def broker_synonyms(name: str, match_listener_override: bool = True) -> list[str]:
    """A broker config's synonyms, highest precedence first, the config itself included."""
    for group in _SPELLINGS:
        if name in group:
            return list(group)
    if name == "log.flush.interval.ms":  # the scheduler interval stands in when it is unset
        return [name, "log.flush.scheduler.interval.ms"]
    base = listener_base(name) if match_listener_override else None
    if base is not None:
        mechanism = next((m for m in _LISTENER_MECHANISM_CONFIGS if base.endswith(m)), None)
        return [name, mechanism or base]
    return [name]


def _type_of(name: str) -> str | None:
    d = BROKER_CONFIGS.get(name) or QUOTA_CONFIGS.get(name)
    return None if d is None else d.type


def config_type(name: str) -> str | None:
    """KafkaConfig.configType: a listener override has its base config's type; None: unknown."""
    t = _type_of(name)
    if t is not None:
        return t
    for syn in broker_synonyms(name):
        t = _type_of(syn)
        if t is not None:
            return t
    return None


def maybe_sensitive(ctype: str | None) -> bool:
    """A password, or a config of unknown type (its value might be one)."""
    return ctype is None or ctype == PASSWORD


def is_dynamic(name: str) -> bool:
    """DynamicBrokerConfig.AllDynamicConfigs: not read-only in DescribeConfigs."""
    d = BROKER_CONFIGS.get(name)
    return d is not None and d.dynamic
