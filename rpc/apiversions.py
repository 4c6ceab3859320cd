"""ApiVersions, answered by the server itself for every listener (KIP-35, KIP-511, KIP-584).

It is the one API a client may call at a version we do not know: the reply then uses the v0
layout with UNSUPPORTED_VERSION and lists ApiVersions' own range, so the client can retry at a
version both sides speak.
"""

from __future__ import annotations

import re
import struct
from typing import Any

from kraftsim.rpc import registry
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.dispatch import Dispatcher
from kraftsim.rpc.error_codes import ErrorCode

API_VERSIONS_RANGE = (0, 4)  # a 3.9 process's; a dispatcher has its release's (Dispatcher.api_versions_range)
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")
_I32 = struct.Struct(">i")


def response_class() -> Any:
    return registry.response_class(ApiKey.API_VERSIONS)


def unsupported_version_response(correlation_id: int, own: tuple[int, int] = API_VERSIONS_RANGE) -> bytes:
    """The whole frame Kafka sends for an ApiVersions request at a version above its own
    (``own``: ApiVersions' range, 0-4 in 3.9, 0-5 in 4.4)."""
    resp_cls = response_class()
    body = resp_cls(error_code=ErrorCode.UNSUPPORTED_VERSION,
                    api_keys=[resp_cls.ApiVersion(api_key=ApiKey.API_VERSIONS, min_version=own[0],
                                                  max_version=own[1])])
    out = bytearray(b"\0\0\0\0")
    out += _I32.pack(correlation_id)  # response header v0
    body.encode_into(out, 0)
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def advertised(dispatcher: Dispatcher) -> list[tuple[int, int, int]]:
    """(api key, min, max) for ApiVersions: every routed API plus ApiVersions itself."""
    rows = {k: (k, r.min_version, r.max_version) for k, r in dispatcher.routes.items()}
    rows[ApiKey.API_VERSIONS] = (ApiKey.API_VERSIONS, *dispatcher.api_versions_range)
    return [rows[k] for k in sorted(rows)]


def build_response(dispatcher: Dispatcher, version: int, request: Any) -> Any:
    resp_cls = response_class()
    if version >= 5 and (request.cluster_id is None) != (request.node_id == -1):
        # ApiVersionsRequest.isValid (4.4): ClusterId and NodeId come together or not at all.
        return resp_cls(error_code=ErrorCode.INVALID_REQUEST)
    if version >= 3:
        name = request.client_software_name
        ver = request.client_software_version
        if not _SOFTWARE.fullmatch(name or "") or not _SOFTWARE.fullmatch(ver or ""):
            return resp_cls(error_code=ErrorCode.INVALID_REQUEST)
    api_keys = [resp_cls.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                for k, lo, hi in advertised(dispatcher)]
    resp = resp_cls(error_code=0, api_keys=api_keys, throttle_time_ms=0)
    if version >= 3:
        feats = dispatcher.features
        supported = feats.supported_features()
        resp.supported_features = [
            resp_cls.SupportedFeatureKey(name=n, min_version=lo, max_version=hi)
            for n, (lo, hi) in supported.items()  # in the source's order: Kafka's is a HashMap's
            # Before v4 a client may not understand a range starting at 0 (KAFKA-17011).
            if version >= 4 or lo != 0
        ]
        epoch, finalized = feats.finalized_features()
        resp.finalized_features_epoch = epoch
        resp.finalized_features = [
            resp_cls.FinalizedFeatureKey(name=n, max_version_level=lvl, min_version_level=lvl)
            for n, lvl in finalized.items() if lvl != 0
        ]
        resp.zk_migration_ready = feats.zk_migration_ready()
    return resp
