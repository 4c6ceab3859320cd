"""The controller process: ``kraftsim controller`` from configuration to a serving node (the
Kafka and HTTP listeners, signals, logging, the garbage collector's tuning).
"""
