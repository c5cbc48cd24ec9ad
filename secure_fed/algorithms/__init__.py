"""Federated algorithms, one folder each (its model head, site step and server aggregation) over
the shared federation core: DP-SGD, secure sums, CKKS, the ledger and the audit trail."""
