"""Java's own behaviour, where Kafka's answers depend on it: the iteration order of its hash
maps and sets, and how it splits strings and parses integers.
"""
