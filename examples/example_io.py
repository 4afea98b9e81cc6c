"""What the example scripts share for their outputs."""
from __future__ import annotations

import csv
import os


def write_csv(rows: list[dict], path: str) -> None:
    """``rows`` as a CSV at ``path`` (its folder created), with the union of their keys as
    columns in first-seen order; missing values are left empty."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fields = list(dict.fromkeys(k for row in rows for k in row))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {path}")
