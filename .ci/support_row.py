"""CI's check of the README's support table: the row of one CI environment names the Python and
JAX this environment runs. Run with that environment's interpreter:

    .venv/bin/python .ci/support_row.py default

A stale row fails CI with the row as it should read (a new JAX on the package index changes the
`newest` environment's row: CI is then red until the README says what CI runs).
"""

import pathlib
import platform
import sys

import jax

label = sys.argv[1]
python = ".".join(platform.python_version_tuple()[:2])
readme = pathlib.Path(__file__).resolve().parent.parent / "README.md"
rows = [line for line in readme.read_text().splitlines() if line.startswith(f"| {label} |")]
cells = [c.strip().strip("`") for c in rows[0].strip("|").split("|")] if len(rows) == 1 else []
expected = f"| {label} | {python} | {jax.__version__} |"
if len(cells) < 3 or cells[1] != python or cells[2].split()[0] != jax.__version__:
    found = rows[0] if rows else f"no row starting '| {label} |'" if not rows else f"{len(rows)} rows"
    sys.exit(f"README.md's support table is stale for CI environment {label!r}: it has {found!r}; "
             f"this environment runs Python {python} and JAX {jax.__version__}: {expected} ...")
print(f"support table: {label}: Python {python}, JAX {jax.__version__} (as README.md says)")
