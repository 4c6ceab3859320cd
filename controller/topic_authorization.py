"""The per-topic questions Kafka's ControllerApis asks before the topic APIs reach the controller.

CreateTopics: CREATE on the cluster, else CREATE per topic; DESCRIBE_CONFIGS per topic decides
whether a v5+ result carries the topic's configs. DeleteTopics: DELETE on the cluster, else
DESCRIBE and DELETE per topic. CreatePartitions: ALTER per topic. The answers are predicates
the ReplicationControlManager's handlers take (None: everything allowed), so the rules about
what a refusal looks like stay with the handler that builds the response.

Kafka asks the authorizer once per distinct name (AuthHelper.filterByAuthorized); each
predicate here remembers its answers, so a name that a request repeats costs one question.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from kraftsim.metadata.authorizer.authorizer import CLUSTER_NAME, AclOperation, AllowAll, Authorizer, ResourceType
from kraftsim.rpc.dispatch import RequestContext

NamePredicate = Callable[[str], bool]


class TopicAuthorization:
    """One request's questions, from one principal at one address."""

    def __init__(self, authorizer: Authorizer, context: RequestContext) -> None:
        self.authorizer = authorizer
        self.context = context

    def on_cluster(self, operation: AclOperation) -> bool:
        """Asked before falling back to per-topic checks, so a denial here is not logged."""
        return self.authorizer.authorize(self.context, operation, ResourceType.CLUSTER, CLUSTER_NAME,
                                         log_if_denied=False)

    def on_topics(self, operation: AclOperation, log_if_denied: bool = True) -> NamePredicate:
        answers: dict[str, bool] = {}
        authorizer, context = self.authorizer, self.context

        def allowed(name: str) -> bool:
            answer = answers.get(name)
            if answer is None:
                answer = answers[name] = authorizer.authorize(context, operation, ResourceType.TOPIC, name,
                                                              log_if_denied)
            return answer

        return allowed

    def creatable(self) -> NamePredicate | None:
        """CreateTopics: None when the principal may CREATE on the cluster."""
        return None if self.on_cluster(AclOperation.CREATE) else self.on_topics(AclOperation.CREATE)

    def describable_configs(self, names: Iterable[str]) -> set[str] | None:
        """CreateTopics: the names whose configs the response may show (asked even with CREATE
        on the cluster, as Kafka asks); None (all) with no authorizer, where ``names`` is not
        read: a request of 388,000 topics need not be walked to learn that."""
        if self.authorizer.__class__ is AllowAll:
            return None
        allowed = self.on_topics(AclOperation.DESCRIBE_CONFIGS, log_if_denied=False)
        return {n for n in names if allowed(n)}

    def deletion(self) -> tuple[NamePredicate | None, NamePredicate | None]:
        """DeleteTopics: (deletable, describable), both None with DELETE on the cluster."""
        if self.on_cluster(AclOperation.DELETE):
            return None, None
        return self.on_topics(AclOperation.DELETE), self.on_topics(AclOperation.DESCRIBE)

    def alterable(self) -> NamePredicate:
        """CreatePartitions: ALTER per topic (Kafka asks no cluster-wide question here)."""
        return self.on_topics(AclOperation.ALTER)
