"""ClientQuotaControlManager: AlterClientQuotas (api 49), as a Kafka 3.9 controller serves it.

A quota entity maps entity types ("user", "client-id", "ip") to names, a null name being the
default entity of its type. Each entry of a request is judged on its own, all or nothing:

* the principal needs ALTER_CONFIGS on the cluster, else the whole request fails;
* a key named twice in one entry fails it ("Ignoring duplicate entity ..."), and an entity
  named twice fails the later mention, whose error replaces the earlier result in the response
  while the earlier mention's records stay (Kafka's result map is keyed by entity);
* entity types must be known, names non-empty, ip not combined with user or client-id, and an
  ip name must be an address;
* a removal (Remove=true) needs no valid key, and writes a record only when the quota is set;
  a new value must be a known key of the entity's kind, greater than 0, and for integral keys
  (LONG byte rates, the INT connection rate) within range and not fractional; only changed
  values are written;
* ValidateOnly judges everything and writes nothing; more than 10,000 records fail the whole
  request with POLICY_VIOLATION.

Orders follow Kafka's hash maps (``java_hash``): the entries of the response by the entity's
``hashCode``, the records of an entry by quota key, and the entity types inside a record or a
response entry by type name, each with the table size Kafka's map has there.

Kafka's check of an ip name, ``InetAddress.getByName``, also resolves host names through DNS.
A controller event must not wait on DNS, so here only address literals (and "localhost") are
accepted: a resolvable host name is refused (docs/differences.md).
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from kraftsim.controller.context import ControllerContext
from kraftsim.controller.java.hash_order import hashmap_capacity, order_by_hash, string_hash, string_map_hash
from kraftsim.controller.result import ControllerResult
from kraftsim.controller.routes import Route
from kraftsim.controller.write_path import check_record_count
from kraftsim.metadata.authorizer.authorizer import CLUSTER_NAME, AclOperation, ResourceType
from kraftsim.metadata.image.quotas import Entity
from kraftsim.metadata.messages import ClientQuotaRecord
from kraftsim.metadata.records import RecordAndVersion
from kraftsim.rpc.api_errors import ApiError
from kraftsim.rpc.api_types import Api
from kraftsim.rpc.dispatch import RequestContext
from kraftsim.rpc.error_codes import ErrorCode, generic_message
from kraftsim.rpc.messages import AlterClientQuotasResponse

if TYPE_CHECKING:
    from kraftsim.rpc.messages import AlterClientQuotasRequest

USER: Final = "user"
CLIENT_ID: Final = "client-id"
IP: Final = "ip"
ENTITY_TYPES: Final = (USER, CLIENT_ID, IP)

# QuotaConfigs: the keys of each kind of entity and their ConfigDef types.
LONG, INT, DOUBLE = "LONG", "INT", "DOUBLE"
USER_AND_CLIENT_KEYS: Final = {"producer_byte_rate": LONG, "consumer_byte_rate": LONG,
                               "request_percentage": DOUBLE, "controller_mutation_rate": DOUBLE}
IP_KEYS: Final = {"connection_creation_rate": INT}
# Java compares the double with the integral bound converted to double.
TOO_LARGE: Final = {LONG: (float((1 << 63) - 1), "a LONG"), INT: (float((1 << 31) - 1), "an INT")}

EntryResponse = AlterClientQuotasResponse.EntryData
EntityResponse = AlterClientQuotasResponse.EntityData


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """A ClientQuotaEntity as built from a request entry: its map, in the map's own order."""

    entries: tuple[tuple[str, str | None], ...]  # (type, name) in Java HashMap order

    @classmethod
    def of(cls, entity_data: list[AlterClientQuotasRequest.EntityData]) -> QuotaEntity:
        """``new HashMap<>(n)`` filled from the request's list: a repeated type keeps its first
        place and its last name."""
        m: dict[str, str | None] = {}
        for e in entity_data:
            m[e.entity_type] = e.entity_name
        cap = hashmap_capacity(len(m), initial=len(entity_data))
        return cls(tuple((t, m[t]) for t in order_by_hash(m, string_hash, cap)))

    @property
    def key(self) -> Entity:
        """What equality goes by (the image's key for the entity's quotas)."""
        return tuple(sorted(self.entries, key=lambda e: e[0]))

    def java_hash(self) -> int:
        return 31 + string_map_hash(self.entries)  # Objects.hash(entries)

    def __str__(self) -> str:
        inner = ", ".join(f"{t}={'null' if n is None else n}" for t, n in self.entries)
        return f"ClientQuotaEntity(entries={{{inner}}})"


