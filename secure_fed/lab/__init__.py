"""The research harness: privacy-utility sweeps of methods × seeds × ε and what is read from them.
`sweep.py` runs the cells, `cells.py` says what a cell is (method, config, folder), `records.py`
keeps a sweep folder's records, `references.py` and `centralised.py` train and score the reference
cells (base, local, the pooled central, fine-tuned), `statistics.py` and `share_kept.py` summarise
the cells, `tables.py` writes the tables, plot and pages; `cli.py` is `secure-fed-lab`.

Outside what a hospital approves: no module elsewhere in secure_fed imports secure_fed.lab, not
even inside a function (tests/test_layers.py), and the FAB a site reviews and pins leaves this
folder out (pyproject.toml's fab-exclude; tests/test_fab.py)."""
