#!/usr/bin/env python3
"""bench-plot.py — draws the benchmark tables that tools/bench-tables.py wrote.

    tools/bench-plot.py RESULT.json OUT_DIR

For every table of RESULT.json, and every column of it whose cells are all numbers
(a trailing unit such as "ms" or "×" is allowed), one horizontal bar chart, the
rows labelled by the table's first column(s), saved as NAME-TABLE-COLUMN.png.
Needs matplotlib (Debian's python3-matplotlib).
"""
import json
import os
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import bench_args  # noqa: E402

NUMBER = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*(?:ms|µs|s|×|%|GB/s|TFLOP/s)?\s*$")


def number(cell):
    m = NUMBER.match(cell.replace(" ", "")) if cell else None
    return float(m.group(1)) if m else None


def slug(text):
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "table"


def main():
    src, out, name = bench_args.input_and_dir("bench-plot.py RESULT.json OUT_DIR")
    with open(src, encoding="utf-8") as f:
        doc = json.load(f)
    drawn = 0
    for t, table in enumerate(doc, 1):
        columns, rows = table["columns"], table["rows"]
        if not rows:
            continue
        # Rows are named by the leading text columns (a path and its transport, say).
        lead = 1
        while lead < len(columns) - 1 and all(number(r[lead]) is None for r in rows if lead < len(r)):
            lead += 1
        labels = [" / ".join(r[:lead]) for r in rows]
        for c in range(lead, len(columns)):
            values = [number(r[c]) if c < len(r) else None for r in rows]
            if any(v is None for v in values):
                continue
            fig, ax = plt.subplots(figsize=(8, 0.35 * len(rows) + 1.2))
            ax.barh(range(len(rows)), values, color="#4878a8")
            ax.set_yticks(range(len(rows)), labels, fontsize=8)
            ax.invert_yaxis()
            ax.set_xlabel(columns[c])
            ax.set_title(table["title"] or name, fontsize=9)
            fig.tight_layout()
            path = os.path.join(out, f"{name}-{t}-{slug(columns[c])}.png")
            fig.savefig(path, dpi=110)
            plt.close(fig)
            drawn += 1
            print(path)
    if drawn == 0:
        print(f"{src}: no numeric column to draw")


if __name__ == "__main__":
    main()
