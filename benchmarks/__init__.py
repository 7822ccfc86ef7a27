"""Side-by-side benchmarks of plait and LangGraph.

Run ``python -m benchmarks --quick`` for a smoke test with tiny sizes, or ``--full`` for the
sizes that docs/benchmarks.md reports. This package is a tool, not part of plait: it is never
imported by the library or run by the test suite.

Layout:
    _common.py     sizes, timing helpers, scratch databases, the commit floor, environment facts
    lg.py          every workload written for LangGraph (its documented defaults, no tuning)
    pl.py          the same workloads written for plait
    _workloads.py  which cases each workload runs, the alternation, and the targets
    _w7.py         the many-threads workload, run in a child process per library
    _plait_rows.py W8 to W10, plait alone: search, command-line start, workers (reusing
                   search_bench.py, cli_start.py and runs_throughput.py)
    _report.py     the terminal table, the verdicts, JSON lines, the docs table and the plot
    _profile.py    ``--profile``: plait's side under cProfile in every thread
    __main__.py    the command line: choose workloads and backends, alternate the libraries
"""
