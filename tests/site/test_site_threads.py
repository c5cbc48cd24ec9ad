"""A site's process applies `train.threads` itself: in simulation it is a Ray actor and in a
deployment the SuperNode's, and neither runs the code of `secure-fed run` that sets them."""

from __future__ import annotations

import torch

from secure_fed.site.runtime import SiteRuntime


def test_a_site_runs_on_the_threads_its_config_names(make_config):
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        SiteRuntime.create(make_config(train__threads=1), "site0")
        assert torch.get_num_threads() == 1
        torch.set_num_threads(2)
        SiteRuntime.create(make_config("unset"), "site0")  # unset: torch's default is left alone
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
