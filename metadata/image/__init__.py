"""The in-memory metadata image, one module per slice of state, each with its replay functions.

Where to find the replay of a record type:

* FeatureLevelRecord -> features.py; ZkMigrationStateRecord -> migration.py
* RegisterBroker/UnregisterBroker/FenceBroker/UnfenceBroker/BrokerRegistrationChange/
  RegisterController -> cluster.py
* Topic/Partition/PartitionChange/RemoveTopic/ClearElr -> topics.py (RemoveTopic's config cleanup in
  image.py)
* ConfigRecord -> configs.py; ClientQuotaRecord -> quotas.py
* AccessControlEntry/RemoveAccessControlEntry -> acls.py
* UserScramCredential/RemoveUserScramCredential -> scram.py
* DelegationToken/RemoveDelegationToken -> tokens.py; ProducerIdsRecord -> producer_ids.py
* Begin/End/AbortTransaction -> transactions.py; NoOpRecord -> image.py (no state)
"""

from kraftsim.metadata.image.errors import ReplayError, UnwritableMetadataError
from kraftsim.metadata.image.image import MetadataImage

__all__ = ["MetadataImage", "ReplayError", "UnwritableMetadataError"]
