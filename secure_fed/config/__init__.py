"""One pydantic tree for every setting of a run, loadable from TOML.

Unknown keys are rejected (``extra="forbid"``) so that a typo in a hospital's policy file is an
error, not a silently ignored privacy setting.

The tree is one, split by whose settings each section holds: `data` (the cohort), `model` (the model
and its training), `federation` (the method, rounds, site policy, FM2), `dp`, `protection` (SecAgg+,
CKKS, signed logs, approved code), `run` (the root and its cross-section checks) and `loading`
(TOML, overrides, error messages).
"""

from secure_fed.config.base import cache_base
from secure_fed.config.data import DataConfig, ImagingConfig, SynthConfig
from secure_fed.config.dp import DPConfig
from secure_fed.config.federation import FedConfig, FM2Config
from secure_fed.config.loading import ConfigError, build_config, load_config
from secure_fed.config.model import CHEXBERT_FILES, ModelConfig, TrainConfig
from secure_fed.config.protection import AuditConfig, DeployConfig, HEConfig, SecAggConfig
from secure_fed.config.run import RunConfig

__all__ = [
    "CHEXBERT_FILES",
    "AuditConfig",
    "ConfigError",
    "DPConfig",
    "DataConfig",
    "DeployConfig",
    "FM2Config",
    "FedConfig",
    "HEConfig",
    "ImagingConfig",
    "ModelConfig",
    "RunConfig",
    "SecAggConfig",
    "SynthConfig",
    "TrainConfig",
    "build_config",
    "cache_base",
    "load_config",
]
