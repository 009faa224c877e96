"""The serving profile: its model (:mod:`.model`), the knob rows and image facts the engines'
tables are made of (:mod:`.knobs`, :mod:`.images`), the rules' types (:mod:`.ruleset`), and
what is derived from the engines: the JSON Schema (:mod:`.schema`), the loader (:mod:`.load`),
the generic rules and the one validation entry point (:mod:`.rules`), the capacity planner
applied to a profile (:mod:`.capacity`)."""
