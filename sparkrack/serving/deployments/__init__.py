"""Several models at once: the inventory's deployments (:mod:`.load`), the gateway in front of
them (:mod:`.gateway`), what the serve play prints about them (:mod:`.plan`), and their bundle,
everything the serve play applies (:mod:`.bundle`)."""
