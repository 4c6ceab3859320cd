"""IncrementalAlterConfigs through ConfigurationControlManager over the real write path.

The messages asserted here are Kafka 3.9's: each was checked against a real 3.9.2 controller
answering the same request (only the order of resources differs there, being HashMap order of
ConfigResource, which hashes a Java enum by identity)."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest

from kraftsim.controller.java.hash_order import hash_order, string_hash
from kraftsim.controller.managers.configuration import ConfigurationControlManager
from kraftsim.controller.write_path import EXCESSIVE_BATCH_MESSAGE
from kraftsim.metadata.authorizer.authorizer import AclOperation
from kraftsim.metadata.records import by_name
from kraftsim.rpc.api_errors import ApiError
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.error_codes import ErrorCode as E
from kraftsim.rpc.messages import IncrementalAlterConfigsRequest as IAC
from tests.controller_harness import NODE, WriteHarness, request_context

R = by_name
TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS = 2, 4, 8, 16
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
TID = uuid.UUID(int=77 << 64)


class H(WriteHarness):
    def __init__(self, config: dict[str, str] | None = None) -> None:
        super().__init__(21, config)
        self.replay(R("RegisterBrokerRecord")(broker_id=1, broker_epoch=10, incarnation_id=uuid.UUID(int=1),
                                              log_dirs=[uuid.UUID(int=500 << 64)]),
                    R("TopicRecord")(name="t", topic_id=TID))
        self.mgr = ConfigurationControlManager(self.ctx)

    def alter(self, *resources: Any, validate_only: bool = False, version: int = 1) -> Any:
        result = self.mgr.incremental_alter_configs(IAC(resources=list(resources), validate_only=validate_only),
                                                    request_context(ApiKey.INCREMENTAL_ALTER_CONFIGS, version))
        self.last_records = [r for r, _ in result.records]
        return self.apply(result)

    def configs(self, rtype: int, name: str) -> dict[str, str]:
        return dict(self.image.configs.get(rtype, name))


def res(rtype: int, name: str, *ops: tuple[str, int, str | None]) -> Any:
    return IAC.AlterConfigsResource(resource_type=rtype, resource_name=name, configs=[
        IAC.AlterableConfig(name=n, config_operation=op, value=v) for n, op, v in ops])


def results(resp: Any) -> list[tuple[int, str, int, str | None]]:
    return [(r.resource_type, r.resource_name, r.error_code, r.error_message) for r in resp.responses]


@pytest.fixture
def h() -> Any:
    harness = H()
    yield harness
    harness.close()


def test_set_delete_append_subtract_on_a_topic(h: H) -> None:
    r = h.alter(res(TOPIC, "t", ("retention.ms", SET, "1000"), ("cleanup.policy", APPEND, "compact")))
    assert results(r) == [(TOPIC, "t", 0, None)]
    # APPEND starts from the schema default ("delete") when the topic does not set the key
    assert h.configs(TOPIC, "t") == {"retention.ms": "1000", "cleanup.policy": "delete,compact"}
    h.alter(res(TOPIC, "t", ("cleanup.policy", SUBTRACT, "delete,nothing"), ("retention.ms", DELETE, None)))
    assert h.configs(TOPIC, "t") == {"cleanup.policy": "compact"}
    # Unchanged topic values write nothing; APPEND of something present changes nothing.
    h.alter(res(TOPIC, "t", ("cleanup.policy", APPEND, "compact"), ("retention.ms", DELETE, None)))
    assert h.last_records == []


def test_broker_resources_always_write_even_unchanged_values(h: H) -> None:
    """KAFKA-14136: brokers reload a config when its record arrives, so BROKER records are
    written even when the value is the same (and a DELETE of an unset key too)."""
    h.alter(res(BROKER, "", ("log.retention.ms", SET, "5")))
    h.alter(res(BROKER, "", ("log.retention.ms", SET, "5"), ("num.io.threads", DELETE, None)))
    assert [(r.resource_name, r.name, r.value) for r in h.last_records] == [
        ("", "log.retention.ms", "5"), ("", "num.io.threads", None)]
    h.alter(res(BROKER, "1", ("log.cleanup.policy", APPEND, "compact")), res(BROKER, str(NODE)))
    assert h.configs(BROKER, "1") == {"log.cleanup.policy": "delete,compact"}
    assert h.configs(BROKER, "") == {"log.retention.ms": "5"}


def test_records_within_a_resource_follow_java_hashmap_order(h: H) -> None:
    names = ["retention.ms", "cleanup.policy", "segment.bytes", "retention.bytes"]
    h.alter(res(TOPIC, "t", *[(n, SET, v) for n, v in zip(names, ["1", "compact", "1048576", "7"], strict=True)]))
    # What java.util.HashMap iterates for these keys (checked with a JVM).
    assert [r.name for r in h.last_records] == ["cleanup.policy", "retention.ms", "segment.bytes", "retention.bytes"]


def test_java_hash_order_matches_java() -> None:
    """Orders and hashes printed by a JVM for these strings (HashMap, String.hashCode)."""
    assert hash_order(["zeta", "alpha", "beta", "gamma", "delta", "epsilon"]) == \
        ["zeta", "epsilon", "alpha", "delta", "beta", "gamma"]
    keys = "t1;t2;t3;orders;payments;a;b;c;d;e;f;g;h;i;j;k;l;m;n".split(";")  # 19 keys: a table of 32
    assert hash_order(keys) == "a,b,c,d,e,f,payments,g,h,i,j,k,l,m,n,orders,t1,t2,t3".split(",")
    assert hash_order(["metadata.version", "kraft.version"]) == ["kraft.version", "metadata.version"]
    assert string_hash("hello") == 99162322 and string_hash("é€😀") == 16752006  # UTF-16 units, surrogates too


def test_request_level_refusals_come_first_in_request_order(h: H) -> None:
    r = h.alter(res(BROKER, "", ("a.b", SET, "1")), res(32, "g"), res(BROKER, ""), res(99, "x"),
                res(BROKER, ""), res(TOPIC, "t", ("retention.ms", SET, "9")), validate_only=True)
    assert results(r) == [  # each refusal where its resource is met; a third BROKER "" adds nothing
        (32, "g", E.UNSUPPORTED_VERSION, "Unknown resource type 32."),
        (BROKER, "", E.INVALID_REQUEST, "Duplicate resource."),
        (99, "x", E.UNSUPPORTED_VERSION, "Unknown resource type 99."),
        (TOPIC, "t", 0, None)]
    assert h.last_records == []  # validate_only


ERRORS = [
    (res(TOPIC, "nope", ("retention.ms", SET, "1")), E.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'nope' does not exist."),
    (res(TOPIC, "", ("retention.ms", SET, "1")), E.INVALID_REQUEST, "Default topic resources are not allowed."),
    (res(TOPIC, "bad/name"), E.INVALID_TOPIC_EXCEPTION,
     "Topic name is invalid: 'bad/name' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"),
    (res(TOPIC, "t", ("retention.ms", SET, "abc")), E.INVALID_CONFIG,
     "Invalid value abc for configuration retention.ms: Not a number of type LONG"),
    (res(TOPIC, "t", ("foo.bar", SET, "1")), E.INVALID_CONFIG, "Unknown topic config name: foo.bar"),
    (res(TOPIC, "t", ("segment.bytes", APPEND, "1")), E.INVALID_CONFIG,
     "Can't APPEND to key segment.bytes because its type is not LIST."),
    (res(TOPIC, "t", ("min.compaction.lag.ms", SET, "10"), ("max.compaction.lag.ms", SET, "5")), E.INVALID_CONFIG,
     "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)"),
    (res(TOPIC, "t", ("remote.storage.enable", SET, "true")), E.INVALID_CONFIG,
     "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage."),
    # The validator runs before the existence check: a bad value on a missing topic is INVALID_CONFIG.
    (res(TOPIC, "nope", ("retention.ms", SET, "x")), E.INVALID_CONFIG,
     "Invalid value x for configuration retention.ms: Not a number of type LONG"),
    (res(BROKER, "x"), E.INVALID_REQUEST, "Unable to parse broker name as a base 10 number."),
    (res(BROKER, " 1"), E.INVALID_REQUEST, "Unable to parse broker name as a base 10 number."),
    (res(BROKER, "-1"), E.INVALID_REQUEST, "Invalid negative broker ID."),
    (res(BROKER, "77"), E.BROKER_ID_NOT_REGISTERED, "No node with id 77 found."),
    (res(BROKER, "", ("num.io.threads", SUBTRACT, "1")), E.INVALID_CONFIG,
     "Can't SUBTRACT to key num.io.threads because its type is not LIST."),
    (res(CLIENT_METRICS, ""), E.INVALID_REQUEST, "Subscription name can't be empty"),
    (res(CLIENT_METRICS, "s", ("interval.ms", SET, "5")), E.INVALID_REQUEST,
     "Invalid value 5 for interval.ms, interval must be between 100 and 3600000 (1 hour)"),
    (res(CLIENT_METRICS, "s", ("interval.ms", SET, "x")), E.UNKNOWN_SERVER_ERROR, None),  # NumberFormatException
    (res(CLIENT_METRICS, "s", ("match", SET, "client_id=a,bogus=1")), E.INVALID_CONFIG,
     "Illegal client matching pattern: bogus=1"),
    (res(CLIENT_METRICS, "s", ("match", SET, "client_id=(")), E.INVALID_CONFIG,
     "Illegal client matching pattern: client_id=("),
    (res(CLIENT_METRICS, "s", ("foo", SET, "1")), E.INVALID_REQUEST, "Unknown client metrics configuration: foo"),
    (res(CLIENT_METRICS, "s", ("metrics", APPEND, "x")), E.INVALID_CONFIG,
     "Can't APPEND to key metrics because its type is not LIST."),
]


@pytest.mark.parametrize("resource,code,message", ERRORS, ids=[f"{e[0].resource_type}-{e[0].resource_name}-{i}"
                                                               for i, e in enumerate(ERRORS)])
def test_resource_errors(h: H, resource: Any, code: int, message: str | None) -> None:
    r = h.alter(resource)
    assert results(r) == [(resource.resource_type, resource.resource_name, code, message)]
    assert h.last_records == []


def test_a_failing_resource_does_not_stop_the_others_and_one_batch_is_written(h: H) -> None:
    end = h.next_offset
    r = h.alter(res(TOPIC, "nope", ("retention.ms", SET, "1")), res(BROKER, str(NODE), ("a", SET, "1")),
                res(TOPIC, "t", ("retention.ms", SET, "2")))
    assert [x[2] for x in results(r)] == [E.UNKNOWN_TOPIC_OR_PARTITION, 0, 0]
    assert h.next_offset == end + 2 and h.configs(TOPIC, "t") == {"retention.ms": "2"}
    assert h.configs(BROKER, str(NODE)) == {"a": "1"}  # a controller id is a valid node


def test_valid_client_metrics_subscription_is_written(h: H) -> None:
    r = h.alter(res(CLIENT_METRICS, "sub", ("interval.ms", SET, "1000"),
                    ("match", SET, "client_id=app.*, client_software_name = java")))
    assert results(r) == [(CLIENT_METRICS, "sub", 0, None)]
    assert h.configs(CLIENT_METRICS, "sub") == {"interval.ms": "1000",
                                                "match": "client_id=app.*, client_software_name = java"}


def test_turning_remote_storage_off_needs_delete_on_disable() -> None:
    h = H({"remote.log.storage.system.enable": "true"})
    try:
        assert results(h.alter(res(TOPIC, "t", ("remote.storage.enable", SET, "true"))))[0][2] == 0
        r = h.alter(res(TOPIC, "t", ("remote.storage.enable", SET, "false")))
        assert r.responses[0].error_code == E.INVALID_CONFIG
        assert r.responses[0].error_message.startswith("It is invalid to disable remote storage without deleting "
                                                       "remote data.")
        r = h.alter(res(TOPIC, "t", ("remote.storage.enable", DELETE, None)))  # the same, by deleting it
        assert r.responses[0].error_code == E.INVALID_CONFIG
        r = h.alter(res(TOPIC, "t", ("remote.storage.enable", SET, "false"), ("remote.log.delete.on.disable", SET, "true")))
        assert r.responses[0].error_code == 0
        r = h.alter(res(TOPIC, "t", ("remote.storage.enable", SET, "true"), ("retention.bytes", SET, "100"),
                        ("local.retention.bytes", SET, "200")))
        assert r.responses[0].error_message == ("Invalid value 200 for configuration local.retention.bytes: Value must "
                                                "not be more than retention.bytes property value: 100")
    finally:
        h.close()


def test_more_than_10000_records_fails_the_whole_request_even_validate_only(h: H) -> None:
    big = res(BROKER, "", *[(f"k{i}", SET, "v") for i in range(10_001)])
    for validate_only in (False, True):
        with pytest.raises(ApiError) as e:
            h.mgr.incremental_alter_configs(IAC(resources=[big], validate_only=validate_only),
                                            request_context(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1))
        assert (e.value.code, e.value.message) == (E.POLICY_VIOLATION, EXCESSIVE_BATCH_MESSAGE)


def test_an_unknown_operation_is_a_fault_as_in_kafka(h: H) -> None:
    """OpType.forId gives null and the controller's switch throws NullPointerException: not an
    ApiException, so the controller treats it as a fault (UNKNOWN_SERVER_ERROR, failover)."""
    with pytest.raises(RuntimeError):
        h.alter(res(TOPIC, "t", ("retention.ms", 7, "1")))


def test_unauthorized_resources_are_refused_before_the_controller_sees_them(h: H) -> None:
    class DenyTopics:
        def authorize(self, context: Any, operation: AclOperation, resource_type: Any, name: str) -> bool:
            assert operation == AclOperation.ALTER_CONFIGS
            return resource_type != 2

    h.ctx.authorizer = DenyTopics()
    r = h.alter(res(TOPIC, "t", ("retention.ms", SET, "1")), res(BROKER, "", ("x", SET, "1")))
    assert results(r) == [(TOPIC, "t", E.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed."),
                          (BROKER, "", 0, None)]
    assert h.configs(TOPIC, "t") == {}


# ----- BROKER_LOGGER: this process's log levels, never the metadata log -------------------------

def test_broker_logger_sets_and_unsets_python_log_levels(h: H) -> None:
    name = "kraftsim.test.loggers"
    logger = logging.getLogger(name)
    try:
        end = h.next_offset
        r = h.alter(res(BROKER_LOGGER, str(NODE), (name, SET, "TRACE")))
        assert results(r) == [(BROKER_LOGGER, str(NODE), 0, None)]
        assert logger.level == 5 and h.next_offset == end  # nothing written
        h.alter(res(BROKER_LOGGER, str(NODE), (name, SET, "WARN")), validate_only=True)
        assert logger.level == 5
        h.alter(res(BROKER_LOGGER, str(NODE), (name, DELETE, None)))
        assert logger.level == logging.NOTSET
    finally:
        logger.setLevel(logging.NOTSET)


@pytest.mark.parametrize("name,ops,code,message", [
    (str(NODE), [("no.such.logger", SET, "DEBUG")], E.INVALID_CONFIG, "Logger no.such.logger does not exist!"),
    (str(NODE), [("root", SET, "LOUD")], E.INVALID_CONFIG, "Cannot set the log level of root to LOUD as it is not a "
     "supported log level. Valid log levels are DEBUG, ERROR, FATAL, INFO, TRACE, WARN"),
    (str(NODE), [("root", DELETE, None)], E.INVALID_REQUEST, "Removing the log level of the root logger is not allowed"),
    (str(NODE), [("root", APPEND, "x")], E.INVALID_REQUEST, "APPEND operation is not allowed for the BROKER_LOGGER resource"),
    (str(NODE), [("root", 9, "x")], E.INVALID_REQUEST, "Unknown operation type 9 is not allowed for the BROKER_LOGGER resource"),
    ("abc", [], E.INVALID_REQUEST, "Node id must be an integer, but it is: abc"),
    ("17", [], E.INVALID_REQUEST, f"Unexpected node id. Expected {NODE}, but received {NODE}"),  # sic, as Kafka
])
def test_broker_logger_errors(h: H, name: str, ops: list[Any], code: int, message: str) -> None:
    r = h.alter(res(BROKER_LOGGER, name, *ops))
    assert results(r) == [(BROKER_LOGGER, name, code, message)]


# ----- AlterConfigs (legacy): the whole set ------------------------------------------------------

def legacy(h: H, *resources: tuple[int, str, dict[str, str | None]], validate_only: bool = False) -> Any:
    from kraftsim.rpc.messages import AlterConfigsRequest as AC

    request = AC(validate_only=validate_only, resources=[
        AC.AlterConfigsResource(resource_type=t, resource_name=n, configs=[
            AC.AlterableConfig(name=k, value=v) for k, v in c.items()]) for t, n, c in resources])
    result = h.mgr.legacy_alter_configs(request, request_context(ApiKey.ALTER_CONFIGS, 2))
    h.last_records = [r for r, _ in result.records]
    return h.apply(result)


def test_legacy_alter_configs_replaces_the_set_and_deletes_what_it_leaves_out(h: H) -> None:
    r = legacy(h, (TOPIC, "t", {"retention.ms": "1000", "cleanup.policy": "compact"}))
    assert results(r) == [(TOPIC, "t", 0, None)]
    assert h.configs(TOPIC, "t") == {"retention.ms": "1000", "cleanup.policy": "compact"}
    legacy(h, (TOPIC, "t", {"retention.ms": "1000"}))  # unchanged: no record; cleanup.policy: deleted
    assert [(x.name, x.value) for x in h.last_records] == [("cleanup.policy", None)]
    assert h.configs(TOPIC, "t") == {"retention.ms": "1000"}
    legacy(h, (TOPIC, "t", {"retention.ms": "5"}), validate_only=True)
    assert h.last_records == [] and h.configs(TOPIC, "t") == {"retention.ms": "1000"}
    r = legacy(h, (TOPIC, "t", {"retention.ms": "soon"}))
    assert results(r)[0][2] == E.INVALID_CONFIG and h.configs(TOPIC, "t") == {"retention.ms": "1000"}


def test_legacy_alter_configs_refusals(h: H) -> None:
    r = legacy(h, (99, "x", {}), (BROKER_LOGGER, "1", {"kafka": "DEBUG"}), (TOPIC, "t", {}), (TOPIC, "t", {}))
    assert results(r) == [
        (99, "x", E.UNSUPPORTED_VERSION, "Unknown resource type 99."),
        (TOPIC, "t", E.INVALID_REQUEST, "Duplicate resource."),
        (BROKER_LOGGER, "1", E.INVALID_REQUEST, "Unexpected resource type BROKER_LOGGER."),
    ]
    r = legacy(h, (BROKER, "77", {"log.cleaner.threads": "2"}))
    assert results(r) == [(BROKER, "77", E.BROKER_ID_NOT_REGISTERED, "No node with id 77 found.")]
