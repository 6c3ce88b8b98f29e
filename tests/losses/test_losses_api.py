"""Tests for the flat public API of roxie.losses."""

import inspect

from roxie import losses


def test_all_names_exist_and_are_public_definitions():
  assert len(set(losses.__all__)) == len(losses.__all__)
  for name in losses.__all__:
    assert hasattr(losses, name), name
  defined = {n for n, v in vars(losses).items()
             if not n.startswith('_') and
             (inspect.isfunction(v) or inspect.isclass(v))}
  assert defined == set(losses.__all__)


def test_hyperparameters_are_keyword_only():
  # Hyperparameters come after `*` so call sites name them.
  for fn, names in [
      (losses.n_step_returns, ['n', 'stop_target_gradients']),
      (losses.gae_advantages, ['lambda_']),
      (losses.mpo_m_step, ['epsilon_mean', 'epsilon_std', 'per_dimension']),
      (losses.sac_temperature_loss, ['target_entropy']),
      (losses.twin_categorical_target, ['blend']),
      (losses.clipped_double_q, ['weight']),
      (losses.dpg_loss, ['dqda_clipping']),
      (losses.ppo_value_loss, ['clip_epsilon']),
  ]:
    params = inspect.signature(fn).parameters
    for name in names:
      assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, (fn, name)


def test_n_step_output_fields_match_the_replay_contract():
  assert losses.NStepOutput._fields == ('reward', 'discount', 'last')
  params = list(inspect.signature(losses.n_step_transition).parameters)
  assert params == ['r_t', 'discount_t', 'end_t']