class ClientQuotaControlManager:
    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx

    def routes(self) -> list[Route]:
        return [Route(Api.ALTER_CLIENT_QUOTAS, "alterClientQuotas", self.alter_client_quotas,
                      error=alter_client_quotas_error)]

    def alter_client_quotas(self, request: AlterClientQuotasRequest,
                            context: RequestContext) -> ControllerResult[AlterClientQuotasResponse]:
        if not self.ctx.authorizer.authorize(context, AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER,
                                             CLUSTER_NAME):
            raise ApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        records: list[RecordAndVersion] = []
        # Entity key -> (the entity first seen with it, its error or None); a dict keeps a
        # re-put key where it was, as a HashMap does.
        results: dict[Entity, tuple[QuotaEntity, ApiError | None]] = {}
        for entry in request.entries:
            entity = QuotaEntity.of(entry.entity)
            alterations: dict[str, float | None] = {}
            for op in entry.ops:
                if op.key in alterations:
                    self._put(results, entity, ApiError(
                        ErrorCode.INVALID_REQUEST,
                        f"Duplicate quota key {op.key} not updating quota for this entity {entity}"))
                else:
                    alterations[op.key] = None if op.remove else float(op.value)
            if entity.key in results:
                self._put(results, entity, ApiError(ErrorCode.INVALID_REQUEST, f"Ignoring duplicate entity {entity}"))
                continue
            cap = hashmap_capacity(len(alterations), initial=len(entry.ops))
            ordered = [(k, alterations[k]) for k in order_by_hash(alterations, string_hash, cap)]
            try:
                records.extend(self.alter_entity(entity, ordered))
                self._put(results, entity, None)
            except ApiError as e:
                self._put(results, entity, e)
            check_record_count(len(records))  # Kafka's BoundedList: the whole request fails
        by_hash = order_by_hash(results, lambda k: results[k][0].java_hash(), hashmap_capacity(len(results)))
        response = AlterClientQuotasResponse(throttle_time_ms=0, entries=[
            _entry(*results[k]) for k in by_hash])
        return ControllerResult([] if request.validate_only else records, response, atomic=True)

    @staticmethod
    def _put(results: dict[Entity, tuple[QuotaEntity, ApiError | None]], entity: QuotaEntity,
             error: ApiError | None) -> None:
        first = results.get(entity.key)
        results[entity.key] = (entity if first is None else first[0], error)

    def alter_entity(self, entity: QuotaEntity, alterations: list[tuple[str, float | None]]) -> list[RecordAndVersion]:
        """alterClientQuotaEntity: the entity's records, or ApiError for the entity."""
        validated = validate_entity(entity)
        keys = config_keys(dict(validated))
        current = self.ctx.image.quotas.get(entity.key)
        records: list[RecordAndVersion] = []
        for key, value in alterations:
            if value is None:
                if key in current:
                    records.append((_record(validated, key, 0.0, remove=True), 0))
                continue
            validate_value(keys, key, value)
            if not _same_double(current.get(key), value):
                records.append((_record(validated, key, value, remove=False), 0))
        return records


