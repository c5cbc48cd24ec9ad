"""Secure aggregation (SecAgg+), CKKS scalar sums and key provisioning. Knows nothing of FedTAR."""
