"""The control managers: one per slice of state, each holding the handlers of its APIs and the
``routes()`` that name them (search for ``Api.<NAME>`` to find an API's handler). A handler
reads the image and returns records and a response; it never changes state. The set a
controller runs is ``controller/control_managers.py``.
"""
