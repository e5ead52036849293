"""opskit's excuse rule for kit queries on a live run: per metric name, never per query."""

from __future__ import annotations

import pytest
from support import opskit

GPU = "hw_gpu_utilization_ratio"
NONFINITE = "verl_training_nonfinite_total"
LOSS = "verl_actor_pg_loss"  # a generic name: there when verl logged actor/pg_loss


def test_an_excused_name_does_not_excuse_the_others_of_its_query():
    present = {LOSS}.__contains__
    assert opskit.excused_names("q", {GPU, LOSS}, {LOSS}, present) == {GPU: f"{GPU} needs a GPU"}
    with pytest.raises(AssertionError, match=r"no series of \['verl_training_step'\]"):
        opskit.excused_names("q", {GPU, "verl_training_step"}, set(), present)  # a catalog name is never excused


def test_an_excuse_holds_only_while_the_run_lacks_the_name():
    assert opskit.excused_names("q", {NONFINITE}, set(), {NONFINITE}.__contains__) == {}  # there: checked
    assert NONFINITE in opskit.excused_names("q", {NONFINITE}, set(), lambda name: False)


def test_a_generic_name_is_excused_only_if_verl_logged_no_key_for_it():
    assert LOSS in opskit.excused_names("q", {LOSS}, set(), lambda name: False)
    with pytest.raises(AssertionError, match=LOSS):
        opskit.excused_names("q", {LOSS}, {LOSS}, lambda name: False)  # logged but not in Prometheus


def test_the_reason_names_what_was_checked_instead():
    excused = {GPU: f"{GPU} needs a GPU"}
    assert opskit.excused_reason(excused, {GPU}) == f"{GPU} needs a GPU"
    assert opskit.excused_reason(excused, {GPU, LOSS}) == f"{GPU} needs a GPU (its other names have series: [{LOSS!r}])"


def test_a_keyed_named_instrument_is_excused_only_while_the_run_logged_none_of_its_keys():
    stale = "verl_training_off_policy_staleness"  # the v1 driver's keys only
    v0 = {LOSS}
    v1 = {LOSS, "verl_training_off_policy_trajectory_staleness_mean"}
    assert "v1 driver" in opskit.excused_names("q", {stale}, v0, lambda name: False)[stale]
    with pytest.raises(AssertionError, match=stale):
        opskit.excused_names("q", {stale}, v1, lambda name: False)  # logged: its named series must be there
    corr = "verl_training_rollout_probs_correlation"
    with pytest.raises(AssertionError, match=corr):
        opskit.excused_names("q", {corr}, {"verl_training_rollout_actor_probs_pearson_corr"}, lambda name: False)
