"""FM2 (federated dual mixture-of-experts for heterogeneous imaging modalities), seed 001 §3."""
