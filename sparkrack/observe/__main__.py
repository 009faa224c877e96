"""``python -m sparkrack.observe``: write the shipped rules and dashboards."""

from __future__ import annotations

from sparkrack.observe.files import write_all

if __name__ == "__main__":
    for path in write_all():
        print(path)