def validate_entity(entity: QuotaEntity) -> list[tuple[str, str | None]]:
    """validateEntity: the entries in the order of Kafka's ``new HashMap<>(3)`` of them."""
    if not entity.entries:
        raise ApiError(ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity")
    for entity_type, name in entity.entries:
        if entity_type not in ENTITY_TYPES:
            raise ApiError(ErrorCode.INVALID_REQUEST, f"Unhandled client quota entity type: {entity_type}")
        if name == "":
            raise ApiError(ErrorCode.INVALID_REQUEST, f"Empty {entity_type} not supported")
    cap = hashmap_capacity(len(entity.entries), initial=3)
    names = dict(entity.entries)
    return [(t, names[t]) for t in order_by_hash(names, string_hash, cap)]


def config_keys(entity: dict[str, str | None]) -> dict[str, str]:
    """configKeysForEntityType: which combinations are allowed, and the keys each may set."""
    has_ip = IP in entity
    if has_ip:
        if USER in entity or CLIENT_ID in entity:
            # Kafka's message has no space between "should" and "not".
            raise ApiError(ErrorCode.INVALID_REQUEST,
                           "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId")
        if not is_valid_ip_entity(entity[IP]):
            raise ApiError(ErrorCode.INVALID_REQUEST, f"{entity[IP]} is not a valid IP or resolvable host.")
        return IP_KEYS
    if USER in entity or CLIENT_ID in entity:
        return USER_AND_CLIENT_KEYS
    raise ApiError(ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity")


def is_valid_ip_entity(name: str | None) -> bool:
    """The default ip entity, an address literal as Java reads one, or localhost; host names
    are not looked up (see the module's docstring)."""
    if name is None or name == "localhost":
        return True
    if name.startswith("["):
        return name.endswith("]") and len(name) > 2 and _ipv6_literal(name[1:-1])
    return java_ipv4_literal(name) or _ipv6_literal(name)


def java_ipv4_literal(text: str) -> bool:
    """IPAddressUtil.textToNumericFormatV4: one to four decimal parts ("10.1" is 10.0.0.1), the
    last filling the bytes left; leading zeros are decimal; at most 15 characters."""
    if not 0 < len(text) <= 15:
        return False
    parts = text.split(".")
    if len(parts) > 4 or not all(p and p.isascii() and p.isdigit() for p in parts):
        return False
    *head, last = (int(p) for p in parts)
    return all(v <= 0xFF for v in head) and last < 1 << (8 * (5 - len(parts)))


def _ipv6_literal(text: str) -> bool:
    """An IPv6 literal; a scope id only as a number (Java also takes the name of one of this
    host's interfaces)."""
    address, _, scope = text.partition("%")
    if "%" in text and not (scope.isascii() and scope.isdigit()):
        return False
    try:
        ipaddress.IPv6Address(address)
    except ValueError:
        return False
    return True


def validate_value(keys: dict[str, str], key: str, value: float) -> None:
    """validateQuotaKeyValue, with Java's double arithmetic (NaN passes every comparison)."""
    kind = keys.get(key)
    if kind is None:
        raise ApiError(ErrorCode.INVALID_REQUEST, f"Invalid configuration key {key}")
    if value <= 0.0:
        raise ApiError(ErrorCode.INVALID_REQUEST, f"Quota {key} must be greater than 0")
    if kind == DOUBLE:
        return
    bound, name = TOO_LARGE[kind]
    if value > bound:
        raise ApiError(ErrorCode.INVALID_REQUEST, f"Proposed value for {key} is too large for {name}.")
    if math.isfinite(value) and abs(math.fmod(value, 1.0)) > 1e-6:
        raise ApiError(ErrorCode.INVALID_REQUEST, f"{key} cannot be a fractional value.")


def _same_double(current: float | None, new: float) -> bool:
    """Objects.equals on two Doubles: NaN equals NaN."""
    if current is None:
        return False
    return current == new or (math.isnan(current) and math.isnan(new))


def _record(entity: list[tuple[str, str | None]], key: str, value: float, remove: bool) -> ClientQuotaRecord:
    return ClientQuotaRecord(entity=[ClientQuotaRecord.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                             key=key, value=value, remove=remove)


def _entry(entity: QuotaEntity, error: ApiError | None) -> AlterClientQuotasResponse.EntryData:
    return EntryResponse(error_code=0 if error is None else int(error.code),
                         error_message=None if error is None else error.message,
                         entity=[EntityResponse(entity_type=t, entity_name=n) for t, n in entity.entries])


def alter_client_quotas_error(request: AlterClientQuotasRequest, version: int, code: int,
                              message: str | None) -> AlterClientQuotasResponse:
    """AlterClientQuotasRequest.getErrorResponse: every entry of the request, as sent, with the
    code and the code's generic message (not the exception's)."""
    return AlterClientQuotasResponse(throttle_time_ms=0, entries=[
        EntryResponse(error_code=int(code), error_message=generic_message(code),
                      entity=[EntityResponse(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity])
        for entry in request.entries])
