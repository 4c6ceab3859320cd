"""Faults on demand: a control plane that misbehaves exactly as asked, when asked, and the same
way again from a seed (docs/faults.md).

One registry of active faults per process (``registry.py``), fed by the HTTP API
(``http.py``: ``/faults`` on the controller's and the fleet's HTTP listeners, off unless
``kraftsim.faults.enable=true``), ``kraftsim fault`` (``cli/fault.py``), scenarios
(``scenario.py``, ``kraftsim scenario run``) and the pytest fixtures (``pytest_plugin.py``).
Each kind of fault is carried out by an injector at a narrow hook in the module that owns what
it breaks, installed only while a fault of that kind is active:

- ``requests.py``: a named API's requests, through the dispatch table (``Dispatcher.replace``);
- ``network.py``: connections, between a server's connection and its transport
  (``KafkaServer.on_accept`` for new ones);
- ``process.py``: the event loop (a stop-the-world stall) and the disk (``metadata/fileio.py``);
- ``controller.py``: leadership (``QuorumController.resign``, a voter partition through the
  quorum's :class:`~kraftsim.faults.controller.QuorumFaults`) and the clock of broker sessions
  (``BrokerHeartbeatManager.jump``);
- ``fleet.py``: the simulated brokers (``broker/lifecycle.py``: silence, lag; the fleet's
  restarts for flaps, new incarnations and feature changes).
"""
