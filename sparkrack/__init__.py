"""sparkrack: provision a DGX Spark cluster and serve LLMs across it (typed core + CLI)."""

__version__ = "0.1.0"
