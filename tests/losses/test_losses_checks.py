"""Tests for the named input checks of roxie.losses (losses/_checks.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie import losses
from roxie.losses import _checks


def test_batched_td_target_names_the_argument_and_suggests_vmap():
  batch = jnp.ones(8)
  with pytest.raises(ValueError) as info:
    losses.td_target(batch, batch, batch)
  message = str(info.value)
  assert 'td_target' in message and '`r_t`' in message
  assert 'rank 0' in message and 'rank 1' in message and '(8,)' in message
  assert 'jax.vmap' in message
  # Code written against chex's AssertionError keeps catching it.
  assert isinstance(info.value, AssertionError)


def test_checks_run_at_trace_time_under_jit():
  # Lowering traces without compiling or running: the error comes from there.
  batch = jnp.ones(8)
  with pytest.raises(ValueError, match=r'`r_t`.*jax\.vmap'):
    jax.jit(losses.td_target).lower(batch, batch, batch)
  with pytest.raises(ValueError, match='`q_t`'):
    jax.eval_shape(losses.ensemble_q_target, jnp.ones(()), jnp.ones(()),
                   jnp.ones((4, 2)))


def test_vmap_is_suggested_only_for_one_extra_axis():
  with pytest.raises(ValueError) as info:
    losses.td_target(jnp.ones(()), jnp.ones(()), jnp.ones((2, 3)))
  assert '`v_t`' in str(info.value) and 'rank 2' in str(info.value)
  assert 'jax.vmap' not in str(info.value)
  # Too LOW a rank is not a batch either.
  with pytest.raises(ValueError) as info:
    losses.gaussian_entropy(jnp.ones(()))
  assert '`std`' in str(info.value) and 'jax.vmap' not in str(info.value)


@pytest.mark.parametrize('call, name', [
    (lambda: losses.categorical_td_loss(
        jnp.zeros(5), jnp.zeros(2), jnp.ones(()), jnp.ones(5) / 5,
        atoms=jnp.linspace(-1., 1., 5)), 'r_t'),
    (lambda: losses.n_step_returns(
        jnp.ones(4), jnp.ones(4), jnp.zeros(4, bool), jnp.ones((3, 4)), n=2),
     'v_t'),
    (lambda: losses.gae_advantages(
        jnp.ones(4), jnp.ones(4), jnp.zeros(4, bool), jnp.ones(4),
        jnp.ones(4), lambda_=jnp.ones(4)), 'lambda_'),
    (lambda: losses.mpo_e_step(jnp.ones((2, 3)), jnp.zeros(())), 'q_values'),
    (lambda: losses.mpo_m_step(
        jnp.ones(2), jnp.ones(2), jnp.ones(2), jnp.ones(2), jnp.ones((3, 2)),
        jnp.ones(3), jnp.zeros(2), jnp.zeros(())), 'log_alpha_mean'),
    (lambda: losses.sac_critic_target(
        jnp.ones(()), jnp.ones(()), jnp.ones(()), jnp.ones(3), alpha=.2),
     'log_prob_t'),
    (lambda: losses.dpg_loss(jnp.ones(2), jnp.ones((4, 2))), 'dqda_t'),
    (lambda: losses.ppo_value_loss(jnp.ones(3), jnp.ones(()), jnp.ones(3)),
     'v_old'),
], ids=['categorical_td_loss', 'n_step_returns', 'gae_advantages',
        'mpo_e_step', 'mpo_m_step', 'sac_critic_target', 'dpg_loss',
        'ppo_value_loss'])
def test_rank_errors_name_the_argument(call, name):
  with pytest.raises(ValueError, match=f'`{name}` must have rank'):
    call()


def test_dtype_and_shape_errors_name_the_arguments():
  with pytest.raises(ValueError,
                     match='n_step_transition: argument `end_t` must have a '
                           'bool dtype, got dtype float32'):
    losses.n_step_transition(jnp.ones(3), jnp.ones(3), jnp.zeros(3))
  with pytest.raises(ValueError, match='`r_t` must have a float dtype'):
    losses.td_target(jnp.ones((), jnp.int32), jnp.ones(()), jnp.ones(()))
  with pytest.raises(ValueError, match=r'`a_t` \(3,\), `dqda_t` \(2,\)'):
    losses.dpg_loss(jnp.ones(3), jnp.ones(2))
  with pytest.raises(ValueError, match=r'`weights` \(4,\), `actions\[:, 0\]`'):
    losses.mpo_m_step(
        jnp.ones(2), jnp.ones(2), jnp.ones(2), jnp.ones(2), jnp.ones((3, 2)),
        jnp.ones(4), jnp.zeros(()), jnp.zeros(()))


def test_helpers_accept_python_scalars_and_rank_sets():
  _checks.check_rank('f', 0, x=.5, y=jnp.ones(()))
  _checks.check_dtype('f', float, x=.5)
  _checks.check_rank('f', {0, 1}, x=jnp.ones(3))
  with pytest.raises(ValueError, match=r'rank 0 or 1, got rank 2.*jax\.vmap'):
    _checks.check_rank('f', {0, 1}, x=jnp.ones((2, 3)))
  with pytest.raises(ValueError, match='int dtype'):
    _checks.check_dtype('f', int, x=.5)
  _checks.check_same_shape('f', x=jnp.ones(2), y=np.ones(2))


def test_correct_inputs_still_pass_under_jit_vmap():
  r = jnp.ones(8)
  out = jax.jit(jax.vmap(losses.td_target))(r, r, r)
  np.testing.assert_allclose(out, 2.)
