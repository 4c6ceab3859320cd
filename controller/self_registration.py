"""This controller's own registration (KIP-919), Kafka's ControllerRegistrationManager: once
metadata.version allows it (3.7-IV0 on), every controller makes sure the image holds a
RegisterControllerRecord for this incarnation of itself, so that brokers and tools learn the
controllers' listeners and supported features from the metadata log.

A small object the QuorumController owns. The controller asks it to look
(:meth:`SelfRegistration.maybe_register`) whenever what it depends on may have changed: a new
leader, a replayed or committed batch (metadata.version, or the record itself), a reloaded
image, activation, the bound listeners. The active controller writes the record itself, through
the ControllerRegistration handler as a write event; a standby sends ControllerRegistration to
the leader, as Kafka's manager sends the RPC to the active controller."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from kraftsim.rpc.api_errors import ApiError, NotControllerError
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.client import KafkaClient
from kraftsim.rpc.dispatch import RequestContext
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.messages import ControllerRegistrationRequest

if TYPE_CHECKING:
    from kraftsim.controller.quorum_controller import QuorumController

# The controller's logger: what the registration logs reads as it did when it was part of the core.
log = logging.getLogger("kraftsim.controller")


class SelfRegistration:
    """The registration of one controller process: at most one attempt at a time, a failed one
    retried with Kafka's exponential backoff (100 ms doubling, at most two minutes)."""

    def __init__(self, controller: QuorumController) -> None:
        self._controller = controller
        self.registering = False  # a registration is being written (or waits to retry)
        self._failures = 0
        self._registered_in_epoch = -1  # a standby's registration the leader of this epoch accepted
        self.tasks: set[asyncio.Task[None]] = set()  # the attempt under way: the controller's stop() awaits it

    def maybe_register(self) -> None:
        """Kafka's ControllerRegistrationManager: once metadata.version allows it and the image
        does not hold this incarnation's registration, register: the active controller writes it
        itself, a standby sends ControllerRegistration to the leader (once per leader epoch, until
        its replay shows the record)."""
        qc = self._controller
        if self.registering or qc._managers is None or qc.fatal is not None:
            return
        if not qc.active and (qc.leader_id is None or qc.leader_id == qc.node_id):
            return
        if not qc.managers.controllers.needs_registration():
            return
        if not qc.active and self._registered_in_epoch == qc.epoch:
            return  # accepted by this epoch's leader: its record is on its way
        self.registering = True
        task = asyncio.create_task(self._register(), name="kraftsim-controller-registration")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _register(self) -> None:
        """Write this node's RegisterControllerRecord through the ControllerRegistration handler
        (the active controller), or send it to the leader (a standby), as Kafka's registration
        manager sends the RPC to the active controller."""
        qc = self._controller
        controllers = qc.managers.controllers
        request = controllers.local.request()
        try:
            if qc.active:
                ctx = RequestContext(ApiKey.CONTROLLER_REGISTRATION, 0, 0, str(qc.node_id))
                await qc.write("registerController", lambda: controllers.register_controller(request, ctx))
            else:
                epoch = qc.epoch
                await self._register_with_leader(request)
                self._registered_in_epoch = epoch
            self._failures = 0
            log.info("controller %d registered incarnation %s", qc.node_id, controllers.local.incarnation_id)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - any failure: back off and try again, as Kafka does
            delay = min(100 * 2 ** self._failures, 120_000)
            self._failures += 1
            log.info("controller registration failed (%s); retrying in %d ms", e, delay)
            await qc.clock.sleep_ms(delay)
        finally:
            self.registering = False
        self.maybe_register()

    async def _register_with_leader(self, request: ControllerRegistrationRequest) -> None:
        qc = self._controller
        leader = qc.leader_id
        node = qc.voter_set().node(leader) if leader is not None else None
        address = node.endpoints.address(qc.config.controller_listener[0]) if node is not None else None
        if address is None:
            raise NotControllerError()
        timeout = qc.config.get("controller.quorum.request.timeout.ms") / 1000
        client = await KafkaClient.connect(address.host, address.port, client_id=f"controller-{qc.node_id}",
                                           timeout=timeout)
        try:
            await asyncio.wait_for(client.negotiate(), timeout)
            response = await client.request(request, 0, timeout=timeout)
        finally:
            await client.close()
        if response.error_code != ErrorCode.NONE:
            raise ApiError(response.error_code, response.error_message)
