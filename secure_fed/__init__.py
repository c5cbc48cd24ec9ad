"""secure_fed: privacy-hardened FedTAR for hospitals."""

from secure_fed._env import harden_environment

harden_environment()

__version__ = "0.1.0"
