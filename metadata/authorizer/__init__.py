"""Who may do what: ACL vocabulary (operations, resource and pattern types, bindings and
filters), the authorizer's interface, and Kafka's StandardAuthorizer over the ACLs in the image.
Here, below every part that asks (the controller, the Raft APIs, the migration), as Kafka keeps
its StandardAuthorizer in its metadata module.
"""
