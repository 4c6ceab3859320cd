"""Errors raised by the metadata image.

Kafka treats a record that cannot be replayed as a fatal fault (the process halts); the image
raises instead and leaves its state untouched, so the caller (controller, loader, test) decides
what a fault means.
"""

from __future__ import annotations


class ReplayError(Exception):
    """A record Kafka would refuse to replay. Raised before the image changes."""


class UnwritableMetadataError(Exception):
    """The image holds state the snapshot's metadata.version cannot express.

    Kafka's ImageWriterOptions default loss handler throws, so a snapshot never silently drops
    data; ``MetadataImage.records()`` does the same.
    """
