"""The research harness: privacy-utility sweeps of methods × seeds × ε (`sweep.py`, its cells
`cells.py`), the pooled references they set the federated methods against (`centralised.py`), and
their statistics and tables (`share_kept.py`). Its command line is `secure-fed-lab`.

Outside what a hospital approves: no module elsewhere in secure_fed imports secure_fed.lab, not
even inside a function (tests/test_layers.py), and the FAB a site reviews and pins leaves this
folder out (pyproject.toml's fab-exclude; tests/test_fab.py)."""
