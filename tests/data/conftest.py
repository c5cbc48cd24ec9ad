from pathlib import Path

import pytest

from secure_fed.data.synthetic import synthesize


@pytest.fixture(scope="session")
def synth_manifest(tmp_path_factory) -> Path:
    return synthesize(tmp_path_factory.mktemp("synth"), sites=3, patients=40, visits=5, seed=3, image_size=32)
