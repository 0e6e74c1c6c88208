#!/usr/bin/env python3
"""bench-tables.py — the markdown tables a benchmark prints, as data.

    tools/bench-tables.py OUTPUT.md DIR

Reads a benchmark's output (the tables tests/bench/* and tools/cold-compile.sh
print), and writes beside it, into DIR, one CSV per table (NAME-N.csv) and one
JSON document for them all (NAME.json: a list of {"title", "columns", "rows"},
the title being the nearest heading above the table). Cells stay text, as printed;
numbers are for the reader or the plotting script (tools/bench-plot.py) to parse.
"""
import csv
import json
import os

import bench_args


def tables(lines):
    """Yields (title, columns, rows) for every markdown table in lines."""
    title, i = "", 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("#"):
            title = line.lstrip("#").strip()
        is_table = (line.startswith("|") and i + 1 < len(lines)
                    and set(lines[i + 1].strip().replace("|", "").split()) <= {"---"}
                    and lines[i + 1].strip().startswith("|"))
        if not is_table:
            i += 1
            continue
        cells = lambda text: [c.strip() for c in text.strip().strip("|").split("|")]
        columns, rows, i = cells(line), [], i + 2
        while i < len(lines) and lines[i].strip().startswith("|"):
            rows.append(cells(lines[i]))
            i += 1
        yield title, columns, rows


def main():
    path, out, name = bench_args.input_and_dir("bench-tables.py OUTPUT.md DIR")
    with open(path, encoding="utf-8") as f:
        found = list(tables(f.read().splitlines()))
    doc = []
    for n, (title, columns, rows) in enumerate(found, 1):
        with open(os.path.join(out, f"{name}-{n}.csv"), "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(columns)
            w.writerows(rows)
        doc.append({"title": title, "columns": columns, "rows": rows})
    with open(os.path.join(out, f"{name}.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{path}: {len(found)} table(s) -> {out}/{name}.json and .csv")


if __name__ == "__main__":
    main()
