"""bench_args.py — the command line that tools/bench-tables.py and tools/bench-plot.py share."""
import os
import sys


def input_and_dir(usage):
    """(INPUT, OUT_DIR, INPUT's name without its directory or extension) from the
    command line, OUT_DIR made; exits with the usage line when there are not two."""
    if len(sys.argv) != 3:
        sys.exit(f"usage: {usage}")
    src, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    return src, out, os.path.splitext(os.path.basename(src))[0]
