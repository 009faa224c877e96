"""The stall watchdog: probe a serving endpoint like a user (:mod:`.probe`), keep the evidence of
a bad verdict (:mod:`.evidence`) and act on the cluster (:mod:`.actions`)."""
