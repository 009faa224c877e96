"""Several models at once: the inventory's deployments (:mod:`.load`), the gateway in front of
them (:mod:`.gateway`), and their bundle, everything the serve play applies (:mod:`.bundle`)."""
