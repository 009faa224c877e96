"""The real-engine check: every rank's rendered command run through the upstream engine's own
parser and start-up checks (:mod:`.check`), in environments built from the release wheels
(:mod:`.upstream`)."""
