"""kraftsim: a simulated Apache Kafka 3.9 KRaft controller.

The repository keeps one folder per part (``rpc/``, ``metadata/``, ``controller/``, ...); this
package maps each into the one namespace by symlink (``kraftsim/rpc -> ../rpc``, see
pyproject.toml), so ``from kraftsim.metadata.log import MetadataLog`` is the only spelling.
"""

__version__ = "0.2.0"
