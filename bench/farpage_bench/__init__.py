# SPDX-License-Identifier: MIT
"""farpage-bench, the benchmark driver: cli (the command line), runner (the
cluster and the run), one module per family of figures (floors, fault,
farmem, scale, replica, secure), bench (results, figures, rows), results
(the programs' JSON lines), report (the table, the plot, the docs' results
table), cluster and util."""
