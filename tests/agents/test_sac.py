"""SAC: the update on fixed batches (learning: test_learning.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie.agents import sac
from roxie.types import EnvSpec, Transition

SPEC = EnvSpec(task='Toy', obs_size=3, action_size=2, obs_names=(('x', 3),),
               control_timestep=0.01, episode_length=10)
CFG = sac.Config(hidden_sizes=(32, 32), batch_size=16)


def _batch(key, n=16):
  k = jax.random.split(key, 4)
  return Transition(obs=jax.random.normal(k[0], (n, 3)),
                    action=jax.random.uniform(k[1], (n, 2), minval=-1, maxval=1),
                    reward=jax.random.normal(k[2], (n,)),
                    discount=jnp.full((n,), 0.99),
                    next_obs=jax.random.normal(k[3], (n, 3)))


def test_act_shapes_ranges_and_determinism():
  recipe = sac.make(CFG, SPEC)
  state = recipe.init(jax.random.PRNGKey(0), SPEC)
  obs = jnp.ones((5, 3))
  a1, _ = recipe.act(state, obs, jax.random.PRNGKey(1), explore=True)
  a2, _ = recipe.act(state, obs, jax.random.PRNGKey(2), explore=True)
  d1, _ = recipe.act(state, obs, jax.random.PRNGKey(1), explore=False)
  d2, _ = recipe.act(state, obs, jax.random.PRNGKey(2), explore=False)
  assert a1.shape == (5, 2)
  assert np.all(np.abs(a1) <= 1.0)
  assert not np.allclose(a1, a2)  # exploration samples
  np.testing.assert_array_equal(d1, d2)  # the mode ignores the key


def test_update_is_finite_moves_targets_by_tau_and_fits_a_fixed_batch():
  recipe = sac.make(CFG, SPEC)
  state = recipe.init(jax.random.PRNGKey(0), SPEC)
  batch = _batch(jax.random.PRNGKey(3))
  update = jax.jit(recipe.update)
  new, metrics = update(state, batch, jax.random.PRNGKey(4))
  assert all(np.isfinite(float(v)) for v in metrics.values())
  # Polyak: target' = (1 - tau) target + tau online'.
  leaf = lambda p: jax.tree.leaves(p)[0]
  np.testing.assert_allclose(
      leaf(new.target_critic),
      (1 - CFG.tau) * leaf(state.target_critic) + CFG.tau * leaf(new.critic),
      rtol=1e-5, atol=1e-7)
  assert int(new.steps) == 1
  first = float(metrics['critic_loss'])
  for i in range(60):
    new, metrics = update(new, batch, jax.random.PRNGKey(10 + i))
  assert float(metrics['critic_loss']) < first


def test_temperature_falls_when_entropy_exceeds_the_target():
  # A fresh policy has high entropy (std ~1 per dim) against a target of -2:
  # the temperature loss pushes alpha down.
  recipe = sac.make(CFG, SPEC)
  state = recipe.init(jax.random.PRNGKey(0), SPEC)
  new, m = jax.jit(recipe.update)(state, _batch(jax.random.PRNGKey(1)),
                                  jax.random.PRNGKey(2))
  assert float(m['entropy']) > -2.0
  assert float(new.log_alpha) < float(state.log_alpha)


def test_init_rejects_another_spec():
  recipe = sac.make(CFG, SPEC)
  with pytest.raises(ValueError, match='built for observations of size 3'):
    recipe.init(jax.random.PRNGKey(0), SPEC._replace(obs_size=4))
