"""One CKKS + signing key kit per test module: `keydir, secret, settings = he_fixtures(sites)`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import tenseal as ts

from secure_fed.crypto import keys
from secure_fed.crypto.scalars import HESettings


def he_fixtures(sites: Sequence[str]) -> tuple[Any, Any, Any]:
    @pytest.fixture(scope="module")
    def keydir(tmp_path_factory: pytest.TempPathFactory) -> Path:
        root = tmp_path_factory.mktemp("he") / "KEYS"
        keys.init_keys(root, ["server", *sites])
        return root

    @pytest.fixture(scope="module")
    def secret(keydir: Path) -> ts.Context:
        return keys.load_he_context(keys.secret_context_path(keydir), True, keys.load_fingerprints(keydir))

    @pytest.fixture(scope="module")
    def settings(keydir: Path) -> HESettings:
        return HESettings.from_keys_dir(keydir)

    return keydir, secret, settings
