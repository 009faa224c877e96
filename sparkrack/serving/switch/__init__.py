"""A model switch: the plan of the in-pod fetch step (:mod:`.plan`: its argv, marker, Secret
keys) and the objects that run it (:mod:`.objects`: pre-pull Jobs, the fetch and receiver Jobs,
the rank pods' init containers). The step itself is ``serving/scripts/fetch_step.py``."""
