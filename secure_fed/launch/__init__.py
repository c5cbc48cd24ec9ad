"""Launching the parties: the runner, the run's SuperLink, the Flower apps, TLS material,
a hospital's approved node app, its supervision and preflight."""
