"""The one check before anything changes: ``sparkrack check`` and the preflight play run it."""
