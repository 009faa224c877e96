"""sparkrack's Jinja filters: the table and the code live in sparkrack.adapters.ansible."""

from sparkrack.adapters.ansible import FilterModule

__all__ = ["FilterModule"]
