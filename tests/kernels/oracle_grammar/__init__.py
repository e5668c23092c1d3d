"""The grammar of tests/kernels/test_kernel_oracle.py: what it draws (``base``: the program, the
value the grammar follows and the first steps; ``extra``: the collectives, loops, closures, nested
kernels and container arguments added later; ``draw``: the strategy ``programs``)."""
